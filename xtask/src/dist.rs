//! `cargo xtask dist`: a tarball a user installs without the development toolchain: the
//! release binary (its BPF programs inside), the systemd unit and its AF_XDP drop-in, the
//! example configuration, the Grafana dashboard and Prometheus rules, the docs, three small
//! example captures, and `install.sh` (what `cargo xtask install` does, in plain sh).

use crate::{root, sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct DistArgs {
    /// Where the tarball (and its .sha256) goes.
    #[arg(long, default_value = "target/dist")]
    pub out: PathBuf,
    /// Package this binary instead of building the release one.
    #[arg(long)]
    pub binary: Option<PathBuf>,
}

/// What `install.sh` does: the binary to PREFIX/bin, the unit (pointing at it) and the
/// configuration (never overwriting an operator's) under DESTDIR.
const INSTALL_SH: &str = r#"#!/bin/sh
# Installs rocemon from this directory: PREFIX (default /usr/local) for the binary, the
# systemd unit and /etc/rocemon/rocemon.toml (never overwritten: a new one lands as .new).
# DESTDIR stages into another tree (packaging). Add --afxdp for a mirror collector's drop-in.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
install -D -m 0755 "$here/bin/rocemon" "$DESTDIR$PREFIX/bin/rocemon"
mkdir -p "$DESTDIR/etc/systemd/system" "$DESTDIR/etc/rocemon"
sed "s#/usr/local/bin/rocemon#$PREFIX/bin/rocemon#" "$here/systemd/rocemon.service" \
  > "$DESTDIR/etc/systemd/system/rocemon.service"
if [ -e "$DESTDIR/etc/rocemon/rocemon.toml" ]; then
  install -m 0644 "$here/etc/rocemon.toml" "$DESTDIR/etc/rocemon/rocemon.toml.new"
else
  install -m 0644 "$here/etc/rocemon.toml" "$DESTDIR/etc/rocemon/rocemon.toml"
fi
install -m 0600 "$here/etc/web.yml" "$DESTDIR/etc/rocemon/web.yml.example"
if [ "${1:-}" = "--afxdp" ]; then
  install -D -m 0644 "$here/systemd/afxdp.conf" \
    "$DESTDIR/etc/systemd/system/rocemon.service.d/afxdp.conf"
fi
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "installed $DESTDIR$PREFIX/bin/rocemon, the unit and /etc/rocemon/rocemon.toml"
echo "next: edit /etc/rocemon/rocemon.toml (interfaces), then"
echo "  rocemon check-config /etc/rocemon/rocemon.toml"
echo "  systemctl enable --now rocemon"
"#;

/// The package's name: `rocemon-VERSION-ARCH-linux`.
pub fn name() -> String {
    format!(
        "rocemon-{}-{}-linux",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn executable(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", p.display()))
}

/// Builds the tree and the tarball; returns the tarball's path.
pub fn dist(a: DistArgs) -> Result<PathBuf> {
    let binary = crate::install::release_binary(a.binary)?;
    if !binary.is_file() {
        bail!(
            "{} is not a file: build it first (cargo build --release -p rocemon) or leave out --binary",
            binary.display()
        );
    }
    let out = if a.out.is_absolute() {
        a.out
    } else {
        root().join(a.out)
    };
    let tree = out.join(name());
    let _ = std::fs::remove_dir_all(&tree);
    let r = root();
    copy(&binary, &tree.join("bin/rocemon"))?;
    executable(&tree.join("bin/rocemon"))?;
    for (from, to) in [
        ("packaging/rocemon.service", "systemd/rocemon.service"),
        ("packaging/afxdp.conf", "systemd/afxdp.conf"),
        ("packaging/rocemon.toml", "etc/rocemon.toml"),
        ("packaging/web.yml", "etc/web.yml"),
        ("dashboards/rocemon.json", "dashboards/rocemon.json"),
        (
            "dashboards/rocemon.rules.yml",
            "dashboards/rocemon.rules.yml",
        ),
        (
            "dashboards/rocemon.rules.test.yml",
            "dashboards/rocemon.rules.test.yml",
        ),
        ("README.md", "README.md"),
    ] {
        copy(&r.join(from), &tree.join(to))?;
    }
    for doc in [
        "guide.md",
        "deploy.md",
        "runbook.md",
        "metrics.md",
        "ipfix.md",
    ] {
        copy(&r.join("docs").join(doc), &tree.join("docs").join(doc))?;
    }
    // Captures to try `rocemon analyze` on at once: RDMA operations, a pause storm beside
    // congestion, a training job with a slow step.
    let examples = tree.join("examples");
    std::fs::create_dir_all(&examples)?;
    rocemon_testkit::fixtures::rc_ipv4().write(&examples)?;
    rocemon_testkit::lossless::lossless().write(&examples)?;
    rocemon_testkit::training::capture(
        "training",
        rocemon_testkit::training::Job {
            slow_at: Some(15),
            ..rocemon_testkit::training::Job::steady(30)
        },
    )
    .write(&examples)?;
    std::fs::write(tree.join("install.sh"), INSTALL_SH)?;
    executable(&tree.join("install.sh"))?;
    let tarball = out.join(format!("{}.tar.gz", name()));
    sh(Command::new("tar")
        .current_dir(&out)
        .arg("czf")
        .arg(&tarball)
        .arg(name()))?;
    let sum = Command::new("sha256sum")
        .current_dir(&out)
        .arg(format!("{}.tar.gz", name()))
        .output()
        .context("run sha256sum")?;
    if !sum.status.success() {
        bail!("sha256sum failed: {}", String::from_utf8_lossy(&sum.stderr));
    }
    std::fs::write(out.join(format!("{}.tar.gz.sha256", name())), &sum.stdout)?;
    println!("{}", tarball.display());
    Ok(tarball)
}
