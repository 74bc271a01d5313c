//! The packet reader for XDP: direct packet access, bounds-checked right before each copy.

use agent_common::{reader::MAX_READ_OFFSET, PacketReader};
use aya_ebpf::programs::XdpContext;

pub struct XdpReader {
    data: usize,
    end: usize,
}

impl XdpReader {
    #[inline(always)]
    pub fn new(ctx: &XdpContext) -> Self {
        XdpReader {
            data: ctx.data(),
            end: ctx.data_end(),
        }
    }
}

impl PacketReader for XdpReader {
    #[inline(always)]
    fn len(&self) -> usize {
        self.end - self.data
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        // Clamp the variable offset to a constant so the verifier knows its range.
        if off > MAX_READ_OFFSET {
            return None;
        }
        let start = self.data + off;
        if start + N > self.end {
            return None;
        }
        // SAFETY: [start, start + N) lies inside [data, data_end), checked just above.
        Some(unsafe { core::ptr::read_unaligned(start as *const [u8; N]) })
    }
}
