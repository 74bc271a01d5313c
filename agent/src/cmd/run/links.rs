//! The watched interfaces of `rocemon run`: each one attached, and followed by name (a deleted
//! interface is detached and shows as down; one that comes back is attached again).

use crate::config::Config;
use crate::export::http::Shared;
use crate::export::metrics::Metrics;
use crate::kernel::loader::{self, Attachment};
use agent_common::Hook;
use anyhow::{Context, Result};

/// Loads and attaches everything configured on one interface.
pub fn attach_one(iface: &str, config: &Config) -> Result<Attachment> {
    let p = crate::kernel::attach::attach(
        iface,
        loader::AttachOptions {
            hooks: &config.hooks,
            xdp_mode: config.xdp_mode,
            flow_maps: config.flow_maps,
            afxdp: config.afxdp,
            pin_root: &config.pin_dir,
            pin: config.pin,
            switches: config.switches,
        },
    )
    .with_context(|| format!("attach to {iface}"))?;
    log::info!(
        "attached to {iface} (ifindex {}): {}",
        p.ifindex,
        p.hooks
            .iter()
            .map(|h| match (h, p.xdp_mode) {
                (Hook::Xdp, Some(m)) => format!("xdp ({m} mode)"),
                (Hook::AfXdp, Some(m)) => format!("afxdp capture (XDP {m} mode)"),
                _ => h.name().to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(p)
}

/// The mode label of a probe's hook.
fn mode_of(p: &Attachment, h: Hook) -> &'static str {
    if matches!(h, Hook::Xdp | Hook::AfXdp) {
        p.xdp_mode.unwrap_or("skb")
    } else {
        "tcx"
    }
}

/// Shows a probe's hooks as attached (and its interface up, its AF_XDP sockets) in the metrics.
pub fn show_attached(m: &Metrics, p: &Attachment) {
    for h in &p.hooks {
        m.set_attached(&p.iface, *h, mode_of(p, *h));
    }
    m.set_interface_up(&p.iface, true);
    // The AF_XDP sockets (and their modes) show from the first scrape on.
    m.set_capture_queues(&p.iface, &p.capture_queues());
}

/// Follows the watched interfaces by name: one that is gone (deleted, or renamed away) has
/// its programs detached and shows as down; one that comes back (a new interface index under
/// the name) is attached again, over the pinned maps when pinning (the counts continue);
/// an MTU change is logged (the programs handle any frame size). Cheap: one
/// `if_nametoindex` per interface.
pub fn reconcile(
    probes: &mut [Option<Attachment>],
    mtus: &mut [Option<u32>],
    config: &Config,
    shared: &Shared,
) -> Vec<usize> {
    use crate::sources::links::{link_state, LinkState};
    let mut gone = Vec::new();
    for (i, iface) in config.ifaces.iter().enumerate() {
        let state = link_state(iface);
        if let LinkState::Present { mtu: Some(m), .. } = state {
            if let Some(old) = mtus[i].filter(|o| *o != m) {
                log::info!("MTU of {iface} changed from {old} to {m}; counting continues");
            }
            mtus[i] = Some(m);
        }
        let current = probes[i].as_ref().map(|p| p.ifindex);
        let wanted = match state {
            LinkState::Present { ifindex, .. } => Some(ifindex),
            LinkState::Absent => None,
        };
        // The same index is not the same device: one deleted and created again under it
        // (inside one poll, or while the agent was stopped) no longer runs our programs.
        let lost = match (&probes[i], current == wanted) {
            (Some(p), true) => p.lost_link(),
            _ => None,
        };
        if current == wanted && lost.is_none() {
            continue;
        }
        if let Some(old) = probes[i].take() {
            match (wanted, lost) {
                (None, _) => log::warn!(
                    "{iface} is gone (deleted or renamed); its programs are detached, and counting resumes when an interface named {iface} appears"
                ),
                (Some(idx), Some(link)) => log::warn!(
                    "{iface} (ifindex {idx}) no longer runs rocemon's programs (BPF link {link} lost its device: the interface was re-created under the same index); attaching again"
                ),
                (Some(idx), None) => log::warn!(
                    "{iface} was re-created (ifindex {} -> {idx}); attaching again",
                    old.ifindex
                ),
            }
            let hooks: Vec<_> = old.hooks.iter().map(|h| (*h, mode_of(&old, *h))).collect();
            // The links must go with the probe: on a device renamed away they would still
            // run, and a pinned one would be taken for the next device's. Gone before the
            // metrics say so: a scrape that reads "down" finds no program left.
            old.unpin_links();
            drop(old);
            if let Ok(m) = shared.metrics.lock() {
                for (h, mode) in hooks {
                    m.set_detached(iface, h, mode);
                }
                m.set_interface_up(iface, false);
            }
            if wanted.is_none() {
                gone.push(i);
            }
        }
        if wanted.is_none() {
            continue;
        }
        match attach_one(iface, config) {
            Ok(p) => {
                log::info!("{iface} is back: counting again");
                if let Ok(m) = shared.metrics.lock() {
                    show_attached(&m, &p);
                }
                probes[i] = Some(p);
            }
            Err(e) => {
                log::warn!("attach to {iface} after it came back failed (next try at the next poll or link change): {e:#}");
                if let Ok(m) = shared.metrics.lock() {
                    m.attach_failed(iface);
                }
            }
        }
    }
    gone
}
