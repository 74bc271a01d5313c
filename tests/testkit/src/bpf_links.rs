//! BPF links and XDP attachments as the kernel reports them (`bpftool`, `ip`): what a test
//! checks after its agent attached, took over or detached.

use crate::netns::run;
use anyhow::{Context, Result};

/// `ip -d link show IF` inside namespace `ns`: the details, XDP program included.
pub fn link_details(ns: &str, ifname: &str) -> Result<String> {
    let out = run("ip", &["-n", ns, "-d", "link", "show", ifname])?;
    String::from_utf8(out.stdout).context("ip output")
}

/// A BPF link as the kernel reports it (bpftool): its id and the program it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    pub id: u64,
    pub prog_id: u64,
    pub prog_name: String,
}

fn bpftool_json(args: &[&str]) -> Result<serde_json::Value> {
    let out = run("bpftool", args)?;
    serde_json::from_slice(&out.stdout).context("bpftool JSON")
}

fn prog_name(id: u64) -> Result<String> {
    let p = bpftool_json(&["-j", "prog", "show", "id", &id.to_string()])?;
    Ok(p["name"].as_str().unwrap_or_default().to_string())
}

fn link_info(v: &serde_json::Value) -> Result<LinkInfo> {
    let prog_id = v["prog_id"].as_u64().context("link without prog_id")?;
    Ok(LinkInfo {
        id: v["id"].as_u64().context("link without id")?,
        prog_id,
        prog_name: prog_name(prog_id)?,
    })
}

/// The link pinned at `path` (on a bpffs).
pub fn pinned_link(path: &std::path::Path) -> Result<LinkInfo> {
    let p = path.to_str().context("path")?;
    link_info(&bpftool_json(&["-j", "link", "show", "pinned", p])?)
}

/// The links pinned in `dir` (by their file names), sorted by name: `(name, link)`.
pub fn pinned_links(dir: &std::path::Path) -> Result<Vec<(String, LinkInfo)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("link_") {
            out.push((name, pinned_link(&e.path())?));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Which of the link ids `ids` the kernel still has (a test's own links, found through its
/// own agent or pins: other tests running in parallel have links of their own).
pub fn links_alive(ids: &[u64]) -> Result<Vec<u64>> {
    // Each of the test's own ids asked for by itself (listing every link raced with other
    // tests' links being freed): "No such file or directory" is a link gone, any other
    // failure is an error.
    let mut alive = Vec::new();
    for id in ids {
        let out = std::process::Command::new("bpftool")
            .args(["-j", "link", "show", "id", &id.to_string()])
            .output()
            .context("run bpftool (install it with `cargo xtask setup`)")?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("bpftool JSON for link {id}"))?;
        match v["error"].as_str() {
            None if out.status.success() => alive.push(*id),
            Some(e) if e.contains("No such file or directory") => {}
            _ => anyhow::bail!("bpftool link show id {id}: {v}"),
        }
    }
    Ok(alive)
}

/// Waits up to `timeout` until none of `ids` is left (the kernel frees a link once its last
/// reference is gone, which can take a moment); returns those still there.
pub fn wait_links_gone(ids: &[u64], timeout: std::time::Duration) -> Result<Vec<u64>> {
    let t = std::time::Instant::now();
    loop {
        let left = links_alive(ids)?;
        if left.is_empty() || t.elapsed() > timeout {
            return Ok(left);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A descriptor of the BPF object pinned at `path`, held by the test: another process that
/// keeps a link open (bpftool, a tool of the operator's, an agent that hangs on exit), so
/// removing the pin alone does not take the link off its device.
pub fn hold_pinned(path: &std::path::Path) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // bpf_attr for BPF_OBJ_GET (7): pathname (u64), bpf_fd, file_flags, path_fd.
    let attr = [c.as_ptr() as u64, 0, 0, 0];
    // SAFETY: a zero-padded bpf_attr prefix of the size given; the path outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            7 as libc::c_long,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("open the pin {}", path.display()));
    }
    // SAFETY: the kernel just opened fd for us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}
