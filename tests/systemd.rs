//! The shipped unit under a real systemd: a minimal Debian root (debootstrap, made once by
//! `cargo xtask setup` and kept in `/var/cache/rocemon`), booted with `systemd-nspawn -b` in a
//! network namespace of the test's own (its veth end is the agent's interface), the bpf
//! system calls allowed and a bpffs of the test's own at /sys/fs/bpf. The repository's unit,
//! binary and a configuration are installed as `cargo xtask install` places them (in a
//! staging tree, bound read-only into the container, whose root stays untouched under a
//! volatile overlay). Then: start (READY), scrape, reload, restart with counts continuing,
//! stop with the programs still counting, start again, `rocemon detach`.

use rocemon_testkit::bpf_links::link_details;
use rocemon_testkit::netns::{http_get_in, try_metric_sum, BpfFs, VethPair};
use rocemon_testkit::{
    assert_ok, fixtures, may_run, require_root, require_tshark, tshark, TempDir,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// Where `cargo xtask setup` keeps the Debian root.
const ROOT: &str = "/var/cache/rocemon/debian-bookworm";
const ADDR: &str = "127.0.0.1:9442";

/// A booted container, powered off (then killed) on drop.
struct Container {
    nspawn: Child,
    leader: u32,
}

impl Container {
    fn boot(ns: &str, bpffs: &Path, stage: &Path, log: &Path) -> Container {
        let bind_ro = |rel: &str| format!("--bind-ro={}:/{rel}", stage.join(rel).display());
        let nspawn = Command::new("systemd-nspawn")
            .args(["--quiet", "--register=no", "--keep-unit", "--boot"])
            .arg("--volatile=overlay")
            .arg(format!("--directory={ROOT}"))
            .arg(format!("--network-namespace-path=/run/netns/{ns}"))
            .arg("--system-call-filter=bpf perf_event_open")
            .arg("--capability=CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN,CAP_NET_RAW")
            .arg(format!("--bind={}:/sys/fs/bpf", bpffs.display()))
            .arg(bind_ro("usr/local/bin/rocemon"))
            .arg(bind_ro("etc/systemd/system/rocemon.service"))
            .arg(bind_ro("etc/rocemon"))
            .arg("--console=pipe")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(Stdio::from(
                std::fs::File::create(log.with_extension("err")).unwrap(),
            ))
            .spawn()
            .expect("systemd-nspawn");
        let pid = nspawn.id();
        let t = Instant::now();
        let leader = loop {
            // The container's init is systemd-nspawn's child.
            let children = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                .flat_map(|c| {
                    c.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok())
                        .collect::<Vec<_>>()
                })
                .next();
            if let Some(c) = children {
                break c;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the container did not start: {}",
                std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let c = Container { nspawn, leader };
        // Wait for the boot to finish (degraded is fine: a minimal root has failing units).
        let t = Instant::now();
        loop {
            let out = c.exec(&["systemctl", "is-system-running"]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "running" || state == "degraded" {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the container did not boot ({state}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        c
    }

    /// Runs a command inside the container (its namespaces, its files).
    fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--target={}", self.leader))
            .args(["--mount", "--uts", "--ipc", "--net", "--pid", "--"])
            .args(args)
            .output()
            .expect("nsenter")
    }

    /// Runs `systemctl ARGS` in the container and requires success.
    fn systemctl(&self, args: &[&str]) {
        let mut full = vec!["systemctl"];
        full.extend_from_slice(args);
        let out = self.exec(&full);
        assert!(
            out.status.success(),
            "systemctl {}: {}{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.journal()
        );
    }

    fn journal(&self) -> String {
        let out = self.exec(&["journalctl", "--no-pager", "-u", "rocemon", "-n", "60"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM: systemd-nspawn powers the container off.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.nspawn.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// `cargo xtask install --root STAGE --binary BIN`: the files where the unit expects them.
fn stage_install(stage: &Path, config: &str) {
    let out = Command::new(env!("CARGO"))
        .current_dir(REPO)
        .args(["run", "-q", "-p", "xtask", "--", "install", "--root"])
        .arg(stage)
        .arg("--binary")
        .arg(BIN)
        .output()
        .expect("cargo xtask install");
    assert_ok(&out, "cargo xtask install");
    // The example configuration is never overwritten by install; the test's replaces it.
    std::fs::write(stage.join("etc/rocemon/rocemon.toml"), config).unwrap();
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_unit_runs_under_a_real_systemd() {
    if !require_root("booting a container (systemd-nspawn)") {
        return;
    }
    let tools = ["systemd-nspawn", "nsenter", "tcpreplay"]
        .iter()
        .all(|t| have(t));
    if !may_run(
        tools && Path::new(ROOT).join("usr/lib/systemd/systemd").exists(),
        "systemd-nspawn, nsenter, tcpreplay and the Debian root of `cargo xtask setup`",
    ) {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-systemd").unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let pair = VethPair::new("rcsd").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let stage: PathBuf = dir.path().join("stage");
    stage_install(
        &stage,
        &format!(
            "interfaces = [\"{ifn}\"]\nhooks = [\"xdp\", \"tc-ingress\"]\nxdp_mode = \"native\"\nlisten = \"{ADDR}\"\npoll_interval_ms = 100\nlog_format = \"journal\"\n"
        ),
    );
    let fx = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let e = tshark::expected(&fx).unwrap();
    let c = Container::boot(ns, fs.path(), &stage, &dir.path().join("console.log"));

    let scrape = || match http_get_in(ns, ADDR, "/metrics") {
        Ok((200, body)) => Some(body),
        _ => None,
    };
    let packets = |b: &str| {
        try_metric_sum(b, "rocemon_packets_total", &[("hook", "xdp")]).unwrap_or(0.0) as u64
    };
    let wait = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let t = Instant::now();
        loop {
            if let Some(b) = scrape().filter(|b| ok(b)) {
                return b;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{what}: not seen on /metrics\n{}",
                c.journal()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // Start: `systemctl start` returns once the agent said READY=1 (Type=notify).
    c.systemctl(&["start", "rocemon"]);
    c.systemctl(&["is-active", "--quiet", "rocemon"]);
    wait("first scrape", &|_| true);
    pair.replay_from_b(&fx).unwrap();
    let body = wait("the first replay", &|b| packets(b) >= e.roce_packets);
    assert_eq!(packets(&body), e.roce_packets);

    // Reload (ExecReload: rocemon signals itself).
    c.systemctl(&["reload", "rocemon"]);
    wait("the reload", &|b| {
        try_metric_sum(b, "rocemon_config_reloads_total", &[("result", "success")]) == Some(1.0)
    });

    // Restart: the counts continue from the pinned maps.
    c.systemctl(&["restart", "rocemon"]);
    pair.replay_from_b(&fx).unwrap();
    let body = wait("the replay after a restart", &|b| {
        packets(b) >= 2 * e.roce_packets
    });
    assert_eq!(packets(&body), 2 * e.roce_packets);

    // Stop: the programs stay attached and count; the next start finds it all.
    c.systemctl(&["stop", "rocemon"]);
    let link = link_details(ns, ifn).unwrap();
    assert!(
        link.contains("prog/xdp"),
        "XDP must stay attached while stopped: {link}"
    );
    pair.replay_from_b(&fx).unwrap();
    c.systemctl(&["start", "rocemon"]);
    let body = wait("traffic sent while stopped", &|b| {
        packets(b) >= 3 * e.roce_packets
    });
    assert_eq!(packets(&body), 3 * e.roce_packets);

    // Uninstall: stop, then `rocemon detach` removes programs and pins.
    c.systemctl(&["stop", "rocemon"]);
    let out = c.exec(&["/usr/local/bin/rocemon", "detach"]);
    assert!(
        out.status.success(),
        "rocemon detach: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = link_details(ns, ifn).unwrap();
    assert!(!link.contains("prog/xdp"), "XDP left after detach: {link}");
    // The bpffs itself shows the kernel's own `maps.debug` and `progs.debug`: only
    // rocemon's directory must be gone.
    assert!(
        !fs.path().join("rocemon").exists(),
        "pins left after detach; detach said {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let journal = c.journal();
    assert!(journal.contains("serving metrics"), "{journal}");
}
