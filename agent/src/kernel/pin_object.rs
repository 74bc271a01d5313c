//! What a pin on the bpffs holds, and taking a pinned link off its device.
//!
//! Removing a link's pin does not detach it there and then: the kernel releases the link
//! from a work queue once the last reference goes, so for a moment the old program still
//! sits on the device. An XDP program in the other mode attached in that moment fails
//! ("native and generic XDP can't be active at the same time"), and `rocemon detach` would
//! return while the program still runs. `BPF_LINK_DETACH` takes the link off its device
//! synchronously (under the kernel's rtnl lock) whoever else holds it, so a link is detached
//! before its pin is removed.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_LINK_DETACH: libc::c_long = 34;

/// The kind of a pinned kernel object, read from `/proc/self/fdinfo` of a descriptor that
/// `BPF_OBJ_GET` returns for the pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    Map,
    Link,
    Program,
}

/// A descriptor of the object pinned at `path`, or None when it is no pin (or cannot be
/// opened).
fn open_pin(path: &Path) -> Option<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // bpf_attr for BPF_OBJ_GET: pathname (u64), bpf_fd (u32), file_flags (u32), path_fd.
    let mut attr = [0u64; 4];
    attr[0] = c.as_ptr() as u64;
    // SAFETY: attr is a valid, zero-padded bpf_attr prefix of the size given; the path
    // outlives the call.
    let fd = unsafe { crate::bpf_sys::bpf(BPF_OBJ_GET, &mut attr) }.ok()? as i32;
    // SAFETY: the kernel just opened fd for us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the pin at `path` is, or None when it is no pin (or cannot be opened).
pub fn object_kind(path: &Path) -> Option<ObjectKind> {
    use std::os::fd::AsRawFd;
    let fd = open_pin(path)?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .unwrap_or_default();
    info.lines().find_map(|l| {
        if l.starts_with("link_type:") {
            Some(ObjectKind::Link)
        } else if l.starts_with("map_type:") {
            Some(ObjectKind::Map)
        } else if l.starts_with("prog_type:") {
            Some(ObjectKind::Program)
        } else {
            None
        }
    })
}

/// Takes the link pinned at `path` off its device now (the pin itself stays for the caller
/// to remove). Returns whether the kernel detached it; a link already gone with its device,
/// or a kernel without `BPF_LINK_DETACH` (before 5.9), leaves the release to the pin's
/// removal, as before.
pub fn detach_link(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Some(fd) = open_pin(path) else {
        return false;
    };
    // bpf_attr for BPF_LINK_DETACH: link_fd (u32).
    let mut attr = [fd.as_raw_fd() as u32, 0];
    // SAFETY: a zero-padded bpf_attr prefix for BPF_LINK_DETACH, of the size given.
    match unsafe { crate::bpf_sys::bpf(BPF_LINK_DETACH, &mut attr) } {
        Ok(_) => true,
        Err(e) => {
            log::debug!(
                "BPF_LINK_DETACH on {} failed ({e}); the link goes with its pin",
                path.display()
            );
            false
        }
    }
}
