//! The packet reader for XDP: `bpf_xdp_load_bytes` with constant lengths (kernel 5.18+).
//!
//! Why not direct packet access: every bounds check gives the packet pointer a different known
//! range on each parse path, so the verifier cannot prune states, and the XDP program alone
//! came within 0.5% of the one-million-instruction limit (995,100 verified instructions). The
//! helper returns plain bytes, the paths merge, and reads also reach the fragments of a
//! multi-buffer (jumbo) frame.

use agent_common::{reader::readable, PacketReader};
use aya_ebpf::{helpers::generated::bpf_xdp_load_bytes, programs::XdpContext};
use core::mem::MaybeUninit;

pub struct XdpReader<'a> {
    ctx: &'a XdpContext,
    len: usize,
}

impl<'a> XdpReader<'a> {
    /// `len`: the whole frame (`bpf_xdp_get_buff_len`), fragments included.
    #[inline(always)]
    pub fn new(ctx: &'a XdpContext, len: u64) -> Self {
        XdpReader {
            ctx,
            len: len as usize,
        }
    }
}

impl PacketReader for XdpReader<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if !readable(off, N, self.len) {
            return None;
        }
        let mut buf = MaybeUninit::<[u8; N]>::uninit();
        // SAFETY: the helper writes exactly N bytes into `buf` or fails (non-zero).
        let r = unsafe {
            bpf_xdp_load_bytes(self.ctx.ctx, off as u32, buf.as_mut_ptr().cast(), N as u32)
        };
        if r != 0 {
            return None;
        }
        // SAFETY: initialised by the successful helper call.
        Some(unsafe { buf.assume_init() })
    }
}
