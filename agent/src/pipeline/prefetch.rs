//! Software prefetch: the analysis threads know which memory the next packets touch (the
//! steps another thread wrote, the flow table's entries) a few packets before they touch it,
//! and ask for those lines early so that the misses overlap instead of stalling in turn.

/// Asks for the cache line holding `p` (a hint: nothing happens where the target has none).
#[inline(always)]
pub fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for every cache line of `v`.
#[inline(always)]
pub fn prefetch<T>(v: &T) {
    let p: *const u8 = std::ptr::from_ref(v).cast();
    let mut off = 0;
    while off < std::mem::size_of::<T>() {
        prefetch_line(p.wrapping_add(off));
        off += 64;
    }
    // The last byte's line, where `v` does not start on a line.
    prefetch_line(p.wrapping_add(std::mem::size_of::<T>().saturating_sub(1)));
}
