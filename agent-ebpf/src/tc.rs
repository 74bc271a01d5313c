//! The packet reader for tc: `bpf_skb_load_bytes` with constant lengths, which also reads
//! non-linear skbs (GSO, paged data) that direct packet access cannot reach.

use agent_common::{reader::MAX_READ_OFFSET, PacketReader};
use aya_ebpf::programs::TcContext;

pub struct TcReader<'a> {
    ctx: &'a TcContext,
    len: usize,
}

impl<'a> TcReader<'a> {
    #[inline(always)]
    pub fn new(ctx: &'a TcContext) -> Self {
        TcReader {
            ctx,
            len: ctx.len() as usize,
        }
    }
}

impl PacketReader for TcReader<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if off > MAX_READ_OFFSET || off + N > self.len {
            return None;
        }
        self.ctx.load::<[u8; N]>(off).ok()
    }
}
