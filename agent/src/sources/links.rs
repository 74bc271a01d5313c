//! Interfaces that come and go: drivers reset, bonds and VFs are re-created, hosts hot-plug,
//! udev renames. The kernel tells every change of a network interface on rtnetlink's link
//! group (`RTMGRP_LINK`); the agent takes each message as a cue to look at its interfaces
//! again by name ([`link_state`]), so it never acts on a stale message and needs no parser for
//! the messages themselves. The run loop also looks at every poll, in case the socket could
//! not be opened or overflowed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;

/// A netlink socket subscribed to link changes.
pub struct LinkEvents {
    fd: AsyncFd<OwnedFd>,
}

impl LinkEvents {
    pub fn open() -> io::Result<LinkEvents> {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a zeroed sockaddr_nl is valid; the groups field is set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = libc::RTMGRP_LINK as u32;
        // SAFETY: sa is a valid sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: an OwnedFd returns the same open descriptor for as long as it lives, and
        // the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| io::Error::other(e.to_string()))?;
        Ok(LinkEvents { fd })
    }

    /// Waits for the next link change, then drains every pending message.
    pub async fn changed(&self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut buf = [0u8; 8192];
            let mut got = false;
            loop {
                // SAFETY: buf is valid for its length.
                let n = unsafe {
                    libc::recv(
                        self.fd.get_ref().as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                    )
                };
                if n > 0 {
                    got = true;
                    continue;
                }
                let e = io::Error::last_os_error();
                if n < 0 && e.kind() == io::ErrorKind::WouldBlock {
                    guard.clear_ready();
                    break;
                }
                if n < 0 && e.raw_os_error() == Some(libc::ENOBUFS) {
                    // Messages were lost: a change happened; look anyway.
                    got = true;
                    continue;
                }
                return Err(e);
            }
            if got {
                return Ok(());
            }
        }
    }
}

/// What a watched interface name refers to now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// No interface has the name (deleted, or renamed away).
    Absent,
    Present {
        ifindex: u32,
        mtu: Option<u32>,
    },
}

/// Looks the name up (`if_nametoindex`, and the MTU in sysfs).
pub fn link_state(name: &str) -> LinkState {
    let Ok(c) = std::ffi::CString::new(name) else {
        return LinkState::Absent;
    };
    // SAFETY: a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if ifindex == 0 {
        return LinkState::Absent;
    }
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    LinkState::Present { ifindex, mtu }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_present_and_a_made_up_name_is_not() {
        assert!(matches!(
            link_state("lo"),
            LinkState::Present { ifindex: 1, .. }
        ));
        assert_eq!(link_state("rocemon-none0"), LinkState::Absent);
        assert_eq!(link_state("bad\0name"), LinkState::Absent);
    }
}
