//! UDP header (RFC 768).

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

pub const LEN: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct UdpHeader(pub [u8; LEN]);

impl UdpHeader {
    #[inline(always)]
    pub const fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }
    #[inline(always)]
    pub const fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }
    /// Length of header plus payload (the UDP length field).
    #[inline(always)]
    pub const fn length(&self) -> usize {
        u16::from_be_bytes([self.0[4], self.0[5]]) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let h = UdpHeader([0xC0, 0x01, 0x12, 0xB7, 0x00, 0x30, 0, 0]);
        assert_eq!(h.src_port(), 0xC001);
        assert_eq!(h.dst_port(), 4791);
        assert_eq!(h.length(), 48);
    }
}
