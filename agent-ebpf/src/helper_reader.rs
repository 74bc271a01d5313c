//! The slow programs' packet reader: a load helper with constant lengths, over any hook's
//! context (`bpf_xdp_load_bytes`, `bpf_skb_load_bytes`: [`crate::xdp`], [`crate::tc`]).
//!
//! Why helpers and not direct packet access: every bounds check gives the packet pointer a
//! different known range on each parse path, so the verifier cannot prune states, and the
//! general parser over direct access came within 0.5% of the one-million-instruction limit
//! (995,100 verified instructions). A helper returns plain bytes, the paths merge, and reads
//! also reach the fragments of a multi-buffer frame and the paged data of a non-linear skb.

use agent_common::{reader::readable, PacketReader};

/// A program context the kernel copies packet bytes out of.
pub trait LoadBytes {
    /// `N` bytes at `off`, or `None` if the helper refused (out of the frame).
    fn load_bytes<const N: usize>(&self, off: usize) -> Option<[u8; N]>;
}

/// The general parser's reader: the one bounds rule ([`readable`]) before each helper read.
pub struct HelperReader<'a, C> {
    ctx: &'a C,
    len: usize,
}

impl<'a, C: LoadBytes> HelperReader<'a, C> {
    /// `len`: the whole frame, fragments and paged data included.
    #[inline(always)]
    pub fn new(ctx: &'a C, len: u64) -> Self {
        HelperReader {
            ctx,
            len: len as usize,
        }
    }
}

impl<C: LoadBytes> PacketReader for HelperReader<'_, C> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if !readable(off, N, self.len) {
            return None;
        }
        self.ctx.load_bytes::<N>(off)
    }
}
