//! The key of a flow (a leaf of the shared vocabulary: the parse result names its flow with
//! it, the flow table and the kernel map are keyed by it).

/// A RoCEv2 flow: (IP version, source, destination, UDP source port, destination QP), plus
/// the hook that saw it, so XDP and tc ingress on one interface never add into one record.
/// The destination port is always 4791. IPv4 addresses sit in the first four bytes.
/// `#[repr(C)]`: 40 bytes, no implicit padding (BPF map key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
