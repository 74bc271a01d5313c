//! BPF_MAP_LOOKUP_BATCH for per-CPU hash maps: aya 0.14 has no batch API, and walking 100,000
//! keys one syscall pair at a time dominates a poll. This reads the map in chunks.

use anyhow::{bail, Result};
use aya::Pod;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// Entries per syscall.
const CHUNK: u32 = 4096;

/// `union bpf_attr`'s `batch` member.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Calls `each(key, per-CPU values)` for every entry of a per-CPU hash map. `V` must be a
/// multiple of 8 bytes (the kernel's per-CPU stride), which `FlowStats` is.
pub fn lookup_percpu<K: Pod + Default, V: Pod + Default>(
    map_fd: i32,
    cpus: usize,
    mut each: impl FnMut(&K, &[V]),
) -> Result<()> {
    let vsize = std::mem::size_of::<V>();
    if !vsize.is_multiple_of(8) {
        bail!("per-CPU value size {vsize} is not a multiple of 8");
    }
    let mut keys = vec![K::default(); CHUNK as usize];
    let mut values = vec![V::default(); CHUNK as usize * cpus];
    let mut token: u32 = 0;
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &token as *const u32 as u64
            },
            out_batch: &mut token as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK,
            map_fd: map_fd as u32,
            ..BatchAttr::default()
        };
        // SAFETY: the buffers hold CHUNK keys and CHUNK * cpus values and outlive the call;
        // in_batch and out_batch point at a u32 (the hash map's batch token).
        let rc = unsafe { crate::bpf_sys::bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let n = attr.count as usize;
        for i in 0..n.min(CHUNK as usize) {
            each(&keys[i], &values[i * cpus..(i + 1) * cpus]);
        }
        if let Err(err) = rc {
            if err.raw_os_error() == Some(libc::ENOENT) {
                return Ok(());
            }
            bail!("BPF_MAP_LOOKUP_BATCH: {err}");
        }
        first = false;
    }
}
