//! The parse result as one flat record of plain integers and flag bits.
//!
//! `Result<RoceInfo, Outcome>` with its `Option` fields is the parser's natural answer, but a
//! BPF program cannot move it through memory: the bytes of a `None` or of the `Ok` side of an
//! `Err` are undefined, LLVM copies them anyway, and the verifier refuses a program that reads
//! an undefined register. The kernel hands a parse result from the parse paths to the global
//! counting function in this shape instead: [`PacketRecord::store`] writes only defined values
//! (absent fields as 0 with their flag clear), [`PacketRecord::load`] rebuilds the result.

use crate::flow_key::FlowKey;
use crate::headers::bth::Bth;
use crate::headers::encap::{Tunnel, TunnelKind};
use crate::headers::mac_control::MacControl;
use crate::hook::Hook;
use crate::info::{Aeth, Deth, Parsed, RoceInfo};
use crate::opcode::OPCODE_CNP;
use crate::outcome::Outcome;

const OK: u8 = 1;
const HAS_RETH: u8 = 2;
const HAS_AETH: u8 = 4;
const HAS_DETH: u8 = 8;
const HAS_PCP: u8 = 16;
/// A MAC control frame: the `mac_*` fields hold it.
const MAC: u8 = 32;

const SE: u8 = 1;
const MIG_REQ: u8 = 2;
const FECN: u8 = 4;
const BECN: u8 = 8;
const ACK_REQ: u8 = 16;

/// One parse result. `#[repr(C)]`, 104 bytes, no implicit padding, 8-byte aligned.
///
/// It starts with the packet's [`FlowKey`], so the kernel looks its flow up with a pointer
/// into this record (the counting hook's byte is written just before): no key is built on
/// the stack, and no 16-byte address is copied twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct PacketRecord {
    /// Source, destination, UDP source port, IP version, destination QP; `hook` is the
    /// counting side's (0 as stored).
    pub key: FlowKey,
    pub reth_dma_len: u32,
    pub aeth_msn: u32,
    pub deth_qkey: u32,
    pub deth_src_qp: u32,
    pub tunnel_id: u32,
    pub psn: u32,
    /// [`Outcome`] discriminant (the error, or the RoCE outcome).
    pub outcome: u32,
    pub udp_len: u16,
    pub pkey: u16,
    pub ecn: u8,
    pub vlan_tags: u8,
    /// [`TunnelKind`] discriminant.
    pub tunnel_kind: u8,
    pub opcode: u8,
    /// SE, MigReq, FECN, BECN, AckReq bits.
    pub bth_flags: u8,
    pub pad_count: u8,
    pub tver: u8,
    pub aeth_syndrome: u8,
    /// OK, HAS_RETH, HAS_AETH, HAS_DETH, HAS_PCP, MAC bits.
    pub flags: u8,
    pub dscp: u8,
    /// 802.1p priority of the outermost tag (valid with HAS_PCP).
    pub pcp: u8,
    pub _pad: u8,
    /// A MAC control frame (flag MAC): opcode, class-enable vector, pause times.
    pub mac_opcode: u16,
    pub mac_class_enable: u16,
    pub mac_times: [u16; 8],
}

/// The fast path writes into anything that holds a record (the kernel's per-CPU state).
impl AsMut<PacketRecord> for PacketRecord {
    fn as_mut(&mut self) -> &mut PacketRecord {
        self
    }
}

/// The outcome with discriminant `i`. A compare and the value itself, not a table lookup or a
/// modulus: the verifier then knows the range of what counters index with (a value loaded
/// from a table is unknown to it, and LLVM drops the masks it believes redundant).
#[inline(always)]
fn outcome_of(i: u32) -> Outcome {
    if (i as usize) < Outcome::COUNT {
        // SAFETY: `Outcome` is `#[repr(u32)]` with the discriminants 0..COUNT (tested).
        unsafe { core::mem::transmute::<u32, Outcome>(i) }
    } else {
        Outcome::NotIp
    }
}

/// The tunnel kind with discriminant `i` (as [`outcome_of`]).
#[inline(always)]
fn tunnel_kind_of(i: u8) -> TunnelKind {
    if (i as usize) < TunnelKind::ALL.len() {
        // SAFETY: `TunnelKind` is `#[repr(u8)]` with the discriminants 0..ALL.len() (tested).
        unsafe { core::mem::transmute::<u8, TunnelKind>(i) }
    } else {
        TunnelKind::None
    }
}

#[inline(always)]
const fn bit(on: bool, b: u8) -> u8 {
    if on {
        b
    } else {
        0
    }
}

impl From<&Parsed> for PacketRecord {
    /// The record of a parse result (what [`PacketRecord::store`] writes).
    #[inline(always)]
    fn from(p: &Parsed) -> PacketRecord {
        let mut r = PacketRecord::default();
        r.store(p);
        r
    }
}

impl From<RoceInfo> for PacketRecord {
    #[inline(always)]
    fn from(info: RoceInfo) -> PacketRecord {
        PacketRecord::from(&Parsed::Roce(info))
    }
}

impl PacketRecord {
    /// The flow key as the flow cache's five words ([`KeyWords`](crate::flow_key::KeyWords)): two word loads
    /// per address instead of byte loads (the key is the first field of an 8-aligned record).
    #[inline(always)]
    pub fn key_words(&self) -> crate::flow_key::KeyWords {
        const _: () = assert!(core::mem::offset_of!(PacketRecord, key) == 0);
        // SAFETY: the record is 8-aligned and the key, 40 bytes of plain integers, is at
        // offset 0: an aligned read of five words.
        unsafe { core::ptr::read(self as *const PacketRecord as *const crate::flow_key::KeyWords) }
    }

    /// The source address as two native-endian words (its bytes 0..8 and 8..16), for
    /// [`crate::ring::lane_of_words`]: two loads where the bytes took sixteen.
    #[inline(always)]
    pub fn src_words(&self) -> (u64, u64) {
        // SAFETY: as in `key_words`: the source address is the key's first field, at
        // offset 0 of the 8-aligned record.
        let w = unsafe { core::ptr::read(self as *const PacketRecord as *const [u64; 2]) };
        (w[0], w[1])
    }

    /// Writes a parse result. For a frame that is not RoCE only the outcome, the flags and
    /// (for a MAC control frame) the `mac_*` fields are written: nothing else is read back.
    #[inline(always)]
    pub fn store(&mut self, parsed: &Parsed) {
        let info = match parsed {
            Parsed::Other(o) => {
                self.outcome = *o as u32;
                self.flags = 0;
                return;
            }
            Parsed::MacControl(m) => {
                self.outcome = Outcome::MacControl as u32;
                self.flags = MAC;
                self.mac_opcode = m.opcode;
                self.mac_class_enable = m.class_enable;
                self.mac_times = m.times;
                return;
            }
            Parsed::Roce(info) => info,
        };
        self.store_roce(info);
    }

    /// Writes a RoCE packet (the RoCE arm of [`Self::store`]) with the setters the parsers
    /// write through: one encoding of every field and flag.
    #[inline(always)]
    fn store_roce(&mut self, info: &RoceInfo) {
        self.key.src = info.src;
        self.key.dst = info.dst;
        self.begin_roce(info.ip_version, info.ecn, info.dscp);
        self.set_l2(info.vlan_tags, info.pcp);
        self.set_udp(info.sport, info.udp_len);
        self.set_tunnel(info.tunnel);
        self.set_bth(&info.bth);
        self.set_ext(info.outcome, info.reth_dma_len, info.aeth, info.deth);
    }

    /// Starts a RoCE packet: its IP layer (the parser writes the key's addresses as it reads
    /// them). The other `set_` calls then fill the rest; a parser that finds the frame is not
    /// RoCE after all stores its outcome instead, which clears the record's RoCE flag.
    #[inline(always)]
    pub(crate) fn begin_roce(&mut self, ip_version: u8, ecn: u8, dscp: u8) {
        self.flags = OK;
        self.key.ip_version = ip_version;
        self.key.hook = 0;
        self.ecn = ecn;
        self.dscp = dscp;
    }

    /// The (inner) frame's tags walked and its outermost tag's priority.
    #[inline(always)]
    pub(crate) fn set_l2(&mut self, vlan_tags: u8, pcp: Option<u8>) {
        self.vlan_tags = vlan_tags;
        (self.pcp, self.flags) = match pcp {
            Some(p) => (p, self.flags | HAS_PCP),
            None => (0, self.flags & !HAS_PCP),
        };
    }

    /// The UDP source port (the flow's) and the datagram's length.
    #[inline(always)]
    pub(crate) fn set_udp(&mut self, sport: u16, udp_len: u16) {
        self.key.sport = sport;
        self.udp_len = udp_len;
    }

    #[inline(always)]
    pub(crate) fn set_tunnel(&mut self, t: Tunnel) {
        self.tunnel_id = t.id;
        self.tunnel_kind = t.kind as u8;
    }

    #[inline(always)]
    pub(crate) fn set_bth(&mut self, b: &Bth) {
        self.key.dest_qp = b.dest_qp;
        self.psn = b.psn;
        self.pkey = b.pkey;
        self.opcode = b.opcode;
        self.bth_flags = bit(b.se, SE)
            | bit(b.mig_req, MIG_REQ)
            | bit(b.fecn, FECN)
            | bit(b.becn, BECN)
            | bit(b.ack_req, ACK_REQ);
        self.pad_count = b.pad_count;
        self.tver = b.tver;
    }

    /// The extension headers the opcode has (absent ones as 0 with their flag clear) and the
    /// RoCE outcome (`RoceExtTruncated` when one was cut short).
    #[inline(always)]
    pub(crate) fn set_ext(
        &mut self,
        outcome: Outcome,
        reth: Option<u32>,
        aeth: Option<Aeth>,
        deth: Option<Deth>,
    ) {
        let mut flags = self.flags & !(HAS_RETH | HAS_AETH | HAS_DETH);
        self.outcome = outcome as u32;
        self.reth_dma_len = match reth {
            Some(v) => {
                flags |= HAS_RETH;
                v
            }
            None => 0,
        };
        (self.aeth_syndrome, self.aeth_msn) = match aeth {
            Some(a) => {
                flags |= HAS_AETH;
                (a.syndrome, a.msn)
            }
            None => (0, 0),
        };
        (self.deth_qkey, self.deth_src_qp) = match deth {
            Some(d) => {
                flags |= HAS_DETH;
                (d.qkey, d.src_qp)
            }
            None => (0, 0),
        };
        self.flags = flags;
    }

    /// Whether this record holds a RoCE packet (else only [`Self::outcome`] means anything,
    /// and [`Self::mac_control`] for a MAC control frame).
    #[inline(always)]
    pub fn is_roce(&self) -> bool {
        self.flags & OK != 0
    }

    /// The MAC control frame this record holds, if it holds one.
    #[inline(always)]
    pub fn mac_control(&self) -> Option<MacControl> {
        self.when(
            MAC,
            MacControl {
                opcode: self.mac_opcode,
                class_enable: self.mac_class_enable,
                times: self.mac_times,
            },
        )
    }

    /// A tag the kernel took out of the frame before the program ran (VLAN acceleration:
    /// tc sees it in `skb->vlan_tci`) was the outermost: its priority is the packet's. Not for
    /// a tunnelled packet, whose priority is its inner frame's.
    #[inline(always)]
    pub fn outer_tag(&mut self, tci: u16) {
        if self.flags & OK != 0 && self.tunnel_kind == 0 {
            self.pcp = (tci >> 13) as u8;
            self.flags |= HAS_PCP;
        }
    }

    /// The 802.1p priority of a RoCE packet's outermost tag, if tagged.
    #[inline(always)]
    pub fn pcp(&self) -> Option<u8> {
        self.when(HAS_PCP, self.pcp & 7)
    }

    /// `v` when the record's `flag` is set: the field it guards holds a value.
    #[inline(always)]
    fn when<T>(&self, flag: u8, v: T) -> Option<T> {
        if self.flags & flag != 0 {
            Some(v)
        } else {
            None
        }
    }

    /// The frame's outcome ([`Outcome::Roce`] or [`Outcome::RoceExtTruncated`] for RoCE).
    #[inline(always)]
    pub fn outcome(&self) -> Outcome {
        outcome_of(self.outcome)
    }

    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.opcode
    }

    /// ECN codepoint (two bits).
    #[inline(always)]
    pub fn ecn(&self) -> u8 {
        self.ecn
    }

    /// DSCP (six bits).
    #[inline(always)]
    pub fn dscp(&self) -> u8 {
        self.dscp
    }

    #[inline(always)]
    pub fn psn(&self) -> u32 {
        self.psn
    }

    #[inline(always)]
    pub fn tunnel_id(&self) -> u32 {
        self.tunnel_id
    }

    /// The UDP length field (header included), clipped to the IP payload.
    #[inline(always)]
    pub fn udp_len(&self) -> u16 {
        self.udp_len
    }

    /// The BTH pad count.
    #[inline(always)]
    pub fn pad_count(&self) -> u8 {
        self.pad_count
    }

    #[inline(always)]
    pub fn is_cnp(&self) -> bool {
        self.opcode == OPCODE_CNP
    }

    /// The flow this packet belongs to, as seen by `hook`.
    #[inline(always)]
    pub fn flow_key(&self, hook: Hook) -> FlowKey {
        FlowKey {
            hook: hook as u8,
            ..self.key
        }
    }

    #[inline(always)]
    pub fn becn(&self) -> bool {
        self.bth_flags & BECN != 0
    }

    #[inline(always)]
    pub fn fecn(&self) -> bool {
        self.bth_flags & FECN != 0
    }

    #[inline(always)]
    pub fn tunnel_kind(&self) -> TunnelKind {
        tunnel_kind_of(self.tunnel_kind)
    }

    #[inline(always)]
    pub fn aeth_syndrome(&self) -> Option<u8> {
        self.when(HAS_AETH, self.aeth_syndrome)
    }

    #[inline(always)]
    pub fn reth_dma_len(&self) -> Option<u32> {
        self.when(HAS_RETH, self.reth_dma_len)
    }

    /// Whether the AF_XDP capture mode hands this frame to userspace (as
    /// [`crate::parse::Parsed::captured`] on the result).
    #[inline(always)]
    pub fn captured(&self) -> bool {
        self.flags & OK != 0 || outcome_of(self.outcome).captured()
    }

    /// The parse result [`store`](Self::store) wrote. Values no store writes (which only a
    /// corrupted record holds) map to the nearest valid ones instead of failing.
    #[inline(always)]
    pub fn load(&self) -> Parsed {
        let outcome = outcome_of(self.outcome);
        if self.flags & OK == 0 {
            return match self.mac_control() {
                Some(m) => Parsed::MacControl(m),
                None => Parsed::Other(outcome),
            };
        }
        let kind = tunnel_kind_of(self.tunnel_kind);
        Parsed::Roce(RoceInfo {
            outcome,
            ip_version: self.key.ip_version,
            ecn: self.ecn,
            src: self.key.src,
            dst: self.key.dst,
            sport: self.key.sport,
            udp_len: self.udp_len,
            vlan_tags: self.vlan_tags,
            dscp: self.dscp,
            pcp: self.pcp(),
            tunnel: Tunnel {
                kind,
                id: self.tunnel_id,
            },
            bth: Bth {
                opcode: self.opcode,
                se: self.bth_flags & SE != 0,
                mig_req: self.bth_flags & MIG_REQ != 0,
                pad_count: self.pad_count,
                tver: self.tver,
                pkey: self.pkey,
                fecn: self.bth_flags & FECN != 0,
                becn: self.bth_flags & BECN != 0,
                dest_qp: self.key.dest_qp,
                ack_req: self.bth_flags & ACK_REQ != 0,
                psn: self.psn,
            },
            reth_dma_len: self.reth_dma_len(),
            aeth: self.when(
                HAS_AETH,
                Aeth {
                    syndrome: self.aeth_syndrome,
                    msn: self.aeth_msn,
                },
            ),
            deth: self.when(
                HAS_DETH,
                Deth {
                    qkey: self.deth_qkey,
                    src_qp: self.deth_src_qp,
                },
            ),
        })
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
