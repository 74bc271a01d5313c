//! The independent oracle: what tshark's InfiniBand dissector says a capture holds.
//!
//! tshark decodes UDP port 4791 as InfiniBand (RoCEv2). Its InfiniBand payload heuristics
//! (SMB Direct, NVMe-RDMA, ...) are switched off, and IP reassembly too, so each frame is
//! decoded on its own. A frame counts as RoCE when its UDP destination port is 4791 and tshark
//! decoded a BTH PSN (the BTH's last field: the BTH is complete).

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// InfiniBand payload heuristics that tshark 4.0 registers; all switched off.
pub const IB_HEURISTICS: &[&str] = &[
    "smcr_infiniband",
    "smb_direct_infiniband",
    "rpcrdma_infiniband",
    "nvme_rdma",
    "lnet_ib",
    "iser_infiniband",
    "eth_over_ib",
    "sdp_infiniband",
    "fc_infiniband",
    "drbd_rdma",
];

const FIELDS: &[&str] = &[
    "frame.len",
    "udp.dstport",
    "udp.srcport",
    "infiniband.bth.opcode",
    "infiniband.bth.psn",
    "infiniband.bth.destqp",
    "ip.dsfield.ecn",
    "ipv6.tclass",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "infiniband.aeth.syndrome",
    "infiniband.reth.dmalen",
    "vxlan.vni",
    "erspan.spanid",
    "erspan.version",
    "gre.proto",
    "gre.key",
    "frame.protocols",
    // 20..: the lossless fabric
    "macc.opcode",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c0",
    "macc.cbfc.pause_time.c1",
    "macc.cbfc.pause_time.c2",
    "macc.cbfc.pause_time.c3",
    "macc.cbfc.pause_time.c4",
    "macc.cbfc.pause_time.c5",
    "macc.cbfc.pause_time.c6",
    "macc.cbfc.pause_time.c7",
    "macc.pause_time",
    "ip.dsfield.dscp",
    "ipv6.tclass.dscp",
    "vlan.priority",
    // 34: tshark's malformed-packet mark
    "_ws.malformed",
];

/// The traffic class rule the oracle applies (the documented defaults): RoCE on DSCP 26 and,
/// when tagged, priority 3; CNPs on DSCP 48.
const ROCE_DSCP: u64 = 26;
const ROCE_PRIORITY: u64 = 3;
const CNP_DSCP: u64 = 48;

/// PFC per priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PfcPriority {
    pub xoff: u64,
    pub xon: u64,
    pub quanta: u64,
}

/// Per-flow expectations (packets, bytes, CE-marked packets, CNPs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlowExpect {
    pub packets: u64,
    pub bytes: u64,
    pub ecn_ce: u64,
    pub cnp: u64,
}

/// What tshark says a capture holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Expected {
    pub frames: u64,
    pub roce_packets: u64,
    pub roce_bytes: u64,
    pub cnp: u64,
    /// By codepoint: not_ect, ect1, ect0, ce (index = the two ECN bits).
    pub ecn: [u64; 4],
    /// opcode -> (packets, bytes)
    pub opcodes: BTreeMap<u8, (u64, u64)>,
    /// (src, dst, sport, dest_qp) -> counts
    pub flows: BTreeMap<(String, String, u16, u32), FlowExpect>,
    /// The flows' keys in the order of their first packet.
    pub flow_order: Vec<(String, String, u16, u32)>,
    /// Frames to UDP port 4791 without a complete BTH.
    pub port_4791_without_bth: u64,
    /// AETH syndromes seen: syndrome -> packets
    pub aeth_syndromes: BTreeMap<u8, u64>,
    /// Sum of RETH DMA lengths of RC and UC packets (opcodes below 0x40). tshark 4.0 is no
    /// oracle for the others: it reads a Reliable Datagram packet's RDETH 8 bytes late (it
    /// shows the DETH's second word as the RDETH) and does not decode XRC's extension
    /// headers at all ("Unknown/Vendor Specific Data").
    pub reth_dma_len_sum: u64,
    /// RoCE packets by mirror session or tunnel: (kind, id) with kind vxlan, erspan2,
    /// erspan3 or gre (id: VNI, ERSPAN session id, GRE key or 0).
    pub sessions: BTreeMap<(String, u32), u64>,
    /// PFC frames (opcode 0x0101) and, per priority, XOFF / XON / quanta.
    pub pfc_frames: u64,
    pub pfc: [PfcPriority; 8],
    /// 802.3x PAUSE frames (opcode 0x0001), those with time 0, summed quanta.
    pub pause_frames: u64,
    pub pause_xon: u64,
    pub pause_quanta: u64,
    /// MAC control frames of other opcodes.
    pub mac_control_other: u64,
    /// RoCE packets (CNPs included): DSCP -> (packets, bytes).
    pub dscp: BTreeMap<u8, (u64, u64)>,
    /// CNPs: DSCP -> (packets, bytes).
    pub cnp_dscp: BTreeMap<u8, (u64, u64)>,
    /// Tagged RoCE: 802.1p priority -> (packets, bytes); CNPs alone in `cnp_pcp`.
    pub pcp: BTreeMap<u8, (u64, u64)>,
    pub cnp_pcp: BTreeMap<u8, (u64, u64)>,
    /// RoCE (not CNPs) outside DSCP 26 / priority 3: (packets, bytes).
    pub lossy_roce: (u64, u64),
    /// CNPs outside DSCP 48.
    pub cnp_out_of_class: u64,
    /// Mirror encapsulations cut inside their own header (tshark: a malformed GRE, VXLAN or
    /// ERSPAN header, the last protocol it decoded).
    pub broken_mirrors: u64,
}

impl Expected {
    /// Adds another capture's sums (several captures replayed one after the other): the
    /// totals, opcodes, flows, sessions, frames without a BTH and broken mirrors.
    pub fn add(&mut self, e: Expected) {
        self.frames += e.frames;
        self.roce_packets += e.roce_packets;
        self.roce_bytes += e.roce_bytes;
        self.cnp += e.cnp;
        for i in 0..4 {
            self.ecn[i] += e.ecn[i];
        }
        for (op, (n, b)) in e.opcodes {
            let x = self.opcodes.entry(op).or_default();
            x.0 += n;
            x.1 += b;
        }
        for (k, f) in e.flows {
            let x = self.flows.entry(k).or_default();
            x.packets += f.packets;
            x.bytes += f.bytes;
            x.ecn_ce += f.ecn_ce;
            x.cnp += f.cnp;
        }
        for (k, n) in e.sessions {
            *self.sessions.entry(k).or_default() += n;
        }
        self.port_4791_without_bth += e.port_4791_without_bth;
        self.broken_mirrors += e.broken_mirrors;
    }
}

fn num(s: &str) -> Result<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).with_context(|| format!("hex {s:?}"));
    }
    s.parse::<u64>().with_context(|| format!("number {s:?}"))
}

/// Whether tshark is installed.
pub fn available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A MAC control frame: `c` holds opcode, class-enable vector, eight PFC times, PAUSE time.
fn mac_control(e: &mut Expected, c: &[&str]) -> Result<()> {
    match num(c[0])? {
        0x0101 => {
            e.pfc_frames += 1;
            let enabled = num(c[1])?;
            for p in 0..8 {
                if enabled & (1 << p) == 0 {
                    continue;
                }
                let t = num(c[2 + p])?;
                if t == 0 {
                    e.pfc[p].xon += 1;
                } else {
                    e.pfc[p].xoff += 1;
                    e.pfc[p].quanta += t;
                }
            }
        }
        0x0001 => {
            e.pause_frames += 1;
            let t = num(c[10])?;
            if t == 0 {
                e.pause_xon += 1;
            }
            e.pause_quanta += t;
        }
        _ => e.mac_control_other += 1,
    }
    Ok(())
}

/// Runs tshark over `capture` and sums what it decoded.
pub fn expected(capture: &Path) -> Result<Expected> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(capture);
    cmd.args(["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"]);
    for h in IB_HEURISTICS {
        cmd.args(["--disable-heuristic", h]);
    }
    // The last occurrence of each field: the innermost headers of a mirrored or tunnelled frame
    // (the same as the first for plain frames).
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=l"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .context("run tshark (install it with `cargo xtask setup`)")?;
    if !out.status.success() {
        bail!(
            "tshark failed on {}: {}",
            capture.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout).context("tshark output is not UTF-8")?;
    let mut e = Expected::default();
    for line in text.lines() {
        let c: Vec<&str> = line.split('\t').collect();
        if c.len() < FIELDS.len() {
            bail!("tshark line with {} fields: {line:?}", c.len());
        }
        e.frames += 1;
        let len = num(c[0])?;
        let last = c[19].rsplit(':').next().unwrap_or("");
        if !c[34].is_empty() && matches!(last, "gre" | "vxlan" | "erspan") {
            e.broken_mirrors += 1;
        }
        if !c[20].is_empty() {
            mac_control(&mut e, &c[20..31])?;
            continue;
        }
        if c[1].is_empty() || num(c[1])? != 4791 {
            continue;
        }
        if c[4].is_empty() {
            e.port_4791_without_bth += 1;
            continue;
        }
        let opcode = num(c[3])? as u8;
        let dest_qp = num(c[5])? as u32;
        // The innermost IP header is the last `ip` or `ipv6` in the protocol stack: with
        // IPv6 inside an IPv4 tunnel, the last `ip.*` occurrence is the outer header.
        let inner_v6 = c[19]
            .split(':')
            .rev()
            .find(|p| *p == "ip" || *p == "ipv6")
            .with_context(|| format!("RoCE frame without an IP layer: {line:?}"))?
            == "ipv6";
        let (ecn, src, dst) = if inner_v6 {
            ((num(c[7])? & 3) as u8, c[10], c[11])
        } else {
            (num(c[6])? as u8, c[8], c[9])
        };
        e.roce_packets += 1;
        e.roce_bytes += len;
        let dscp = if inner_v6 { num(c[32])? } else { num(c[31])? };
        let pcp = if c[33].is_empty() {
            None
        } else {
            Some(num(c[33])?)
        };
        let add = |m: &mut BTreeMap<u8, (u64, u64)>, k: u64| {
            let x = m.entry(k as u8).or_default();
            x.0 += 1;
            x.1 += len;
        };
        add(&mut e.dscp, dscp);
        if let Some(p) = pcp {
            add(&mut e.pcp, p);
        }
        if opcode == 0x81 {
            add(&mut e.cnp_dscp, dscp);
            if let Some(p) = pcp {
                add(&mut e.cnp_pcp, p);
            }
            if dscp != CNP_DSCP {
                e.cnp_out_of_class += 1;
            }
        } else if dscp != ROCE_DSCP || pcp.is_some_and(|p| p != ROCE_PRIORITY) {
            e.lossy_roce.0 += 1;
            e.lossy_roce.1 += len;
        }
        e.ecn[ecn as usize] += 1;
        let o = e.opcodes.entry(opcode).or_default();
        o.0 += 1;
        o.1 += len;
        let key = (src.to_string(), dst.to_string(), num(c[2])? as u16, dest_qp);
        if !e.flows.contains_key(&key) {
            e.flow_order.push(key.clone());
        }
        let fl = e.flows.entry(key).or_default();
        fl.packets += 1;
        fl.bytes += len;
        if ecn == 3 {
            fl.ecn_ce += 1;
        }
        if opcode == 0x81 {
            e.cnp += 1;
            fl.cnp += 1;
        }
        if !c[12].is_empty() {
            *e.aeth_syndromes.entry(num(c[12])? as u8).or_default() += 1;
        }
        if !c[13].is_empty() && opcode < 0x40 {
            e.reth_dma_len_sum += num(c[13])?;
        }
        let session = if !c[14].is_empty() {
            Some(("vxlan".to_string(), num(c[14])? as u32))
        } else if !c[15].is_empty() {
            let kind = if num(c[16])? == 2 {
                "erspan3"
            } else {
                "erspan2"
            };
            Some((kind.to_string(), num(c[15])? as u32))
        } else if !c[17].is_empty() {
            let key = if c[18].is_empty() {
                0
            } else {
                num(c[18])? as u32
            };
            Some(("gre".to_string(), key))
        } else {
            None
        };
        if let Some(k) = session {
            *e.sessions.entry(k).or_default() += 1;
        }
    }
    Ok(e)
}
