//! A bpffs of a test's own, mounted in a directory and unmounted on drop (nothing touches
//! the host's /sys/fs/bpf).

use anyhow::{bail, Context, Result};
use std::process::Command;

pub struct BpfFs(pub std::path::PathBuf);

impl BpfFs {
    pub fn mount(dir: &std::path::Path) -> Result<BpfFs> {
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args(["-t", "bpf", "bpf", dir.to_str().context("path")?])
            .output()
            .context("run mount")?;
        if !out.status.success() {
            bail!(
                "mount -t bpf {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(BpfFs(dir.to_path_buf()))
    }
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}
