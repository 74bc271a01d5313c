//! `cargo xtask setup`: what docs/TOOLCHAIN.md lists, installed only when missing.

use crate::sh;
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Debian packages: LLVM 22 for bpf-linker; iproute2, tshark, tcpreplay, bpftool, ping, curl
/// and openssl for tests; prometheus (with promtool) for the rules and the scrape test; systemd
/// for `systemd-analyze` (the unit is checked, never started); pmacct, the real sFlow exporter
/// of the sFlow collector's tests; chromium, the browser the HTML report's test drives; tmux,
/// the terminal `rocemon top`'s test draws in.
const APT: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "iproute2",
    "tshark",
    "tcpreplay",
    "bpftool",
    "iputils-ping",
    "curl",
    "openssl",
    "prometheus",
    "systemd",
    "systemd-container",
    "debootstrap",
    "chromium",
    "time",
    "pmacct",
    "tmux",
];
/// The Debian root that `tests/systemd.rs` boots with systemd-nspawn (kept between runs).
pub const TEST_ROOT: &str = "/var/cache/rocemon/debian-bookworm";
const BPF_LINKER_VERSION: &str = "0.13.0";

fn ok(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn has_nightly() -> bool {
    ok("rustup", &["toolchain", "list"])
        .is_some_and(|t| t.lines().any(|l| l.starts_with("nightly")))
}

/// The toolchain that builds the eBPF object: nightly, or stable with RUSTC_BOOTSTRAP.
fn ebpf_toolchain() -> &'static str {
    if has_nightly() {
        "nightly"
    } else {
        "stable"
    }
}

/// Environment for cargo commands that build the eBPF object.
pub fn ebpf_env(c: &mut Command) {
    if ebpf_toolchain() == "stable" {
        c.env("ROCEMON_EBPF_TOOLCHAIN", "stable")
            .env("RUSTC_BOOTSTRAP", "1");
    }
}

fn missing_apt() -> Vec<&'static str> {
    APT.iter()
        .copied()
        .filter(|p| {
            !ok("dpkg-query", &["-W", "-f", "${Status}", p])
                .is_some_and(|s| s.contains("install ok installed"))
        })
        .collect()
}

fn has_rust_src(tc: &str) -> bool {
    ok(
        "rustup",
        &["component", "list", "--installed", "--toolchain", tc],
    )
    .is_some_and(|s| s.lines().any(|l| l.starts_with("rust-src")))
}

fn has_bpf_linker() -> bool {
    ok("bpf-linker", &["--version"]).is_some_and(|v| v.contains(BPF_LINKER_VERSION))
}

/// What is missing, in words.
fn missing() -> Vec<String> {
    let mut m: Vec<String> = missing_apt()
        .iter()
        .map(|p| format!("apt package {p}"))
        .collect();
    if !has_rust_src(ebpf_toolchain()) {
        m.push(format!("rust-src for {}", ebpf_toolchain()));
    }
    if !has_bpf_linker() {
        m.push(format!("bpf-linker {BPF_LINKER_VERSION}"));
    }
    if !has_test_root() {
        m.push(format!(
            "the Debian root for the systemd test ({TEST_ROOT})"
        ));
    }
    m
}

fn has_test_root() -> bool {
    std::path::Path::new(TEST_ROOT)
        .join("usr/lib/systemd/systemd")
        .exists()
}

/// The mirror this machine's apt uses for Debian 12 (`bookworm`), from the active
/// `sources.list` and `*.list` / `*.sources` files (one-line and deb822 formats).
fn apt_mirror() -> Option<String> {
    let mut files = vec![std::path::PathBuf::from("/etc/apt/sources.list")];
    if let Ok(d) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<_> = d
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        // deb822: a stanza with `Suites: bookworm ...`.
        for stanza in text.split("\n\n") {
            let field = |name: &str| {
                stanza
                    .lines()
                    .find_map(|l| l.trim().strip_prefix(name))
                    .map(str::trim)
            };
            let suites = field("Suites:").unwrap_or_default();
            if suites.split_whitespace().any(|s| s == "bookworm") {
                if let Some(u) = field("URIs:").and_then(|u| u.split_whitespace().next()) {
                    return Some(u.to_string());
                }
            }
        }
        // One-line: `deb [options] URI bookworm components`.
        for l in text.lines().map(str::trim) {
            let words: Vec<&str> = l.split_whitespace().collect();
            if words.first() == Some(&"deb") {
                if let Some(i) = words.iter().position(|w| w.contains("://")) {
                    if words.get(i + 1) == Some(&"bookworm") {
                        return Some(words[i].to_string());
                    }
                }
            }
        }
    }
    None
}

/// A minimal Debian 12 root with systemd, built with debootstrap from this machine's mirror
/// (into a temporary directory, moved in place when complete).
fn make_test_root() -> Result<()> {
    let mirror = apt_mirror().context("no Debian mirror in /etc/apt/sources.list(.d)")?;
    let tmp = format!("{TEST_ROOT}.tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all("/var/cache/rocemon")?;
    println!(
        "setup: debootstrap a Debian 12 root with systemd for the systemd test (about a minute)"
    );
    sh(Command::new("debootstrap").args([
        "--variant=minbase",
        "--include=systemd,systemd-sysv,dbus",
        "bookworm",
        &tmp,
        &mirror,
    ]))
    .context("debootstrap")?;
    std::fs::rename(&tmp, TEST_ROOT)?;
    Ok(())
}

/// Runs setup only when something is missing.
pub fn ensure() -> Result<()> {
    if missing().is_empty() {
        return Ok(());
    }
    setup()
}

pub fn setup() -> Result<()> {
    let m = missing();
    if m.is_empty() {
        println!("setup: everything is installed (rust-src, LLVM 22, bpf-linker {BPF_LINKER_VERSION}, {})", APT.join(", "));
        return Ok(());
    }
    println!("setup: missing: {}", m.join(", "));
    let apt = missing_apt();
    if !apt.is_empty() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!(
                "installing {} needs root: run `sudo cargo xtask setup`",
                apt.join(" ")
            );
        }
        println!("setup: apt-get update && apt-get install {}", apt.join(" "));
        sh(Command::new("apt-get").args(["update", "-q"]))?;
        sh(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&apt)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    let tc = ebpf_toolchain();
    if !has_rust_src(tc) {
        println!("setup: rustup component add rust-src --toolchain {tc}");
        sh(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", tc]))?;
    }
    if !has_bpf_linker() {
        println!("setup: cargo install bpf-linker {BPF_LINKER_VERSION} (LLVM 22; about 90 s)");
        let path = std::env::var("PATH").unwrap_or_default();
        sh(Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22")
            .env("PATH", format!("/usr/lib/llvm-22/bin:{path}")))
        .context("install bpf-linker")?;
    }
    if !has_test_root() {
        make_test_root()?;
    }
    let still = missing();
    if !still.is_empty() {
        bail!("setup finished but still missing: {}", still.join(", "));
    }
    println!("setup: done");
    Ok(())
}
