//! Counters that survive a restart or upgrade: the maps and the program links of each
//! interface are pinned on a bpffs, so the programs keep counting while no agent runs, and a
//! new agent swaps its programs into the existing links (`bpf_link_update`: atomic, no packet
//! missed) over the existing maps.
//!
//! Layout: `<root>/<iface>/link_<hook>` for the links and `<root>/<iface>/<layout>/<MAP>` for
//! the maps, where `<layout>` names the shapes of the shared types and the flow map size: an
//! upgrade that changes them starts from new maps (the counters restart, and the log says
//! so) instead of reading old bytes with a new layout. `rocemon detach` removes it all.

use agent_common::{
    FlowKey, FlowStats, Hook, HookCounters, SessionKey, SessionStats, MAP_COUNTERS, MAP_FLOWS,
    MAP_SESSIONS, SESSION_MAP_ENTRIES,
};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where pins go unless configured otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/rocemon";
/// The maps that carry counts across restarts (the rest is per process: scratch, logs).
pub const PINNED_MAPS: [&str; 3] = [MAP_COUNTERS, MAP_FLOWS, MAP_SESSIONS];
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// A name for the shapes of everything pinned: sizes of the shared types and map sizes.
pub fn layout_tag(flow_entries: u32) -> String {
    let parts = [
        std::mem::size_of::<HookCounters>() as u64,
        Hook::COUNT as u64,
        std::mem::size_of::<FlowKey>() as u64,
        std::mem::size_of::<FlowStats>() as u64,
        std::mem::size_of::<SessionKey>() as u64,
        std::mem::size_of::<SessionStats>() as u64,
        u64::from(SESSION_MAP_ENTRIES),
        u64::from(flow_entries),
    ];
    // FNV-1a over the little-endian bytes: stable across builds and platforms.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in parts.iter().flat_map(|p| p.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("maps-{h:016x}")
}

fn is_bpffs(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed statfs is a valid out parameter; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// Makes sure `root` lies on a bpffs: creates it there, mounting a bpffs at /sys/fs/bpf first
/// when the default location has none (minimal hosts, containers).
pub fn ensure_bpffs(root: &Path) -> Result<()> {
    let mut base = root;
    while !base.exists() {
        base = base
            .parent()
            .context("pin directory has no existing parent")?;
    }
    if !is_bpffs(base) {
        if base == Path::new("/sys/fs/bpf") {
            let (src, dst, fs) = (c"bpf", c"/sys/fs/bpf", c"bpf");
            // SAFETY: valid NUL-terminated strings; no mount data.
            let r = unsafe {
                libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null())
            };
            if r != 0 {
                bail!(
                    "/sys/fs/bpf is not a bpffs and mounting one failed ({}); mount it with `mount -t bpf bpf /sys/fs/bpf`, or run with --no-pin",
                    std::io::Error::last_os_error()
                );
            }
            log::info!("mounted a bpffs at /sys/fs/bpf for the pins");
        } else {
            return Err(crate::error::UsageError::BadConfig(format!(
                "pin directory {} is not on a bpffs; mount one with `mount -t bpf bpf DIR`, choose another pin_dir, or use --no-pin",
                root.display()
            ))
            .into());
        }
    }
    std::fs::create_dir_all(root).with_context(|| format!("create {}", root.display()))
}

/// The pins of one interface.
pub struct IfacePins {
    pub dir: PathBuf,
    pub layout: String,
}

impl IfacePins {
    pub fn new(root: &Path, iface: &str, flow_entries: u32) -> Result<IfacePins> {
        let p = IfacePins {
            dir: root.join(iface),
            layout: layout_tag(flow_entries),
        };
        std::fs::create_dir_all(p.map_dir())
            .with_context(|| format!("create {}", p.map_dir().display()))?;
        Ok(p)
    }

    pub fn map_dir(&self) -> PathBuf {
        self.dir.join(&self.layout)
    }

    pub fn map_path(&self, map: &str) -> PathBuf {
        self.map_dir().join(map)
    }

    pub fn link_path(&self, hook: Hook) -> PathBuf {
        self.dir.join(format!("link_{}", hook.name()))
    }

    /// Whether maps of the current layout were there before this agent started.
    pub fn maps_exist(&self) -> bool {
        self.map_path(MAP_COUNTERS).exists()
    }

    /// After attaching: removes links of hooks no longer configured (detaching them) and maps
    /// of other layouts (freed once no program uses them).
    pub fn prune(&self, hooks: &[Hook]) -> Result<()> {
        for e in std::fs::read_dir(&self.dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // Links are pinned as link_<hook>@<mode>.
            if let Some(rest) = name.strip_prefix("link_") {
                let hook = rest.split('@').next().unwrap_or(rest);
                if !hooks.iter().any(|h| h.name() == hook) {
                    log::info!("detaching {hook} from a previous run (no longer configured)");
                    std::fs::remove_file(e.path())
                        .with_context(|| format!("remove {}", e.path().display()))?;
                }
                continue;
            }
            if name.starts_with("maps-") && name != self.layout {
                log::warn!(
                    "maps of another layout ({name}, an older rocemon or flow map size) replaced: counters restart"
                );
                remove_tree(&e.path())?;
            }
        }
        Ok(())
    }
}

/// Removes a directory of pins (removing a pin drops its reference to the object).
fn remove_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let p = e.path();
        if p.is_dir() {
            remove_tree(&p)?;
        } else {
            std::fs::remove_file(&p).with_context(|| format!("remove {}", p.display()))?;
        }
    }
    std::fs::remove_dir(dir).with_context(|| format!("remove {}", dir.display()))
}

/// `rocemon detach`: removes the pins of `iface` (or of every interface), which detaches the
/// pinned programs and frees the maps. Returns the interfaces cleaned.
pub fn detach(root: &Path, iface: Option<&str>) -> Result<Vec<String>> {
    if !root.exists() {
        return Ok(Vec::new());
    }
    let mut done = Vec::new();
    for e in std::fs::read_dir(root)
        .with_context(|| format!("read {}", root.display()))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if iface.is_some_and(|i| i != name) || !e.path().is_dir() {
            continue;
        }
        remove_tree(&e.path())?;
        done.push(name);
    }
    if iface.is_none() {
        let _ = std::fs::remove_dir(root);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_tag_follows_the_flow_map_size() {
        assert_eq!(layout_tag(1024), layout_tag(1024));
        assert_ne!(layout_tag(1024), layout_tag(2048));
        assert!(layout_tag(1).starts_with("maps-"));
    }
}
