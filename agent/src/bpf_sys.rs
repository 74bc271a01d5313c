//! bpf(2) for the commands aya 0.14 does not wrap: BPF_PROG_TEST_RUN (the flow cache's flush,
//! tests and benchmarks), BPF_MAP_LOOKUP_BATCH (the flow maps), BPF_OBJ_GET (what a pin is),
//! BPF_LINK_DETACH (a pinned link off its device), and the program and BTF info the
//! benchmarks' profile reads.

/// Calls bpf(2) with command `cmd` and the attribute `attr`; returns the call's non-negative
/// result (a new descriptor for the commands that open one, else 0).
///
/// # Safety
/// `attr` must be the `union bpf_attr` member `cmd` reads (zero where unused), and every
/// pointer in it valid for what the kernel reads or writes there during the call.
pub unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<i64> {
    // SAFETY: the caller's promise; the size is the attribute's own.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}
