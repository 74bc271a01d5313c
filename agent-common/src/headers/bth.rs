//! InfiniBand Base Transport Header (12 bytes, big endian), as carried by RoCEv2.

pub const LEN: usize = 12;

/// The BTH, every field decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    pub mig_req: bool,
    pub pad_count: u8,
    /// Transport header version (0 today).
    pub tver: u8,
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification (set in CNPs).
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    #[inline(always)]
    pub const fn from_bytes(b: [u8; LEN]) -> Self {
        Bth {
            opcode: b[0],
            se: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 0x03,
            tver: b[1] & 0x0F,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: super::be24([b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: super::be24([b[9], b[10], b[11]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field() {
        let b = Bth::from_bytes([
            0x0A, 0xF0, 0xFF, 0xFF, 0xC0, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF,
        ]);
        assert_eq!(b.opcode, 0x0A);
        assert!(b.se && b.mig_req);
        assert_eq!(b.pad_count, 3);
        assert_eq!(b.tver, 0);
        assert_eq!(b.pkey, 0xFFFF);
        assert!(b.fecn && b.becn);
        assert_eq!(b.dest_qp, 0x123456);
        assert!(b.ack_req);
        assert_eq!(b.psn, 0xABCDEF);
        let z = Bth::from_bytes([0x81, 0x01, 0, 0, 0x00, 0, 0, 0, 0x7F, 0, 0, 0]);
        assert!(!z.se && !z.fecn && !z.becn && !z.ack_req);
        assert_eq!(z.tver, 1);
    }
}
