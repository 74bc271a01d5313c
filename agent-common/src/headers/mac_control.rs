//! MAC control frames (EtherType 0x8808): 802.3x PAUSE and 802.1Qbb Priority Flow Control.
//!
//! A PFC frame carries an opcode (0x0101), a class-enable vector (one bit per priority, the
//! high byte reserved) and eight pause times in quanta of 512 bit times; a PAUSE frame
//! (opcode 0x0001) carries one pause time for the whole link. A time of 0 with its class
//! enabled is an XON (resume); a time whose class bit is clear means nothing.

use super::be16;

pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// 802.3x PAUSE.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// 802.1Qbb Priority-based Flow Control (Class-Based Flow Control in 802.3 Annex 31D).
pub const OPCODE_PFC: u16 = 0x0101;
/// Priorities (traffic classes) of PFC.
pub const PRIORITIES: usize = 8;
/// Bytes of a PFC frame's MAC control payload: opcode, class-enable vector, eight times.
pub const PFC_LEN: usize = 2 + 2 + 2 * PRIORITIES;
/// Bytes of a PAUSE frame's MAC control payload: opcode, pause time.
pub const PAUSE_LEN: usize = 4;
/// Bit times in one pause quantum.
pub const QUANTUM_BITS: u64 = 512;

/// A MAC control frame's fields. For PAUSE, the one pause time is `times[0]` and
/// `class_enable` is 1; for other opcodes only `opcode` is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MacControl {
    pub opcode: u16,
    pub class_enable: u16,
    pub times: [u16; PRIORITIES],
}

impl MacControl {
    /// A PFC frame from its payload bytes.
    #[inline(always)]
    pub fn pfc(b: &[u8; PFC_LEN]) -> MacControl {
        let mut times = [0u16; PRIORITIES];
        let mut i = 0;
        while i < PRIORITIES {
            times[i] = be16([b[4 + 2 * i], b[5 + 2 * i]]);
            i += 1;
        }
        MacControl {
            opcode: OPCODE_PFC,
            class_enable: be16([b[2], b[3]]),
            times,
        }
    }

    /// A PAUSE frame from its payload bytes.
    #[inline(always)]
    pub fn pause(b: &[u8; PAUSE_LEN]) -> MacControl {
        let mut times = [0u16; PRIORITIES];
        times[0] = be16([b[2], b[3]]);
        MacControl {
            opcode: OPCODE_PAUSE,
            class_enable: 1,
            times,
        }
    }

    /// Whether priority `p` is enabled in the class-enable vector (PFC).
    #[inline(always)]
    pub const fn enabled(&self, p: usize) -> bool {
        p < PRIORITIES && self.class_enable & (1 << p) != 0
    }
}

/// Seconds that `quanta` pause quanta last on a link of `bits_per_second`.
pub fn quanta_seconds(quanta: u64, bits_per_second: u64) -> f64 {
    if bits_per_second == 0 {
        return 0.0;
    }
    quanta as f64 * QUANTUM_BITS as f64 / bits_per_second as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_fields_are_big_endian_in_order() {
        let mut b = [0u8; PFC_LEN];
        b[0..2].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        b[2..4].copy_from_slice(&0x0088u16.to_be_bytes());
        b[4 + 6..4 + 8].copy_from_slice(&0xFFFFu16.to_be_bytes());
        b[4 + 14..4 + 16].copy_from_slice(&7u16.to_be_bytes());
        let m = MacControl::pfc(&b);
        assert_eq!(m.class_enable, 0x88);
        assert_eq!(m.times[3], 0xFFFF);
        assert_eq!(m.times[7], 7);
        assert!(m.enabled(3) && m.enabled(7) && !m.enabled(0) && !m.enabled(8));
    }

    #[test]
    fn pause_time_is_the_first_time() {
        let m = MacControl::pause(&[0, 1, 0x12, 0x34]);
        assert_eq!(
            (m.opcode, m.times[0], m.class_enable),
            (OPCODE_PAUSE, 0x1234, 1)
        );
    }

    #[test]
    fn one_quantum_at_100g_is_5_12_ns() {
        assert!((quanta_seconds(1, 100_000_000_000) - 5.12e-9).abs() < 1e-15);
        assert_eq!(quanta_seconds(5, 0), 0.0);
    }
}
