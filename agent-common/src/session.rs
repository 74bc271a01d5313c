//! Per mirror session / tunnel counters: which ERSPAN session, VXLAN network or GRE key the
//! RoCE traffic arrived in, so a collector can tell the mirrored switches (or ports) apart.
//!
//! The set is bounded twice: the kernel map holds [`SESSION_MAP_ENTRIES`] sessions per
//! interface (packets of further sessions are counted in
//! [`crate::HookCounters::session_overflow`]), and the exporter labels only what the map
//! holds. ERSPAN session ids are 10 bits and VNIs 24 bits, so the label never grows without
//! bound either way.

use crate::headers::encap::TunnelKind;
use crate::hook::Hook;
use crate::record::PacketRecord;

/// Sessions tracked per interface.
pub const SESSION_MAP_ENTRIES: u32 = 256;

/// One session of one hook. `#[repr(C)]`, 8 bytes, no padding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(C)]
pub struct SessionKey {
    pub hook: u8,
    /// [`TunnelKind`] discriminant (never 0: plain packets have no session).
    pub kind: u8,
    pub _pad: [u8; 2],
    /// ERSPAN session id, VXLAN VNI or GRE key (0 when the GRE header has none).
    pub id: u32,
}

impl SessionKey {
    /// The session a RoCE packet arrived in, if it came encapsulated.
    #[inline(always)]
    pub fn of(p: &PacketRecord, hook: Hook) -> Option<SessionKey> {
        let kind = p.tunnel_kind();
        if kind as u8 == TunnelKind::None as u8 {
            return None;
        }
        Some(SessionKey {
            hook: hook as u8,
            kind: kind as u8,
            _pad: [0; 2],
            id: p.tunnel_id(),
        })
    }

    /// The key as one scalar (hook, kind, id), to pass it in a register.
    #[inline(always)]
    pub const fn to_bits(&self) -> u64 {
        ((self.hook as u64) << 40) | ((self.kind as u64) << 32) | self.id as u64
    }

    #[inline(always)]
    pub const fn from_bits(b: u64) -> SessionKey {
        SessionKey {
            hook: (b >> 40) as u8,
            kind: (b >> 32) as u8,
            _pad: [0; 2],
            id: b as u32,
        }
    }

    /// The tunnel kind's label ("erspan2", "vxlan", ...).
    pub fn kind_name(&self) -> &'static str {
        TunnelKind::ALL
            .iter()
            .find(|k| **k as u8 == self.kind)
            .map(|k| k.name())
            .unwrap_or("unknown")
    }
}

/// What one session carried. `#[repr(C)]`, only `u64`s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SessionStats {
    pub packets: u64,
    /// Wire bytes of the outer (mirror) frames.
    pub bytes: u64,
    /// Inner packets marked CE.
    pub ce_packets: u64,
    pub cnp_packets: u64,
}

impl SessionStats {
    #[inline(always)]
    pub fn record(&mut self, p: &PacketRecord, frame_len: u64) {
        self.add(Self::flags(p), frame_len);
    }

    /// A packet's CE (bit 0) and CNP (bit 1) flags, as [`SessionStats::add`] takes them.
    #[inline(always)]
    pub fn flags(p: &PacketRecord) -> u64 {
        u64::from(p.is_ce()) | (u64::from(p.is_cnp()) << 1)
    }

    /// Counts one packet from its flags (no branches: cheap for the verifier).
    #[inline(always)]
    pub fn add(&mut self, flags: u64, frame_len: u64) {
        self.packets += 1;
        self.bytes += frame_len;
        self.ce_packets += flags & 1;
        self.cnp_packets += (flags >> 1) & 1;
    }

    pub fn merge(&mut self, o: &SessionStats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.ce_packets += o.ce_packets;
        self.cnp_packets += o.cnp_packets;
    }
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, u8/u32 fields with explicit padding: every bit pattern is valid.
unsafe impl aya::Pod for SessionKey {}
#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, only u64 fields.
unsafe impl aya::Pod for SessionStats {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, LinkType, SliceReader};

    #[test]
    fn plain_packets_have_no_session_and_layout_is_fixed() {
        assert_eq!(core::mem::size_of::<SessionKey>(), 8);
        assert_eq!(core::mem::size_of::<SessionStats>(), 32);
        // A minimal RoCEv2 frame: Ethernet, IPv4 (CE), UDP 4791, BTH SEND ONLY.
        let mut f = vec![0u8; 14 + 20 + 8 + 12];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = 0x03;
        let tl = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&tl.to_be_bytes());
        f[23] = 17;
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f[38..40].copy_from_slice(&20u16.to_be_bytes());
        f[42] = 0x04;
        let info = crate::PacketRecord::from(parse(&SliceReader(&f), LinkType::Ethernet).unwrap());
        assert_eq!(SessionKey::of(&info, Hook::Xdp), None);
        let mut s = SessionStats::default();
        s.record(&info, f.len() as u64);
        assert_eq!((s.packets, s.ce_packets, s.cnp_packets), (1, 1, 0));
    }
}
