//! XDP's packet bytes for the slow program's [`HelperReader`](crate::helper_reader):
//! `bpf_xdp_load_bytes` (kernel 5.18+), which also reads the fragments of a multi-buffer
//! (jumbo) frame.

use crate::helper_reader::LoadBytes;
use aya_ebpf::{helpers::generated::bpf_xdp_load_bytes, programs::XdpContext};
use core::mem::MaybeUninit;

impl LoadBytes for XdpContext {
    #[inline(always)]
    fn load_bytes<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        let mut buf = MaybeUninit::<[u8; N]>::uninit();
        // SAFETY: the helper writes exactly N bytes into `buf` or fails (non-zero).
        let r =
            unsafe { bpf_xdp_load_bytes(self.ctx, off as u32, buf.as_mut_ptr().cast(), N as u32) };
        if r != 0 {
            return None;
        }
        // SAFETY: initialised by the successful helper call.
        Some(unsafe { buf.assume_init() })
    }
}
