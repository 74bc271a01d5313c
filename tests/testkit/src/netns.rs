//! Network namespaces and veth pairs for tests: unique names, cleanup on every exit path.

use anyhow::{bail, Context, Result};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs a command, failing with its stderr when it exits non-zero.
pub fn run(cmd: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("run {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out)
}

/// A unique short tag for this process and call (interface names are at most 15 bytes).
pub fn unique_tag() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:x}{:x}", std::process::id() % 0xFFFF, n)
}

/// Two namespaces joined by a veth pair: `a` (where rocemon watches `a_if`) and `b`
/// (where traffic is sent from `b_if`). Deleted on drop.
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub a_if: String,
    pub b_if: String,
    pub a_ip: String,
    pub b_ip: String,
}

impl VethPair {
    /// Creates the pair with single-queue veths, addresses 10.77.0.1/24 and 10.77.0.2/24,
    /// fd77::1/64 and fd77::2/64.
    pub fn new(prefix: &str) -> Result<VethPair> {
        let tag = unique_tag();
        let p = VethPair {
            ns_a: format!("{prefix}-a-{tag}"),
            ns_b: format!("{prefix}-b-{tag}"),
            a_if: format!("rva{tag}"),
            b_if: format!("rvb{tag}"),
            a_ip: "10.77.0.1".into(),
            b_ip: "10.77.0.2".into(),
        };
        // From here on, Drop removes whatever was created.
        run("ip", &["netns", "add", &p.ns_a])?;
        run("ip", &["netns", "add", &p.ns_b])?;
        run("ip", &[
            "link", "add", &p.a_if, "netns", &p.ns_a, "numrxqueues", "1", "numtxqueues", "1", "type", "veth", "peer", "name", &p.b_if,
            "netns", &p.ns_b, "numrxqueues", "1", "numtxqueues", "1",
        ])?;
        for (ns, ifn, v4, v6) in [(&p.ns_a, &p.a_if, "10.77.0.1/24", "fd77::1/64"), (&p.ns_b, &p.b_if, "10.77.0.2/24", "fd77::2/64")] {
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            run("ip", &["-n", ns, "addr", "add", v4, "dev", ifn])?;
            run("ip", &["-n", ns, "addr", "add", v6, "dev", ifn, "nodad"])?;
            run("ip", &["-n", ns, "link", "set", ifn, "up"])?;
        }
        Ok(p)
    }

    /// Runs a command inside namespace `ns`.
    pub fn exec(&self, ns: &str, cmd: &str, args: &[&str]) -> Result<Output> {
        let mut full = vec!["netns", "exec", ns, cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Replays a capture out of `b_if` (towards `a_if`) at full speed with tcpreplay.
    pub fn replay_from_b(&self, pcap: &std::path::Path) -> Result<()> {
        let path = pcap.to_str().context("capture path is not UTF-8")?;
        self.exec(&self.ns_b, "tcpreplay", &["-q", "--topspeed", "-i", &self.b_if, path])?;
        Ok(())
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).output();
        }
    }
}
