//! `cargo xtask dist`: a tarball a new user installs and runs without the development
//! toolchain. Packed here around the binary the tests built (the release build is the same
//! code), unpacked in a fresh directory, `rocemon analyze` run from it with a PATH that holds
//! no cargo or rustc, and `install.sh` run into a staging tree.

use rocemon_testkit::{assert_ok, TempDir};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn dist(out: &Path) -> std::path::PathBuf {
    let o = Command::new(env!("CARGO"))
        .current_dir(REPO)
        .args([
            "run", "-q", "-p", "xtask", "--", "dist", "--binary", BIN, "--out",
        ])
        .arg(out)
        .output()
        .expect("cargo xtask dist");
    assert_ok(&o, "cargo xtask dist");
    let printed = String::from_utf8_lossy(&o.stdout);
    let tarball = printed.lines().last().expect("the tarball's path").trim();
    std::path::PathBuf::from(tarball)
}

/// A PATH without the development toolchain: the system's directories only.
const PLAIN_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

#[test]
fn the_tarball_runs_analyze_without_the_toolchain_and_installs() {
    let dir = TempDir::new("rocemon-dist").unwrap();
    let tarball = dist(&dir.path().join("out"));
    assert!(tarball.is_file(), "{}", tarball.display());
    let sum = std::fs::read_to_string(format!("{}.sha256", tarball.display())).unwrap();
    assert!(sum.len() > 64, "{sum}");

    // Unpacked where nothing of the repository is.
    let home = dir.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    let o = Command::new("tar")
        .current_dir(&home)
        .arg("xzf")
        .arg(&tarball)
        .output()
        .unwrap();
    assert_ok(&o, "tar xzf");
    let name = tarball
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string();
    let tree = home.join(&name);
    for f in [
        "bin/rocemon",
        "install.sh",
        "systemd/rocemon.service",
        "systemd/afxdp.conf",
        "etc/rocemon.toml",
        "dashboards/rocemon.json",
        "dashboards/rocemon.rules.yml",
        "docs/runbook.md",
        "README.md",
    ] {
        assert!(tree.join(f).is_file(), "{f} is not in the tarball");
    }
    let examples: Vec<_> = std::fs::read_dir(tree.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(examples.len(), 3, "{examples:?}");

    // A new user's first run: analyze an example capture, no cargo, no rustc on the PATH.
    for tool in ["cargo", "rustc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .env_clear()
            .env("PATH", PLAIN_PATH)
            .output()
            .unwrap();
        assert!(!found.status.success(), "{tool} on the plain PATH");
    }
    for capture in &examples {
        let o = Command::new(tree.join("bin/rocemon"))
            .current_dir(&home)
            .env_clear()
            .env("PATH", PLAIN_PATH)
            .arg("analyze")
            .arg(capture)
            .output()
            .unwrap();
        assert_ok(&o, "rocemon analyze from the tarball");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("RoCE"), "{text}");
    }

    // install.sh into a staging tree: the binary, the unit pointing at it, the configuration.
    let stage = dir.path().join("stage");
    let o = Command::new("sh")
        .arg(tree.join("install.sh"))
        .arg("--afxdp")
        .env_clear()
        .env("PATH", PLAIN_PATH)
        .env("DESTDIR", &stage)
        .env("PREFIX", "/opt/rocemon")
        .output()
        .unwrap();
    assert_ok(&o, "install.sh");
    assert!(stage.join("opt/rocemon/bin/rocemon").is_file());
    let unit = std::fs::read_to_string(stage.join("etc/systemd/system/rocemon.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/opt/rocemon/bin/rocemon run --config /etc/rocemon/rocemon.toml"),
        "{unit}"
    );
    assert!(stage
        .join("etc/systemd/system/rocemon.service.d/afxdp.conf")
        .is_file());
    // An operator's configuration is never overwritten: the new one lands beside it.
    let cfg = stage.join("etc/rocemon/rocemon.toml");
    std::fs::write(&cfg, "interfaces = [\"mine\"]\n").unwrap();
    let o = Command::new("sh")
        .arg(tree.join("install.sh"))
        .env_clear()
        .env("PATH", PLAIN_PATH)
        .env("DESTDIR", &stage)
        .output()
        .unwrap();
    assert_ok(&o, "install.sh again");
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        "interfaces = [\"mine\"]\n"
    );
    assert!(stage.join("etc/rocemon/rocemon.toml.new").is_file());
    // The installed binary checks the shipped configuration.
    let o = Command::new(stage.join("opt/rocemon/bin/rocemon"))
        .env_clear()
        .env("PATH", PLAIN_PATH)
        .arg("check-config")
        .arg(tree.join("etc/rocemon.toml"))
        .output()
        .unwrap();
    assert_ok(&o, "check-config of the shipped configuration");
}
