//! Errors a user can fix: each names the problem and the fix, and makes `rocemon` exit with
//! status 2. Everything else is an internal failure (exit 1).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum UsageError {
    #[error("no such interface '{0}': list interfaces with `ip link`, or create it first")]
    NoSuchInterface(String),
    #[error(
        "missing privileges: {0}; run as root, or grant CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON"
    )]
    NotPermitted(String),
    #[error("XDP {mode} mode is not supported on '{iface}': {reason}; use --xdp-mode auto or skb")]
    XdpModeUnsupported {
        iface: String,
        mode: &'static str,
        reason: String,
    },
    #[error("cannot listen on {addr}: {reason}; choose another address with --listen")]
    ListenFailed { addr: String, reason: String },
    #[error("bad configuration: {0}")]
    BadConfig(String),
    /// Nobody answers at the address a client was given: the address (or the agent) is the
    /// user's to fix, but nothing in a configuration is wrong.
    #[error(
        "cannot reach rocemon at {url} ({reason}); is `rocemon run` listening there? (set --addr)"
    )]
    Unreachable { url: String, reason: String },
    #[error("cannot read capture {path}: {reason}")]
    BadCapture { path: String, reason: String },
}

/// The exit status for an error chain: 2 when a [`UsageError`] is in it, else 1.
pub fn exit_status(err: &anyhow::Error) -> i32 {
    if err
        .chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
    {
        2
    } else {
        1
    }
}

/// A value from the user, fit to echo in a message: quoted, control characters escaped, and
/// cut after 64 characters (a 50 MB value is not echoed whole).
pub fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let n = s.chars().count();
    let head: String = s.chars().take(MAX).collect();
    let q = format!("{:?}", head);
    if n > MAX {
        format!("{q}... ({n} characters)")
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_escape_control_characters_and_cut_long_values() {
        assert_eq!(quote("eth0"), "\"eth0\"");
        assert_eq!(quote("a\u{1b}[31m\0"), "\"a\\u{1b}[31m\\0\"");
        let long = "x".repeat(1000);
        let q = quote(&long);
        assert!(q.len() < 100 && q.ends_with("(1000 characters)"), "{q}");
    }
}
