//! The oracle for sFlow: tshark's decode of captured sFlow datagrams (PDML, which keeps each
//! field's position). Every field is given to the sample whose bytes hold it, so a sampled
//! header's ECN and its InfiniBand BTH (which tshark dissects after the datagram) are
//! attributed to their sample by position, not by order.

use crate::tshark::available as tshark_available;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// RoCE in samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub packets: u64,
    pub bytes: u64,
    pub cnp: u64,
    /// not_ect, ect1, ect0, ce.
    pub ecn: [u64; 4],
    pub opcodes: BTreeMap<u8, u64>,
}

impl Totals {
    fn add(&mut self, opcode: u8, ecn: u8, bytes: u64, w: u64) {
        self.packets += w;
        self.bytes += bytes * w;
        self.ecn[(ecn & 3) as usize] += w;
        if opcode == 0x81 {
            self.cnp += w;
        }
        *self.opcodes.entry(opcode).or_default() += w;
    }
}

/// What tshark says a capture of sFlow datagrams holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SflowExpected {
    pub datagrams: u64,
    /// From the sequence numbers per (agent, sub-agent): the sum of the gaps.
    pub lost_datagrams: u64,
    pub flow_samples: u64,
    pub counter_samples: u64,
    /// (agent, sub-agent) -> datagrams.
    pub agents: BTreeMap<(String, u32), u64>,
    pub samples: Totals,
    pub estimated: Totals,
}

/// One field of the PDML: name, show, pos.
struct Field {
    name: String,
    show: String,
    pos: usize,
}

fn attr(line: &str, key: &str) -> Option<String> {
    let k = format!(" {key}=\"");
    let i = line.find(&k)? + k.len();
    let j = line[i..].find('"')?;
    Some(line[i..i + j].to_string())
}

fn num(s: &str) -> Result<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).with_context(|| format!("hex {s:?}")),
        None => s.parse().with_context(|| format!("number {s:?}")),
    }
}

/// Runs tshark over `capture`.
pub fn expected(capture: &Path) -> Result<SflowExpected> {
    if !tshark_available() {
        bail!("tshark is not installed; run `cargo xtask setup`");
    }
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(capture).args(["-T", "pdml"]);
    for h in crate::tshark::IB_HEURISTICS {
        cmd.args(["--disable-heuristic", h]);
    }
    let out = cmd.output().context("run tshark")?;
    if !out.status.success() {
        bail!("tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout).context("tshark output is not UTF-8")?;
    let mut e = SflowExpected::default();
    let mut last_seq: BTreeMap<(String, u32), u64> = BTreeMap::new();
    let mut packet: Vec<Field> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("<packet>") {
            packet.clear();
        } else if t.starts_with("</packet>") {
            frame(&mut e, &mut last_seq, &packet)?;
        } else if t.starts_with("<field ") || t.starts_with("<proto ") {
            let Some(pos) = attr(t, "pos") else {
                continue;
            };
            packet.push(Field {
                name: attr(t, "name").unwrap_or_default(),
                show: attr(t, "show").unwrap_or_default(),
                pos: pos.parse().unwrap_or(0),
            });
        }
    }
    Ok(e)
}

fn frame(
    e: &mut SflowExpected,
    last_seq: &mut BTreeMap<(String, u32), u64>,
    f: &[Field],
) -> Result<()> {
    let get = |name: &str| f.iter().find(|x| x.name == name);
    let Some(version) = get("sflow_245.version") else {
        return Ok(());
    };
    if num(&version.show)? != 5 {
        return Ok(());
    }
    e.datagrams += 1;
    let agent = get("sflow_245.agent")
        .or_else(|| get("sflow_245.agent.v6"))
        .map(|x| x.show.clone())
        .unwrap_or_default();
    let sub = get("sflow_245.sub_agent_id").map_or(Ok(0), |x| num(&x.show))? as u32;
    let seq = get("sflow_245.sequence_number").map_or(Ok(0), |x| num(&x.show))?;
    *e.agents.entry((agent.clone(), sub)).or_default() += 1;
    if let Some(last) = last_seq.insert((agent, sub), seq) {
        if seq > last + 1 {
            e.lost_datagrams += seq - last - 1;
        }
    }
    // The samples: (start, end, type).
    let types: Vec<&Field> = f
        .iter()
        .filter(|x| x.name == "sflow_245.sampletype")
        .collect();
    for (i, t) in types.iter().enumerate() {
        let start = t.pos;
        let end = types.get(i + 1).map_or(usize::MAX, |n| n.pos);
        let inside = |name: &'static str| {
            f.iter()
                .filter(move |x| x.name == name && x.pos >= start && x.pos < end)
        };
        match num(&t.show)? {
            2 | 4 => e.counter_samples += 1,
            1 | 3 => {
                e.flow_samples += 1;
                let rate = match inside("sflow.flow_sample.sampling_rate").next() {
                    Some(r) => num(&r.show)?,
                    None => continue,
                };
                let Some(len) = inside("sflow_245.header.frame_length").next() else {
                    continue;
                };
                let len = num(&len.show)?;
                // RoCE: a UDP header to 4791 inside the sampled header, and the BTH tshark
                // dissected right after it.
                let Some(udp) = inside("udp.dstport").find(|u| u.show == "4791") else {
                    continue;
                };
                let bth_at = udp.pos + 6;
                let Some(op) = f
                    .iter()
                    .find(|x| x.name == "infiniband.bth.opcode" && x.pos == bth_at)
                else {
                    continue;
                };
                let ecn = inside("ip.dsfield.ecn")
                    .chain(inside("ipv6.tclass.ecn"))
                    .next()
                    .map_or(Ok(0), |x| num(&x.show))? as u8;
                let opcode = num(&op.show)? as u8;
                e.samples.add(opcode, ecn, len, 1);
                e.estimated.add(opcode, ecn, len, rate);
            }
            _ => {}
        }
    }
    Ok(())
}
