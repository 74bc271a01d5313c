//! Direct packet access for the fast path: reads at constant offsets from `data`, each checked
//! against `data_end` right before it (the shape the verifier tracks exactly, and the cheapest
//! read there is: no helper call).
//!
//! Only the linear part of a frame is visible this way (the first buffer of a multi-buffer XDP
//! frame, the head of a non-linear skb). [`DirectReader::new`] therefore refuses a frame whose
//! linear part is shorter than both the whole frame and [`FAST_PATH_BYTES`]: then a read the
//! fast path makes could fail here and succeed through the helpers, and the frame goes to the
//! slow program instead. Otherwise every read answers as over the whole frame.

use agent_common::{fast::FAST_PATH_BYTES, PacketReader};

pub struct DirectReader {
    data: usize,
    end: usize,
    /// The whole frame's length (fragments and paged data included).
    len: usize,
}

impl DirectReader {
    /// `len`: the whole frame. `None` when the linear part may hide headers (see module doc).
    #[inline(always)]
    pub fn new(data: usize, end: usize, len: usize) -> Option<Self> {
        let linear = end.wrapping_sub(data);
        if linear != len && linear < FAST_PATH_BYTES {
            return None;
        }
        Some(DirectReader { data, end, len })
    }
}

impl PacketReader for DirectReader {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        let p = self.data + off;
        if p + N > self.end {
            return None;
        }
        // SAFETY: `p .. p + N` lies inside the packet's linear data, checked just above.
        Some(unsafe { (p as *const [u8; N]).read_unaligned() })
    }
}
