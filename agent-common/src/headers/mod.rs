//! One module per header: offsets, lengths and big-endian getters over fixed byte arrays.
//!
//! Headers are read as `[u8; LEN]` copies through [`crate::PacketReader`] rather than as
//! pointer casts over packet memory (as `network-types` structs are used), because the tc
//! reader copies with `bpf_skb_load_bytes` and the slice reader must never alias a short
//! buffer: a copy of a constant size works the same in all three readers.

pub mod bth;
pub mod encap;
pub mod ethernet;
pub mod ext;
pub mod ipv4;
pub mod ipv6;
pub mod mac_control;
pub mod sll;
pub mod udp;

/// Big-endian u16 from two bytes.
#[inline(always)]
pub const fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

/// Big-endian 24-bit value from three bytes.
#[inline(always)]
pub const fn be24(b: [u8; 3]) -> u32 {
    ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32
}

/// Big-endian u32 from four bytes.
#[inline(always)]
pub const fn be32(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b)
}
