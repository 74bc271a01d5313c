//! rocemon runs as root and removes pins: it must only ever remove what it created, and only
//! one agent may own a pin directory. Each case reproduces a defect found by a hostile pass.

use rocemon_testkit::bpf_links::wait_links_gone;
use rocemon_testkit::netns::{run, Agent, BpfFs, VethPair};
use rocemon_testkit::{require_root, TempDir};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn rocemon(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rocemon")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every path below `root` (directories and files), sorted: what must not change.
fn tree(root: &Path) -> Vec<String> {
    fn walk(p: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            out.push(e.path().display().to_string());
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// The reproduction: `rocemon detach --pin-dir DIR` on an ordinary directory deleted its
/// subdirectories. It must refuse (exit 2, naming why) and leave everything.
#[test]
fn detach_refuses_a_directory_off_the_bpffs_and_removes_nothing() {
    let dir = TempDir::new("rocemon-detach-v").unwrap();
    let v = dir.path().join("v");
    std::fs::create_dir_all(v.join("etc-like/sub")).unwrap();
    std::fs::create_dir_all(v.join("home/u")).unwrap();
    std::fs::write(v.join("home/u/notes.txt"), "keep me").unwrap();
    let before = tree(&v);
    let out = rocemon(&["detach", "--pin-dir", v.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not on a bpffs"), "{}", stderr(&out));
    assert_eq!(tree(&v), before, "detach removed something");
    // The same for one interface.
    let out = rocemon(&[
        "detach",
        "--pin-dir",
        v.to_str().unwrap(),
        "--iface",
        "home",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(tree(&v), before);
}

/// A pin directory given as a symbolic link is refused: rocemon follows none.
#[test]
fn detach_refuses_a_symlinked_pin_dir() {
    let dir = TempDir::new("rocemon-detach-ln").unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir_all(target.join("eth0")).unwrap();
    let link = dir.path().join("pins");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = rocemon(&["detach", "--pin-dir", link.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert!(target.join("eth0").is_dir());
}

/// On a bpffs, detach removes only rocemon's own pins, by name and by kernel object type:
/// a directory of someone else's, a symbolic link leading out of the bpffs, and a map pinned
/// under a link's name all stay, and are named.
#[test]
fn detach_on_a_bpffs_leaves_what_is_not_rocemons() {
    if !require_root("mounting a bpffs") {
        return;
    }
    let dir = TempDir::new("rocemon-detach-fs").unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let root = fs.path().join("rocemon");
    std::fs::create_dir_all(root.join("foreign/sub")).unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(outside.join("eth0/maps-0123456789abcdef")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("evil")).unwrap();
    // A map (not a link) pinned where a link of rocemon's would be, and one of rocemon's map
    // names inside a layout directory (a map: rocemon's by name and type, so it goes).
    let eth = root.join("eth9");
    let layout = eth.join("maps-0123456789abcdef");
    std::fs::create_dir_all(&layout).unwrap();
    let bpftool_map = |path: &Path| {
        run(
            "bpftool",
            &[
                "map",
                "create",
                path.to_str().unwrap(),
                "type",
                "array",
                "key",
                "4",
                "value",
                "4",
                "entries",
                "1",
                "name",
                "notrocemon",
            ],
        )
        .unwrap();
    };
    bpftool_map(&eth.join("link_xdp@native"));
    bpftool_map(&layout.join("COUNTERS"));
    let outside_before = tree(&outside);

    let out = rocemon(&["detach", "--pin-dir", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    for kept in ["foreign", "evil", "link_xdp@native"] {
        assert!(err.contains(kept), "{kept} not named as left: {err}");
    }
    assert!(root.join("foreign/sub").is_dir());
    assert!(std::fs::symlink_metadata(root.join("evil")).is_ok());
    assert!(eth.join("link_xdp@native").exists(), "a map is no link");
    assert!(
        !layout.exists(),
        "rocemon's map pin (name and type) is removed"
    );
    assert_eq!(tree(&outside), outside_before, "the symlink was followed");
}

/// One agent per pin directory: a second one is refused naming the first; `detach` refuses
/// while the agent runs, `--force` removes the pins, and the agent then says its programs go
/// (instead of claiming they stay).
#[test]
fn one_agent_per_pin_dir_and_detach_waits_for_force() {
    if !require_root("namespaces, BPF and a bpffs") {
        return;
    }
    let dir = TempDir::new("rocemon-lock").unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let root = fs.path().join("rocemon");
    let pin = root.to_str().unwrap();
    let pair = VethPair::new("rclock").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let args = [
        "run",
        "--iface",
        ifn,
        "--hooks",
        "xdp",
        "--listen",
        ADDR,
        "--pin-dir",
        pin,
    ];
    let mut first = Agent::start(ns, BIN, &args).unwrap();
    first
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
        .unwrap();
    let pid = first.pid().unwrap();
    let own = first.link_ids().unwrap();

    let second = Command::new("ip")
        .args(["netns", "exec", ns, BIN])
        .args(["run", "--iface", ifn, "--hooks", "xdp"])
        .args(["--listen", "127.0.0.1:9443", "--pin-dir", pin])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains(&format!("process {pid}")),
        "the running instance is named: {}",
        stderr(&second)
    );

    let refused = rocemon(&["detach", "--pin-dir", pin]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert!(
        root.join(ifn.as_str()).is_dir(),
        "nothing removed without --force"
    );

    let forced = rocemon(&["detach", "--pin-dir", pin, "--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    let log = first.stop_ok();
    assert!(log.contains("were removed while this agent ran"), "{log}");
    assert!(!log.contains("stay attached"), "{log}");
    let left = wait_links_gone(&own, Duration::from_secs(30)).unwrap();
    assert!(left.is_empty(), "links left: {left:?}");
}

/// A second agent refused because the interface is taken (another agent holds its XDP hook,
/// pinned in another directory) leaves nothing in its own pin directory: it had pinned its
/// maps (about 20 MiB of kernel memory per interface) and left them.
#[test]
fn a_refused_start_leaves_no_pins_behind() {
    if !require_root("namespaces, BPF and a bpffs") {
        return;
    }
    let dir = TempDir::new("rocemon-refused").unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let (p1, p2) = (fs.path().join("one"), fs.path().join("two"));
    let pair = VethPair::new("rcref").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let run_args = |pin: &Path, listen: &'static str| {
        vec![
            "run".to_string(),
            "--iface".into(),
            ifn.to_string(),
            "--hooks".into(),
            "xdp".into(),
            "--listen".into(),
            listen.into(),
            "--pin-dir".into(),
            pin.display().to_string(),
        ]
    };
    let a1 = run_args(&p1, ADDR);
    let a1: Vec<&str> = a1.iter().map(String::as_str).collect();
    let mut first = Agent::start(ns, BIN, &a1).unwrap();
    first
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
        .unwrap();
    let before = tree(&p1);
    let second = Command::new("ip")
        .args(["netns", "exec", ns, BIN])
        .args(run_args(&p2, "127.0.0.1:9443"))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("already has an XDP program attached"),
        "{}",
        stderr(&second)
    );
    let left: Vec<String> = tree(&p2)
        .into_iter()
        .filter(|p| !p.ends_with(".lock"))
        .collect();
    assert!(
        left.is_empty(),
        "left under the refused agent's pin dir: {left:?}"
    );
    assert_eq!(tree(&p1), before, "the running agent's pins are untouched");
    first.stop_ok();
}

/// Two unpinned agents on one interface: the second is a usage error (exit 2) that names the
/// taken interface, not an internal failure.
#[test]
fn a_second_unpinned_agent_on_one_interface_is_a_usage_error() {
    if !require_root("namespaces and BPF") {
        return;
    }
    let pair = VethPair::new("rcdup").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    for mode in ["native", "auto", "skb"] {
        let xdp_mode = if mode == "skb" { "skb" } else { "native" };
        let mut first = Agent::start(
            ns,
            BIN,
            &[
                "run",
                "--no-pin",
                "--iface",
                ifn,
                "--hooks",
                "xdp",
                "--xdp-mode",
                xdp_mode,
                "--listen",
                ADDR,
            ],
        )
        .unwrap();
        first
            .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
            .unwrap();
        let second = Command::new("ip")
            .args(["netns", "exec", ns, BIN])
            .args(["run", "--no-pin", "--iface", ifn, "--hooks", "xdp"])
            .args(["--xdp-mode", mode, "--listen", "127.0.0.1:9443"])
            .output()
            .unwrap();
        assert_eq!(second.status.code(), Some(2), "{mode}: {}", stderr(&second));
        assert!(
            stderr(&second).contains("already has an XDP program attached"),
            "{mode}: {}",
            stderr(&second)
        );
        first.stop_ok();
    }
}
