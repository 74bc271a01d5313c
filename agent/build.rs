//! Builds the kernel programs (agent-ebpf) for bpfel-unknown-none with aya-build, on the
//! nightly toolchain (or on stable with RUSTC_BOOTSTRAP when ROCEMON_EBPF_TOOLCHAIN=stable).
//! With AYA_BUILD_SKIP=1 (a stable-only check or clippy) it leaves an empty placeholder so that
//! `include_bytes_aligned!` still compiles.

use anyhow::Context as _;
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").context("OUT_DIR not set")?);
    println!("cargo:rerun-if-env-changed=ROCEMON_EBPF_TOOLCHAIN");
    // The kernel programs compile agent-common too: rebuild them when it changes.
    println!("cargo:rerun-if-changed=../agent-common/src");
    let skip =
        std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        std::fs::write(out_dir.join("agent"), []).context("write placeholder object")?;
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        return Ok(());
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?)
        .join("../agent-ebpf");
    let root = root.to_str().context("agent-ebpf path is not UTF-8")?;
    let toolchain = std::env::var("ROCEMON_EBPF_TOOLCHAIN").unwrap_or_else(|_| "nightly".into());
    let package = aya_build::Package {
        name: "agent-ebpf",
        root_dir: root,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
}
