//! `cargo xtask install`: build the release binary and place it, the systemd unit and the
//! example configuration. `--root` installs into a staging tree (packaging, tests).

use crate::{root, setup, sh};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct InstallArgs {
    /// Where the binary goes: PREFIX/bin/rocemon.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Install into this tree instead of / (a package staging directory).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Install this binary instead of building one.
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Also install the drop-in that AF_XDP capture (a mirror collector) needs.
    #[arg(long)]
    pub afxdp: bool,
}

/// `dest` under `root` (absolute `dest` joined below it).
fn under(root: &Path, dest: &Path) -> PathBuf {
    root.join(dest.strip_prefix("/").unwrap_or(dest))
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    println!("installed {}", to.display());
    Ok(())
}

/// The AF_XDP drop-in: CAP_NET_RAW and AF_XDP sockets for capture = "afxdp".
pub fn place_afxdp_dropin(root_dir: &Path) -> Result<PathBuf> {
    let to = under(
        root_dir,
        Path::new("/etc/systemd/system/rocemon.service.d/afxdp.conf"),
    );
    copy(&root().join("packaging/afxdp.conf"), &to, 0o644)?;
    Ok(to)
}

/// Places the files; returns the installed paths (binary, unit, config).
pub fn place(binary: &Path, prefix: &Path, root_dir: &Path) -> Result<[PathBuf; 3]> {
    let pkg = root().join("packaging");
    let bin = under(root_dir, &prefix.join("bin/rocemon"));
    copy(binary, &bin, 0o755)?;
    let unit_text = std::fs::read_to_string(pkg.join("rocemon.service"))?.replace(
        "/usr/local/bin/rocemon",
        &prefix.join("bin/rocemon").display().to_string(),
    );
    let unit = under(root_dir, Path::new("/etc/systemd/system/rocemon.service"));
    std::fs::create_dir_all(unit.parent().context("unit dir")?)?;
    std::fs::write(&unit, unit_text)?;
    println!("installed {}", unit.display());
    let etc = under(root_dir, Path::new("/etc/rocemon"));
    let cfg = etc.join("rocemon.toml");
    if cfg.exists() {
        // Never overwrite an operator's configuration.
        copy(
            &pkg.join("rocemon.toml"),
            &etc.join("rocemon.toml.new"),
            0o644,
        )?;
    } else {
        copy(&pkg.join("rocemon.toml"), &cfg, 0o644)?;
    }
    copy(&pkg.join("web.yml"), &etc.join("web.yml.example"), 0o600)?;
    Ok([bin, unit, cfg])
}

/// `binary` when given, else the release binary built now (its BPF programs inside).
pub fn release_binary(binary: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(b) = binary {
        return Ok(b);
    }
    setup::ensure()?;
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["build", "--release", "-p", "rocemon"]);
    setup::ebpf_env(&mut c);
    sh(&mut c)?;
    Ok(root().join("target/release/rocemon"))
}

pub fn install(a: InstallArgs) -> Result<()> {
    let binary = release_binary(a.binary)?;
    place(&binary, &a.prefix, &a.root)?;
    if a.afxdp {
        place_afxdp_dropin(&a.root)?;
    }
    if a.root == Path::new("/") {
        if Path::new("/run/systemd/system").exists() {
            sh(Command::new("systemctl").arg("daemon-reload"))?;
        }
        println!(
            "\nnext: edit /etc/rocemon/rocemon.toml (interfaces), then\n  rocemon check-config /etc/rocemon/rocemon.toml\n  systemctl enable --now rocemon\n  curl -s http://127.0.0.1:9442/metrics | head"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_into_a_staging_tree_without_overwriting_a_config() {
        let dir = std::env::temp_dir().join(format!("rocemon-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fake = dir.join("rocemon-binary");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        let stage = dir.join("stage");
        let [bin, unit, cfg] = place(&fake, Path::new("/opt/rocemon"), &stage).unwrap();
        assert_eq!(bin, stage.join("opt/rocemon/bin/rocemon"));
        let u = std::fs::read_to_string(&unit).unwrap();
        assert!(
            u.contains("ExecStart=/opt/rocemon/bin/rocemon run --config /etc/rocemon/rocemon.toml")
        );
        std::fs::write(&cfg, "interfaces = [\"mine\"]\n").unwrap();
        place(&fake, Path::new("/opt/rocemon"), &stage).unwrap();
        assert_eq!(
            std::fs::read_to_string(&cfg).unwrap(),
            "interfaces = [\"mine\"]\n"
        );
        assert!(stage.join("etc/rocemon/rocemon.toml.new").exists());
        assert!(stage.join("etc/rocemon/web.yml.example").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
