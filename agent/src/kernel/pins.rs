//! Counters that survive a restart or upgrade: the maps and the program links of each
//! interface are pinned on a bpffs, so the programs keep counting while no agent runs, and a
//! new agent swaps its programs into the existing links (`bpf_link_update`: atomic, no packet
//! missed) over the existing maps.
//!
//! Layout: `<root>/<iface>/link_<hook>@<mode>` for the links and `<root>/<iface>/<layout>/<MAP>`
//! for the maps, where `<layout>` names the shapes of the shared types and the flow map size: an
//! upgrade that changes them starts from new maps (the counters restart, and the log says
//! so) instead of reading old bytes with a new layout. `rocemon detach` removes it all.
//!
//! rocemon runs as root and removes files, so it only ever removes what it created: the pin
//! root must be a real directory on a bpffs (statfs magic), symbolic links are never followed,
//! and an entry is removed only when both its name and its kernel object type are rocemon's
//! (a `link_*` pin that is a BPF link, a map pin of a known name inside a `maps-*` layout
//! directory). Everything else is left in place and named. One agent holds a pin root at a
//! time: [`PinLock`] is an exclusive `flock` on the root directory itself.

use agent_common::flow_cache::{CachedFlow, FLOW_CACHE_SLOTS, MAP_FLOW_CACHE, MAP_FLOW_FLUSHING};
use agent_common::{
    FlowKey, FlowKey4, FlowStats, Hook, HookSlot, SessionKey, SessionStats, MAP_COUNTERS,
    MAP_FLOWS, MAP_FLOWS4, MAP_SESSIONS, MAP_TC_SLOW, MAP_XDP_SLOW, SESSION_MAP_ENTRIES,
};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use crate::config::FlowMapSizes;
pub use crate::config::DEFAULT_PIN_DIR;
use crate::kernel::pin_object::{detach_link, object_kind, ObjectKind};
/// The maps that carry counts across restarts (the rest is per process: scratch, logs), and
/// the program arrays of the slow programs: the kernel empties a program array when its last
/// user reference closes, so without a pin the pinned links' fast programs would lose their
/// slow path when the agent exits.
/// The flow cache holds the newest state of its flows (write-back), so it carries counts too.
pub const PINNED_MAPS: [&str; 9] = [
    MAP_COUNTERS,
    MAP_FLOWS,
    MAP_FLOWS4,
    agent_common::MAP_FLOWS_OUT,
    MAP_FLOW_CACHE,
    MAP_FLOW_FLUSHING,
    MAP_SESSIONS,
    MAP_XDP_SLOW,
    MAP_TC_SLOW,
];
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// The kind of the flow maps, in the layout name: pinned maps of another kind are replaced,
/// never reused (1: LRU per-CPU hash maps, before the idle timeout; 2: per-CPU hash maps that
/// refuse new flows when full, emptied of idle flows by the agent; 3: LRU per-CPU hash maps
/// again, so a full map admits new flows, and the idle timeout too; 4: and a third map for
/// the flows the host sends).
const FLOW_MAP_KIND: u64 = 4;

/// A name for the shapes of everything pinned: sizes of the shared types, map sizes and
/// kinds.
pub fn layout_tag(flow_maps: FlowMapSizes) -> String {
    let parts = [
        FLOW_MAP_KIND,
        agent_common::flow::FLOW_STATS_ORDER,
        agent_common::counters::COUNTERS_ORDER,
        std::mem::size_of::<HookSlot>() as u64,
        Hook::COUNT as u64,
        std::mem::size_of::<FlowKey>() as u64,
        std::mem::size_of::<FlowKey4>() as u64,
        std::mem::size_of::<FlowStats>() as u64,
        std::mem::size_of::<CachedFlow>() as u64,
        u64::from(FLOW_CACHE_SLOTS),
        std::mem::size_of::<agent_common::cache_mode::FlushState>() as u64,
        std::mem::size_of::<SessionKey>() as u64,
        std::mem::size_of::<SessionStats>() as u64,
        u64::from(SESSION_MAP_ENTRIES),
        u64::from(flow_maps.ipv4),
        u64::from(flow_maps.ipv6),
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

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn usage(msg: String) -> anyhow::Error {
    crate::error::UsageError::BadConfig(msg).into()
}

/// Refuses a pin root rocemon must not write or remove in: a symbolic link, or a directory
/// that is not on a bpffs (rocemon never pins anywhere else, so there is nothing of its own
/// there to remove).
pub fn check_root(root: &Path) -> Result<()> {
    if is_symlink(root) {
        return Err(usage(format!(
            "pin directory {} is a symbolic link; rocemon follows none: give the real directory on the bpffs",
            root.display()
        )));
    }
    if !is_bpffs(root) {
        return Err(usage(format!(
            "pin directory {} is not on a bpffs, so it holds no pins of rocemon's and nothing is removed; give the pin_dir that `rocemon run` used (default {DEFAULT_PIN_DIR})",
            root.display()
        )));
    }
    Ok(())
}

/// Makes sure `root` lies on a bpffs: creates it there, mounting a bpffs at /sys/fs/bpf first
/// when the default location has none (minimal hosts, containers). No part of the path that
/// exists may be a symbolic link.
pub fn ensure_bpffs(root: &Path) -> Result<()> {
    let mut base = root;
    while !base.exists() {
        base = base
            .parent()
            .context("pin directory has no existing parent")?;
    }
    if root.exists() && is_symlink(root) {
        return Err(usage(format!(
            "pin directory {} is a symbolic link; rocemon follows none: give the real directory on the bpffs",
            root.display()
        )));
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
            return Err(usage(format!(
                "pin directory {} is not on a bpffs; mount one with `mount -t bpf bpf DIR`, choose another pin_dir, or use --no-pin",
                root.display()
            )));
        }
    }
    std::fs::create_dir_all(root).with_context(|| format!("create {}", root.display()))?;
    check_root(root)
}

/// Whether `name` is a link pin name of rocemon's: `link_<hook>` or `link_<hook>@<mode>`.
fn is_link_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("link_") else {
        return false;
    };
    let (hook, mode) = match rest.split_once('@') {
        Some((h, m)) => (h, Some(m)),
        None => (rest, None),
    };
    Hook::ALL.iter().any(|h| h.name() == hook)
        && mode.is_none_or(|m| ["native", "skb", "tcx"].contains(&m))
}

/// Whether `name` is a layout directory name of rocemon's: `maps-` and 16 hex digits.
fn is_layout_name(name: &str) -> bool {
    name.strip_prefix("maps-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What a removal did: entries removed, and entries left because they are not rocemon's.
#[derive(Debug, Default)]
pub struct Removal {
    pub removed: Vec<PathBuf>,
    pub left: Vec<PathBuf>,
}

impl Removal {
    fn remove_file(&mut self, p: PathBuf) -> Result<()> {
        std::fs::remove_file(&p).with_context(|| format!("remove {}", p.display()))?;
        self.removed.push(p);
        Ok(())
    }
    /// Removes an empty directory; a directory that still holds something is left.
    fn remove_dir_if_empty(&mut self, p: PathBuf) {
        if std::fs::remove_dir(&p).is_ok() {
            self.removed.push(p);
        }
    }
}

/// Removes the map pins of one layout directory (known names that are maps), then the
/// directory when nothing else is in it.
fn remove_layout(dir: &Path, out: &mut Removal) -> Result<()> {
    for e in std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .flatten()
    {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let own = PINNED_MAPS.contains(&name.as_str())
            && !is_symlink(&p)
            && object_kind(&p) == Some(ObjectKind::Map);
        if own {
            out.remove_file(p)?;
        } else {
            out.left.push(p);
        }
    }
    out.remove_dir_if_empty(dir.to_path_buf());
    Ok(())
}

/// Removes rocemon's pins in one interface directory: links (`keep_hooks` empty: all of
/// them, else those of other hooks) and layout directories (`keep_layout`: all but that one).
/// Returns the removal; the interface directory itself goes when it ends empty and nothing is
/// kept.
fn remove_in_iface(
    dir: &Path,
    keep_hooks: &[Hook],
    keep_layout: Option<&str>,
    out: &mut Removal,
) -> Result<()> {
    for e in std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .flatten()
    {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if is_symlink(&p) {
            out.left.push(p);
            continue;
        }
        if is_link_name(&name) && object_kind(&p) == Some(ObjectKind::Link) {
            let hook = name["link_".len()..].split('@').next().unwrap_or_default();
            if !keep_hooks.iter().any(|h| h.name() == hook) {
                if !keep_hooks.is_empty() {
                    log::info!("detaching {hook} from a previous run (no longer configured)");
                }
                detach_link(&p);
                out.remove_file(p)?;
            }
            continue;
        }
        if is_layout_name(&name) && p.is_dir() {
            if Some(name.as_str()) != keep_layout {
                if keep_layout.is_some() {
                    log::warn!(
                        "maps of another layout ({name}, an older rocemon or flow map size) replaced: counters restart"
                    );
                }
                remove_layout(&p, out)?;
            }
            continue;
        }
        out.left.push(p);
    }
    if keep_hooks.is_empty() && keep_layout.is_none() {
        out.remove_dir_if_empty(dir.to_path_buf());
    }
    Ok(())
}

/// The pins of one interface.
pub struct IfacePins {
    pub dir: PathBuf,
    pub layout: String,
}

impl IfacePins {
    /// Creates (or finds) the interface's pin directory under a root that [`ensure_bpffs`]
    /// accepted; refuses an interface directory that is a symbolic link.
    pub fn new(root: &Path, iface: &str, flow_maps: FlowMapSizes) -> Result<IfacePins> {
        let p = IfacePins {
            dir: root.join(iface),
            layout: layout_tag(flow_maps),
        };
        for d in [&p.dir, &p.map_dir()] {
            if is_symlink(d) {
                return Err(usage(format!(
                    "{} is a symbolic link; rocemon follows none in its pin directory: remove it",
                    d.display()
                )));
            }
        }
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

    /// Whether any link pin of this interface is still there (`rocemon detach --force` under
    /// a running agent removes them).
    pub fn links_pinned(&self) -> bool {
        std::fs::read_dir(&self.dir).is_ok_and(|d| {
            d.flatten()
                .any(|e| is_link_name(&e.file_name().to_string_lossy()))
        })
    }

    /// Removes every link pin of this interface (the maps stay).
    pub fn remove_links(&self) -> Result<()> {
        let mut out = Removal::default();
        remove_in_iface(&self.dir, &[], Some(&self.layout), &mut out)?;
        Ok(())
    }

    /// After a refused start: removes what that attempt pinned. `maps`: the maps of this
    /// layout (they were new); `links`: every link pin (there were none before); `dir`: the
    /// interface's directory, when it was new and is empty now. A running agent's pins are
    /// never in a directory this is called for with new maps (it would have reused them).
    pub fn remove_created(&self, maps: bool, links: bool, dir: bool) {
        if links {
            if let Err(e) = self.remove_links() {
                log::warn!("remove the link pins under {}: {e:#}", self.dir.display());
            }
        }
        if maps {
            for m in PINNED_MAPS {
                let p = self.map_path(m);
                if let Err(e) = std::fs::remove_file(&p) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        log::warn!("remove {}: {e}", p.display());
                    }
                }
            }
            let _ = std::fs::remove_dir(self.map_dir());
        }
        if dir {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    /// After attaching: removes links of hooks no longer configured (detaching them) and maps
    /// of other layouts (freed once no program uses them). Leaves anything not rocemon's.
    pub fn prune(&self, hooks: &[Hook]) -> Result<()> {
        let mut out = Removal::default();
        // An empty hook list would mean "remove every link": never the case after attaching.
        let keep = if hooks.is_empty() {
            &Hook::ALL[..]
        } else {
            hooks
        };
        remove_in_iface(&self.dir, keep, Some(&self.layout), &mut out)?;
        for p in &out.left {
            log::warn!(
                "{} is not rocemon's (by name or object type): left in place",
                p.display()
            );
        }
        Ok(())
    }
}

/// `rocemon detach`: removes the pins of `iface` (or of every interface), which detaches the
/// pinned programs and frees the maps. Only rocemon's own pins go; the rest is reported in
/// [`Removal::left`]. Returns the interfaces whose pins were removed.
pub fn detach(root: &Path, iface: Option<&str>) -> Result<(Vec<String>, Removal)> {
    let mut out = Removal::default();
    if !root.exists() && !is_symlink(root) {
        return Ok((Vec::new(), out));
    }
    check_root(root)?;
    let mut done = Vec::new();
    for e in std::fs::read_dir(root)
        .with_context(|| format!("read {}", root.display()))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if iface.is_some_and(|i| i != name) {
            continue;
        }
        let p = e.path();
        if is_symlink(&p) || !p.is_dir() {
            out.left.push(p);
            continue;
        }
        let before = out.removed.len();
        remove_in_iface(&p, &[], None, &mut out)?;
        if out.removed.len() > before {
            done.push(name);
        }
    }
    if iface.is_none() {
        // The root goes too when it ends empty (a mount point or a non-empty one stays).
        if std::fs::remove_dir(root).is_ok() {
            out.removed.push(root.to_path_buf());
        }
    }
    Ok((done, out))
}

/// One agent per pin root: an exclusive, non-blocking `flock` on the root directory, held
/// for the agent's life (the kernel drops it when the process ends, however it ends).
pub struct PinLock {
    _dir: std::fs::File,
}

impl PinLock {
    /// Takes the lock, or says which process holds it (exit status 2).
    pub fn acquire(root: &Path) -> Result<PinLock> {
        let dir = open_dir(root)?;
        if try_flock(&dir) {
            return Ok(PinLock { _dir: dir });
        }
        let who = holder(root)
            .map(|pid| format!("process {pid}"))
            .unwrap_or_else(|| "another process".into());
        Err(usage(format!(
            "another rocemon ({who}) is running with pin directory {}; stop it first (`systemctl stop rocemon`), or give this one its own --pin-dir",
            root.display()
        )))
    }

    /// Whether an agent holds the lock of `root` now (and which process, where known).
    pub fn held(root: &Path) -> Option<Option<u32>> {
        let dir = open_dir(root).ok()?;
        if try_flock(&dir) {
            None
        } else {
            Some(holder(root))
        }
    }
}

fn open_dir(root: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(root)
        .with_context(|| format!("open the pin directory {}", root.display()))
}

fn try_flock(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The process holding a flock on `path`, from /proc/locks (matched by device and inode).
fn holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let (maj, min) = (libc::major(m.dev()), libc::minor(m.dev()));
    let want = format!("{maj:02x}:{min:02x}:{}", m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_tag_follows_the_flow_map_size() {
        let tag = |v4, v6| layout_tag(FlowMapSizes { ipv4: v4, ipv6: v6 });
        // One layout, however its sizes are given: the same tag (pins of one run are found by
        // the next), of the documented shape.
        assert_eq!(tag(1024, 1024), layout_tag(FlowMapSizes::both(1024)));
        let t = tag(1024, 1024);
        let hex = t.strip_prefix("maps-").expect("maps- prefix");
        assert_eq!(hex.len(), 16, "{t}");
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{t}"
        );
        assert_ne!(tag(1024, 1024), tag(2048, 2048));
        assert_ne!(tag(1024, 16), tag(1024, 1024), "the IPv6 map's size");
        assert_ne!(tag(16, 1024), tag(1024, 1024), "the IPv4 map's size");
        assert!(tag(1, 1).starts_with("maps-"));
    }

    #[test]
    fn link_names_are_rocemons_only_with_a_known_hook_and_mode() {
        assert!(is_link_name("link_xdp@native"));
        assert!(is_link_name("link_tc_egress@tcx"));
        assert!(is_link_name("link_xdp"));
        assert!(!is_link_name("link_xdp@weird"));
        assert!(!is_link_name("link_etc"));
        assert!(!is_link_name("etc"));
    }

    #[test]
    fn layout_names_are_maps_and_sixteen_hex_digits() {
        assert!(is_layout_name(&layout_tag(FlowMapSizes::both(16384))));
        assert!(!is_layout_name("maps-"));
        assert!(!is_layout_name("maps-important-data"));
        assert!(!is_layout_name("home"));
    }

    #[test]
    fn a_directory_off_the_bpffs_is_refused_and_kept() {
        let d = std::env::temp_dir().join(format!("rocemon-pins-{}", std::process::id()));
        std::fs::create_dir_all(d.join("etc-like/sub")).unwrap();
        let err = detach(&d, None).unwrap_err();
        assert!(format!("{err:#}").contains("not on a bpffs"), "{err:#}");
        assert!(d.join("etc-like/sub").is_dir());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_directory_has_nothing_to_detach() {
        let (done, out) = detach(Path::new("/nonexistent/rocemon-pins"), None).unwrap();
        assert!(done.is_empty() && out.removed.is_empty() && out.left.is_empty());
    }
}
