//! IPv6 fixed header (RFC 8200) and the extension headers the parser walks.
//!
//! Skipped (walked over) before UDP: Hop-by-Hop Options (0), Routing (43), Destination
//! Options (60) and a Fragment header (44) of a first fragment. At most
//! [`MAX_EXT_HEADERS`] of them, a fixed bound the verifier accepts. A later fragment
//! (offset != 0) is not RoCE to us (no UDP header), and so are ESP/AH and longer chains.

pub const LEN: usize = 40;
pub const NEXT_HOPOPT: u8 = 0;
pub const NEXT_ROUTING: u8 = 43;
pub const NEXT_FRAGMENT: u8 = 44;
pub const NEXT_DSTOPTS: u8 = 60;
pub const NEXT_UDP: u8 = 17;
/// How many extension headers are walked at most.
pub const MAX_EXT_HEADERS: usize = 3;
/// Length of a Fragment extension header.
pub const FRAGMENT_LEN: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct Ipv6Header(pub [u8; LEN]);

impl Ipv6Header {
    #[inline(always)]
    pub const fn version(&self) -> u8 {
        self.0[0] >> 4
    }
    #[inline(always)]
    pub const fn traffic_class(&self) -> u8 {
        (self.0[0] << 4) | (self.0[1] >> 4)
    }
    #[inline(always)]
    pub const fn ecn(&self) -> u8 {
        (self.0[1] >> 4) & 0x03
    }
    #[inline(always)]
    pub const fn payload_len(&self) -> usize {
        u16::from_be_bytes([self.0[4], self.0[5]]) as usize
    }
    #[inline(always)]
    pub const fn next_header(&self) -> u8 {
        self.0[6]
    }
    #[inline(always)]
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.0[8..24]);
        a
    }
    #[inline(always)]
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.0[24..40]);
        a
    }
}

/// Whether `next` is an extension header the parser walks over by its length byte.
#[inline(always)]
pub const fn is_skippable_ext(next: u8) -> bool {
    matches!(next, NEXT_HOPOPT | NEXT_ROUTING | NEXT_DSTOPTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let mut h = [0u8; LEN];
        h[0] = 0x6A; // version 6, TC high nibble 0xA
        h[1] = 0xB0; // TC low nibble 0xB -> TC 0xAB, ECN 0b11
        h[4..6].copy_from_slice(&64u16.to_be_bytes());
        h[6] = NEXT_UDP;
        h[8] = 0xfd;
        h[39] = 2;
        let h = Ipv6Header(h);
        assert_eq!(h.version(), 6);
        assert_eq!(h.traffic_class(), 0xAB);
        assert_eq!(h.ecn(), 3);
        assert_eq!(h.payload_len(), 64);
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.src()[0], 0xfd);
        assert_eq!(h.dst()[15], 2);
        assert!(is_skippable_ext(0) && is_skippable_ext(43) && is_skippable_ext(60));
        assert!(!is_skippable_ext(44) && !is_skippable_ext(17));
    }
}
