//! IPv4 header (RFC 791).

/// Minimum header length (IHL 5).
pub const MIN_LEN: usize = 20;
/// Maximum header length (IHL 15).
pub const MAX_LEN: usize = 60;
pub const PROTO_UDP: u8 = 17;

/// The fixed 20 bytes of an IPv4 header.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Header(pub [u8; MIN_LEN]);

impl Ipv4Header {
    #[inline(always)]
    pub const fn version(&self) -> u8 {
        self.0[0] >> 4
    }
    /// Header length in bytes (IHL * 4).
    #[inline(always)]
    pub const fn header_len(&self) -> usize {
        ((self.0[0] & 0x0F) as usize) * 4
    }
    #[inline(always)]
    pub const fn tos(&self) -> u8 {
        self.0[1]
    }
    #[inline(always)]
    pub const fn ecn(&self) -> u8 {
        self.0[1] & 0x03
    }
    #[inline(always)]
    pub const fn total_len(&self) -> usize {
        u16::from_be_bytes([self.0[2], self.0[3]]) as usize
    }
    /// Fragment offset in 8-byte units; non-zero means not the first fragment.
    #[inline(always)]
    pub const fn fragment_offset(&self) -> u16 {
        u16::from_be_bytes([self.0[6], self.0[7]]) & 0x1FFF
    }
    #[inline(always)]
    pub const fn more_fragments(&self) -> bool {
        self.0[6] & 0x20 != 0
    }
    #[inline(always)]
    pub const fn protocol(&self) -> u8 {
        self.0[9]
    }
    #[inline(always)]
    pub const fn src(&self) -> [u8; 4] {
        [self.0[12], self.0[13], self.0[14], self.0[15]]
    }
    #[inline(always)]
    pub const fn dst(&self) -> [u8; 4] {
        [self.0[16], self.0[17], self.0[18], self.0[19]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let mut h = [0u8; MIN_LEN];
        h[0] = 0x46;
        h[1] = 0xB3;
        h[2..4].copy_from_slice(&300u16.to_be_bytes());
        h[6] = 0x20 | 0x01;
        h[7] = 0x02;
        h[9] = 17;
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        h[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let h = Ipv4Header(h);
        assert_eq!(h.version(), 4);
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.tos(), 0xB3);
        assert_eq!(h.ecn(), 3);
        assert_eq!(h.total_len(), 300);
        assert_eq!(h.fragment_offset(), 0x102);
        assert!(h.more_fragments());
        assert_eq!(h.protocol(), PROTO_UDP);
        assert_eq!(h.src(), [10, 0, 0, 1]);
        assert_eq!(h.dst(), [10, 0, 0, 2]);
    }
}
