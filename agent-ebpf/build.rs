//! Rebuild when bpf-linker changes (aya-template's pattern): the linker is part of the toolchain
//! that produces the object.
use which::which;

fn main() {
    let bpf_linker = which("bpf-linker").expect("bpf-linker not found: run `cargo xtask setup`");
    println!(
        "cargo:rerun-if-changed={}",
        bpf_linker.to_str().expect("bpf-linker path is UTF-8")
    );
}
