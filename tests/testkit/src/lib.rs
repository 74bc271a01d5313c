//! Test support for rocemon, deliberately independent of `agent-common`:
//!
//! - [`frames`]: a RoCEv2 frame builder written from the specification, not from our parser;
//! - [`fixtures`]: the deterministic fixture generator (pcap, pcapng, SLL, SLL2, snaplen);
//! - [`tshark`]: the independent oracle, expected counts computed by tshark's dissector;
//! - [`netns`]: network namespaces and veth pairs that clean up after themselves.

pub mod fixtures;
pub mod frames;
pub mod netns;
pub mod tshark;

/// Whether the process runs as root (namespaces, BPF).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A small deterministic PRNG (splitmix64), so fixtures are identical on every machine.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        let p = std::env::temp_dir().join(format!("{prefix}-{}", netns::unique_tag()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fails with a clear message when tshark is missing (it is the oracle: no silent skip).
pub fn require_tshark() {
    assert!(
        tshark::available(),
        "tshark is not installed: it is the independent oracle of these tests; run `cargo xtask setup`"
    );
}
