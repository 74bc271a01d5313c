//! RDMA message sizes: what a training job's operations look like on the wire.
//!
//! An RDMA WRITE or READ request carries its whole message length in the RETH (DMA length),
//! so one packet tells the size. A SEND message is the payload of its packets, FIRST, MIDDLE..,
//! LAST, or a single ONLY: the flow record sums the payloads of the message in progress
//! ([`SendProgress`]) and the LAST packet completes it. Sizes go into a histogram of powers of
//! four from 1 KiB to 1 GiB ([`bucket`]), per operation, in the hook's counter block, and
//! into per-flow totals.
//!
//! The kernel keeps a flow per CPU: a SEND message whose packets reach two CPUs (a flow that
//! RSS does not keep on one queue) completes on neither, and is not counted.

use crate::opcode::{class, ext_layout, OpClass};
use crate::record::PacketRecord;

/// The operations whose messages are measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgOp {
    RdmaWrite = 0,
    RdmaRead = 1,
    Send = 2,
}

impl MsgOp {
    pub const COUNT: usize = 3;
    pub const ALL: [MsgOp; Self::COUNT] = [MsgOp::RdmaWrite, MsgOp::RdmaRead, MsgOp::Send];

    /// The label value (and the `op` of the JSON reports).
    pub const fn name(self) -> &'static str {
        match self {
            MsgOp::RdmaWrite => "rdma_write",
            MsgOp::RdmaRead => "rdma_read",
            MsgOp::Send => "send",
        }
    }
}

/// Histogram buckets: `le` 1 KiB, 4 KiB, .. 1 GiB (eleven), and one above.
pub const MSG_BUCKETS: usize = 12;
/// Slots per operation in the counter block (a power of two: the index is a shift and a mask).
pub const MSG_BUCKET_SLOTS: usize = 16;

/// The upper bound of bucket `i` in bytes (`None` for the last, +Inf).
pub const fn bucket_le(i: usize) -> Option<u64> {
    if i + 1 >= MSG_BUCKETS {
        None
    } else {
        Some(1024u64 << (2 * i))
    }
}

/// The bucket of a message of `bytes`: the smallest `i` with `bytes <= 1 KiB * 4^i`, at most
/// [`MSG_BUCKETS`]` - 1`. A search over the bounds, four compares with constants: BPF has no
/// count-leading-zeros instruction, and LLVM expands one into some thirty (measured live at
/// one flow of 4 KiB messages: the bucket and its `ctlz` were 6% of the program's samples).
#[inline(always)]
pub fn bucket(bytes: u64) -> usize {
    const fn le(i: usize) -> u64 {
        1024u64 << (2 * i)
    }
    if bytes <= le(3) {
        if bytes <= le(1) {
            if bytes <= le(0) {
                0
            } else {
                1
            }
        } else if bytes <= le(2) {
            2
        } else {
            3
        }
    } else if bytes <= le(7) {
        if bytes <= le(5) {
            if bytes <= le(4) {
                4
            } else {
                5
            }
        } else if bytes <= le(6) {
            6
        } else {
            7
        }
    } else if bytes <= le(9) {
        if bytes <= le(8) {
            8
        } else {
            9
        }
    } else if bytes <= le(10) {
        10
    } else {
        MSG_BUCKETS - 1
    }
}

/// The payload bytes of a RoCE packet: the UDP datagram less its header, the BTH, the
/// extension headers, the pad and the ICRC.
#[inline(always)]
pub fn payload(p: &PacketRecord) -> u64 {
    let ext = u64::from(ext_layout(p.opcode()).len);
    u64::from(p.udp_len())
        .saturating_sub(8 + 12 + 4)
        .saturating_sub(ext)
        .saturating_sub(u64::from(p.pad_count()))
}

/// A completed message: `op` is a [`MsgOp`] discriminant plus one (0: none), flat so that it
/// stays in registers in the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pub op: u8,
    pub bytes: u64,
}

impl Message {
    pub const NONE: Message = Message { op: 0, bytes: 0 };

    #[inline(always)]
    fn of(op: MsgOp, bytes: u64) -> Message {
        Message {
            op: op as u8 + 1,
            bytes,
        }
    }

    /// The operation, when a message completed.
    pub fn op(&self) -> Option<MsgOp> {
        match self.op {
            1 => Some(MsgOp::RdmaWrite),
            2 => Some(MsgOp::RdmaRead),
            3 => Some(MsgOp::Send),
            _ => None,
        }
    }
}

/// A flow's SEND message in progress: its payload so far plus one (0: none, so that a zeroed
/// record has none).
pub type SendProgress = u64;

/// What one packet does to a flow's messages: a WRITE or READ request with a RETH is a
/// message; a SEND packet starts, continues or completes one (`progress`: the flow's SEND in
/// progress, updated).
#[inline(always)]
pub fn observe(p: &PacketRecord, progress: &mut SendProgress) -> Message {
    let op = p.opcode();
    match class(op) {
        OpClass::Write => match p.reth_dma_len() {
            Some(n) => Message::of(MsgOp::RdmaWrite, u64::from(n)),
            None => Message::NONE,
        },
        OpClass::ReadRequest => match p.reth_dma_len() {
            Some(n) => Message::of(MsgOp::RdmaRead, u64::from(n)),
            None => Message::NONE,
        },
        OpClass::Send => {
            let n = payload(p);
            match op & 0x1F {
                // FIRST
                0x00 => {
                    *progress = n + 1;
                    Message::NONE
                }
                // MIDDLE (of a message whose FIRST was seen)
                0x01 => {
                    if *progress != 0 {
                        *progress = progress.saturating_add(n);
                    }
                    Message::NONE
                }
                // LAST, LAST with immediate, LAST with invalidate
                0x02 | 0x03 | 0x16 => {
                    let started = *progress;
                    *progress = 0;
                    if started == 0 {
                        Message::NONE
                    } else {
                        Message::of(MsgOp::Send, (started - 1).saturating_add(n))
                    }
                }
                // ONLY (with immediate, with invalidate; UD's SEND ONLY)
                _ => Message::of(MsgOp::Send, n),
            }
        }
        _ => Message::NONE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_powers_of_four_from_1_kib() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1024), 0);
        assert_eq!(bucket(1025), 1);
        assert_eq!(bucket(4096), 1);
        assert_eq!(bucket(4097), 2);
        assert_eq!(bucket(1 << 20), 5);
        assert_eq!(bucket(1 << 30), 10);
        assert_eq!(bucket((1 << 30) + 1), 11);
        assert_eq!(bucket(u64::MAX), 11);
        for i in 0..MSG_BUCKETS - 1 {
            let le = bucket_le(i).unwrap();
            assert_eq!(bucket(le), i, "le {le}");
            assert_eq!(bucket(le + 1), i + 1, "above {le}");
        }
        assert_eq!(bucket_le(MSG_BUCKETS - 1), None);
    }

    proptest! {
        /// Any size, of any magnitude, lands in the bucket its bounds say: the first whose
        /// `le` is at or above it.
        #[test]
        fn a_size_lands_in_the_first_bucket_at_or_above_it(
            bytes in (0u32..64, any::<u64>()).prop_map(|(s, x)| x >> s)
        ) {
            let want = (0..MSG_BUCKETS)
                .find(|&i| bucket_le(i).is_none_or(|le| bytes <= le))
                .unwrap_or(MSG_BUCKETS - 1);
            prop_assert_eq!(bucket(bytes), want);
        }
    }

    #[test]
    fn names() {
        let n: Vec<_> = MsgOp::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(n, ["rdma_write", "rdma_read", "send"]);
        for o in MsgOp::ALL {
            assert_eq!(Message::of(o, 1).op(), Some(o), "o {o:?}");
        }
        assert_eq!(Message::NONE.op(), None);
    }
}
