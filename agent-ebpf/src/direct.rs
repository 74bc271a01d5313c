//! Direct packet access for the fast path: reads at constant offsets from `data`, each checked
//! against `data_end` right before it (the shape the verifier tracks exactly, and the cheapest
//! read there is: no helper call).
//!
//! Only the linear part of a frame is visible this way (the first buffer of a multi-buffer XDP
//! frame, the head of a non-linear skb). [`DirectReader::new`] therefore refuses a frame whose
//! linear part is shorter than both the whole frame and [`FAST_PATH_BYTES`]: then a read the
//! fast path makes could fail here and succeed through the helpers, and the frame goes to the
//! slow program instead. Otherwise every read answers as over the whole frame.
//!
//! The loads are word loads written as BPF assembly. LLVM's BPF backend assumes strict
//! alignment, so `read_unaligned` of an `[u8; N]` became one byte load plus a shift and an or
//! per byte (a 20-byte IPv4 header: 60 instructions). Packet memory needs no alignment
//! (x86-64 and arm64 have efficient unaligned access, and the verifier checks packet
//! alignment only under `BPF_F_STRICT_ALIGNMENT`); the stack does, so the target feature
//! `allows-misaligned-mem-access` cannot be switched on for the whole program (the slow
//! program's helper reads into stack buffers were then read back misaligned, which the
//! verifier refuses).

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

    /// A reader over `bytes` of the frame copied to `data` (a map value: its loads need no
    /// packet bounds, only the offsets the fast path reads, which stay inside `bytes`), the
    /// whole frame `len` long.
    #[inline(always)]
    pub fn over(data: usize, bytes: usize, len: usize) -> Self {
        DirectReader {
            data,
            end: data + bytes,
            len,
        }
    }
}

impl PacketReader for DirectReader {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        // The fast path reads no further (a reader over a copy, [`DirectReader::over`], has no
        // more); bounding the offset itself lets the verifier check a load from a map value,
        // where a pointer comparison tells it nothing (it does for packet pointers, below).
        if off > FAST_PATH_BYTES - N {
            return None;
        }
        let p = self.data + off;
        if p + N > self.end {
            return None;
        }
        let mut out = [0u8; N];
        let mut i = 0;
        // Constant trip counts: unrolled into at most N / 8 + 3 loads.
        while i + 8 <= N {
            // `p + i .. p + i + 8` lies inside the checked range `p .. p + N`.
            out[i..i + 8].copy_from_slice(&load!(p + i, "u64", u64).to_ne_bytes());
            i += 8;
        }
        if i + 4 <= N {
            out[i..i + 4].copy_from_slice(&load!(p + i, "u32", u32).to_ne_bytes());
            i += 4;
        }
        if i + 2 <= N {
            out[i..i + 2].copy_from_slice(&load!(p + i, "u16", u16).to_ne_bytes());
            i += 2;
        }
        if i < N {
            // SAFETY: as above.
            out[i] = unsafe { *(p as *const u8).add(i) };
        }
        Some(out)
    }
}

/// One unaligned packet load of `$width` (`u64`, `u32`, `u16`) as `$t`. `pure`/`readonly`:
/// LLVM may drop a load whose bytes the parser never uses. The caller has checked that the
/// loaded bytes lie inside the packet.
macro_rules! load {
    ($p:expr, $width:literal, $t:ty) => {{
        let v: u64;
        // SAFETY: the caller's bounds check; a load has no other effect.
        unsafe {
            core::arch::asm!(concat!("{0} = *(", $width, " *)({1} + 0)"), out(reg) v, in(reg) $p,
                options(pure, readonly, nostack, preserves_flags))
        };
        v as $t
    }};
}
use load;
