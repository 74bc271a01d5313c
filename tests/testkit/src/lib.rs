//! Test support for rocemon, deliberately independent of `agent-common`:
//!
//! - [`frames`]: a RoCEv2 frame builder written from the specification, not from our parser;
//! - [`fixtures`]: the deterministic fixture generator (pcap, pcapng, SLL, SLL2, snaplen);
//!   [`lossless`]: its PFC / PAUSE / traffic class fixture;
//! - [`tshark`]: the independent oracle, expected counts computed by tshark's dissector;
//!   [`tshark_sflow`]: the same for sFlow datagrams; [`sflow`]: an sFlow encoder and pmacct;
//! - [`netns`]: network namespaces and veth pairs that clean up after themselves;
//!   [`bpf_links`]: the BPF links and XDP attachments the kernel reports;
//! - [`hostile`]: one hostile client of the HTTP endpoint (idle connections, password guesses).

pub mod bpf_links;
pub mod bpffs;
pub mod child_output;
pub mod dashboards;
pub mod demo;
pub mod e2e;
pub mod ecmp_lab;
pub mod findings_lab;
pub mod fixture;
pub mod fixtures;
pub mod fleet;
pub mod frames;
pub mod host_links;
pub mod hostile;
pub mod hostile_steps;
pub mod ipfix;
pub mod layers;
pub mod lossless;
pub mod metrics;
pub mod netns;
pub mod scenarios;
pub mod sender;
pub mod sflow;
pub mod training;
pub mod tshark;
pub mod tshark_sflow;

/// Whether the process runs as root (namespaces, BPF).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The switch under which a test may not skip: `cargo xtask test` and CI set it, so a green
/// run means every privileged test ran.
pub const REQUIRE_PRIVILEGED: &str = "ROCEMON_REQUIRE_PRIVILEGED";
/// Where skips are recorded (one line each) so that `cargo xtask test --allow-skips` can list
/// them after the run: libtest hides a passing test's output.
pub const SKIP_LOG: &str = "ROCEMON_SKIP_LOG";

/// Skips the calling test (returns false) when `ok` is false, saying `why`; fails it instead
/// under [`REQUIRE_PRIVILEGED`]. Returns true when the test may run.
pub fn may_run(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if std::env::var(REQUIRE_PRIVILEGED).is_ok_and(|v| v == "1") {
        panic!("{test} cannot run: {why}; {REQUIRE_PRIVILEGED}=1 forbids skipping (run as root, or `cargo xtask test --allow-skips`)");
    }
    eprintln!("SKIPPED {test}: {why}");
    if let Ok(path) = std::env::var(SKIP_LOG) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{test}: {why}");
        }
    }
    false
}

/// [`may_run`] for tests that need root (namespaces, BPF).
pub fn require_root(what: &str) -> bool {
    may_run(is_root(), &format!("{what} needs root"))
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

/// The parse outcomes whose frames the AF_XDP capture program hands to its sockets, by name:
/// RoCE, RoCE cut in its extension headers or BTH, and broken mirror encapsulations. Written
/// out here, from the user guide's contract (docs/guide.md), not taken from the program's own decision.
pub const AFXDP_CAPTURED_OUTCOMES: [&str; 6] = [
    "roce",
    "roce_ext_truncated",
    "truncated_bth",
    "bad_gre",
    "bad_vxlan",
    "truncated_erspan",
];

/// Asserts that a command (`what`, for the message) exited 0; the message carries its
/// standard error.
pub fn assert_ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `BIN analyze --format json --no-progress ARGS FILES`, which must succeed: its JSON.
pub fn analyze_json(bin: &str, args: &[&str], files: &[&std::path::Path]) -> serde_json::Value {
    let out = std::process::Command::new(bin)
        .args(["analyze", "--format", "json", "--no-progress"])
        .args(args)
        .args(files)
        .output()
        .expect("run rocemon");
    assert_ok(&out, "rocemon analyze");
    let mut j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    // The inputs' names differ between equal reads (a file, its gzip, standard input): the
    // tests compare everything else (tests/analyze_inputs.rs checks the names themselves).
    if let Some(o) = j.as_object_mut() {
        o.remove("inputs");
    }
    j
}

/// A thread that runs `tick(n)` (n = 1, 2, ...) every `period` until dropped (then it is
/// stopped and joined): a device whose counters move, a switch that exports.
pub struct Ticker {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    pub fn start(
        period: std::time::Duration,
        mut tick: impl FnMut(u64) + Send + 'static,
    ) -> Ticker {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut n = 0;
            while !flag.load(Ordering::Relaxed) {
                n += 1;
                tick(n);
                std::thread::sleep(period);
            }
        });
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The flags that keep Debian's Chromium quiet and off the network in tests (headless, as
/// root): no sandbox, GPU, QUIC, first-run, background networking, component updates or sync.
pub const CHROMIUM_QUIET: [&str; 7] = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];
