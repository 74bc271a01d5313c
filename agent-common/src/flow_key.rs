//! The key of a flow (a leaf of the shared vocabulary: the parse result names its flow with
//! it, the flow table and the kernel map are keyed by it).

/// A RoCEv2 flow: (IP version, source, destination, UDP source port, destination QP), plus
/// the hook that saw it, so XDP and tc ingress on one interface never add into one record.
/// The destination port is always 4791. IPv4 addresses sit in the first four bytes.
/// `#[repr(C)]`: 40 bytes, no implicit padding (BPF map key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, align(8))]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub ip_version: u8,
    /// [`crate::Hook`] discriminant (0 for captures).
    pub hook: u8,
    pub dest_qp: u32,
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, explicit padding fields, plain integers: every bit pattern is valid.
unsafe impl aya::Pod for FlowKey {}

/// Five 64-bit words, where the derived hash writes ten fields (the addresses each as a length
/// and two words): `analyze`'s flow table hashes a key for every packet. Equal keys write
/// equal words, as `Eq` requires.
impl core::hash::Hash for FlowKey {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        let word = |b: &[u8; 16], half: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[half * 8..half * 8 + 8]);
            u64::from_ne_bytes(w)
        };
        state.write_u64(word(&self.src, 0));
        state.write_u64(word(&self.src, 1));
        state.write_u64(word(&self.dst, 0));
        state.write_u64(word(&self.dst, 1));
        state.write_u64(
            u64::from(self.sport)
                | u64::from(self.ip_version) << 16
                | u64::from(self.hook) << 24
                | u64::from(self.dest_qp) << 32,
        );
    }
}

/// A flow key as five words, the form the kernel's flow cache hashes and compares
/// ([`crate::flow_cache`]).
pub type KeyWords = [u64; 5];

/// An IPv4 flow's [`FlowKey`] in 16 bytes: the key of the kernel's IPv4 flow map. The
/// kernel hashes and compares a flow key on every RoCE packet, and the hash map's cost grows
/// with the key (jhash over 4 words instead of 10, a 16-byte compare instead of 40):
/// measured about 15 ns less per packet. IPv6 flows keep the full key in their own map.
/// `#[repr(C)]`: 16 bytes, no implicit padding (BPF map key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C, align(4))]
pub struct FlowKey4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub sport: u16,
    /// [`crate::Hook`] discriminant.
    pub hook: u8,
    pub _pad: u8,
    pub dest_qp: u32,
}

#[cfg(feature = "user")]
// SAFETY: as for `FlowKey`.
unsafe impl aya::Pod for FlowKey4 {}

impl FlowKey4 {
    /// The compact key of an IPv4 flow (the caller checks `k.ip_version == 4`).
    #[inline(always)]
    pub fn of(k: &FlowKey) -> FlowKey4 {
        FlowKey4 {
            src: [k.src[0], k.src[1], k.src[2], k.src[3]],
            dst: [k.dst[0], k.dst[1], k.dst[2], k.dst[3]],
            sport: k.sport,
            hook: k.hook,
            _pad: 0,
            dest_qp: k.dest_qp,
        }
    }

    /// The full key it stands for.
    #[inline(always)]
    pub fn key(&self) -> FlowKey {
        let mut k = FlowKey {
            sport: self.sport,
            ip_version: 4,
            hook: self.hook,
            dest_qp: self.dest_qp,
            ..FlowKey::default()
        };
        k.src[..4].copy_from_slice(&self.src);
        k.dst[..4].copy_from_slice(&self.dst);
        k
    }
}

/// The address stored in a flow key (IPv4 in the first four bytes).
pub fn addr(ip_version: u8, bytes: &[u8; 16]) -> core::net::IpAddr {
    if ip_version == 4 {
        core::net::IpAddr::V4(core::net::Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))
    } else {
        core::net::IpAddr::V6(core::net::Ipv6Addr::from(*bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_key_is_16_bytes() {
        assert_eq!(core::mem::size_of::<FlowKey4>(), 16);
        assert_eq!(core::mem::size_of::<FlowKey>(), 40);
    }

    #[test]
    fn an_ipv4_key_survives_the_compact_form() {
        let k = FlowKey {
            src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sport: 49152,
            ip_version: 4,
            hook: 2,
            dest_qp: 0x00ab_cdef,
        };
        assert_eq!(FlowKey4::of(&k).key(), k);
    }

    /// Every byte of the key reaches its hash (a byte left out would still be correct, but
    /// flows differing only there would share a hash).
    #[test]
    fn every_byte_of_the_key_is_hashed() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hash = |k: &FlowKey| {
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(k)
        };
        let base = FlowKey::default();
        let mut changed: Vec<FlowKey> = Vec::new();
        for i in 0..16 {
            let mut k = base;
            k.src[i] = 1;
            changed.push(k);
            let mut k = base;
            k.dst[i] = 1;
            changed.push(k);
        }
        changed.push(FlowKey { sport: 1, ..base });
        changed.push(FlowKey {
            sport: 0x100,
            ..base
        });
        changed.push(FlowKey {
            ip_version: 4,
            ..base
        });
        changed.push(FlowKey { hook: 1, ..base });
        changed.push(FlowKey { dest_qp: 1, ..base });
        changed.push(FlowKey {
            dest_qp: 1 << 31,
            ..base
        });
        for k in &changed {
            assert_ne!(hash(k), hash(&base), "{k:?}");
        }
    }
}
