//! Attaching the kernel programs to one interface: the object loaded with its maps pinned
//! (or not), each hook's program attached (XDP native mode with fallback to skb mode) or a
//! pinned link of a previous run taken over, and everything a refused start pinned removed.

use super::loader::{
    load_object_pinned, load_programs, prog, ring_hooks, AttachOptions, Attachment, Loaded,
    EBPF_OBJECT,
};
use crate::config::XdpMode;
use crate::error::UsageError;
use crate::kernel::loader::ifindex;
use crate::kernel::pins::IfacePins;
use crate::sources::afxdp::Capture;
use agent_common::{Hook, MAP_XSKS};
use anyhow::{Context, Result};
use aya::maps::XskMap;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{SchedClassifierLink, TcAttachType};
use aya::programs::xdp::XdpLink;
use aya::programs::{SchedClassifier, Xdp, XdpMode as AyaXdpMode};
use std::path::Path;

/// Loads and attaches the hooks on one interface. With [`Hook::AfXdp`], `afxdp` says how the
/// capture sockets bind; they are open and registered before the program is attached. With a
/// pin root (map-based capture only: sockets cannot outlive the process), links found from a
/// previous run get the new programs atomically, and new links are pinned.
pub fn attach(iface: &str, o: AttachOptions<'_>) -> Result<Attachment> {
    let idx = ifindex(iface)?;
    let pins = if o.pin && o.afxdp.is_none() {
        crate::kernel::pins::ensure_bpffs(o.pin_root)?;
        let fresh = !o.pin_root.join(iface).exists();
        Some((IfacePins::new(o.pin_root, iface, o.flow_maps)?, fresh))
    } else {
        if o.pin_root.join(iface).exists() {
            bail_pinned(o.pin_root, iface)?;
        }
        None
    };
    let maps_reused = pins.as_ref().is_some_and(|(p, _)| p.maps_exist());
    let links_before = pins.as_ref().is_some_and(|(p, _)| p.links_pinned());
    let (pins, fresh) = match pins {
        Some((p, fresh)) => (Some(p), fresh),
        None => (None, false),
    };
    match attach_with(iface, idx, &o, pins, maps_reused) {
        Ok(a) => Ok(a),
        Err((e, pins)) => {
            // A refused start (the interface is taken, a hook fails) leaves nothing behind:
            // what this attempt pinned goes; a previous run's pins stay.
            if let Some(p) = pins {
                p.remove_created(!maps_reused, !links_before, fresh);
            }
            Err(e)
        }
    }
}

/// [`attach`] once the pins are decided; on failure the error and the pins, so that the
/// caller removes what this attempt made.
fn attach_with(
    iface: &str,
    idx: u32,
    o: &AttachOptions<'_>,
    pins: Option<IfacePins>,
    maps_reused: bool,
) -> std::result::Result<Attachment, (anyhow::Error, Option<IfacePins>)> {
    match attach_loaded(iface, o, pins.as_ref()) {
        Ok((ebpf, capture, xdp_mode, pinned)) => {
            let prog_ids: Vec<u32> = o
                .hooks
                .iter()
                .filter_map(|h| Some(ebpf.program(h.program())?.info().ok()?.id()))
                .collect();
            Ok(Attachment {
                iface: iface.to_string(),
                ifindex: idx,
                xdp_mode,
                hooks: o.hooks.to_vec(),
                links: crate::kernel::liveness::links_of(&prog_ids, idx),
                ebpf,
                capture,
                _pinned: pinned,
                pins,
                maps_reused,
                flow_pressure: Default::default(),
                pause_ring: Default::default(),
            })
        }
        Err(e) => Err((e, pins)),
    }
}

/// Loads the object (maps pinned under `pins`), loads the programs and attaches them.
fn attach_loaded(iface: &str, o: &AttachOptions<'_>, pins: Option<&IfacePins>) -> Result<Loaded> {
    let idx = ifindex(iface)?;
    let mut ebpf = load_object_pinned(
        EBPF_OBJECT,
        o.flow_maps,
        pins,
        o.switches,
        ring_hooks(o.hooks, o.switches.rhythm),
    )?;
    load_programs(&mut ebpf, o.hooks)?;
    let mut capture = None;
    if o.hooks.contains(&Hook::AfXdp) {
        let mut xsks: XskMap<_> = XskMap::try_from(
            ebpf.map_mut(MAP_XSKS)
                .with_context(|| format!("{MAP_XSKS} map missing"))?,
        )?;
        capture = Some(Capture::open(
            iface,
            idx,
            o.afxdp.unwrap_or_default(),
            crate::sources::tally::FlowLimits {
                ipv4: o.flow_maps.ipv4 as usize,
                ipv6: o.flow_maps.ipv6 as usize,
            },
            o.switches,
            |q, fd| xsks.set(q, fd, 0).map_err(Into::into),
        )?);
    }
    let mut xdp_mode = None;
    let mut pinned = Vec::new();
    for h in o.hooks {
        let link_pin = pins.map(|p| p.link_path(*h));
        match h {
            Hook::Xdp | Hook::AfXdp => {
                let p = prog::<Xdp>(&mut ebpf, h.program())?;
                if let Some(lp) = &link_pin {
                    let want = match o.xdp_mode {
                        XdpMode::Auto => None,
                        XdpMode::Native => Some("native"),
                        XdpMode::Skb => Some("skb"),
                    };
                    if let Some(mode) = reattach(lp, want, |fd| {
                        p.attach_to_link(XdpLink::try_from(fd)?)?;
                        Ok(())
                    }) {
                        xdp_mode = Some(mode);
                        continue;
                    }
                }
                let (mode, id) = attach_xdp(p, iface, o.xdp_mode)?;
                xdp_mode = Some(mode);
                if let Some(lp) = &link_pin {
                    let fd: FdLink = p.take_link(id)?.try_into().map_err(|_| no_link(iface))?;
                    pinned.push(pin_link(fd, lp, mode)?);
                }
            }
            Hook::TcIngress | Hook::TcEgress => {
                let at = if *h == Hook::TcIngress {
                    TcAttachType::Ingress
                } else {
                    TcAttachType::Egress
                };
                let p = prog::<SchedClassifier>(&mut ebpf, h.program())?;
                if let Some(lp) = &link_pin {
                    if reattach(lp, None, |fd| {
                        p.attach_to_link(SchedClassifierLink::try_from(fd)?)?;
                        Ok(())
                    })
                    .is_some()
                    {
                        continue;
                    }
                }
                let id = p
                    .attach(iface, at)
                    .with_context(|| format!("attach {} to {iface}", h.name()))?;
                if let Some(lp) = &link_pin {
                    let fd: FdLink = p.take_link(id)?.try_into().map_err(|_| no_link(iface))?;
                    pinned.push(pin_link(fd, lp, "tcx")?);
                }
            }
        }
    }
    if let Some(p) = pins {
        p.prune(o.hooks)?;
    }
    Ok((ebpf, capture, xdp_mode, pinned))
}

fn bail_pinned(root: &Path, iface: &str) -> Result<()> {
    if let Some(pid) = crate::kernel::pins::PinLock::held(root) {
        let who = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        return Err(UsageError::BadConfig(format!(
            "a running rocemon{who} is attached to '{iface}' (pins under {}); stop it first",
            root.display()
        ))
        .into());
    }
    Err(UsageError::BadConfig(format!(
        "programs of a previous run are still attached to '{iface}' (pinned under {}); run `rocemon detach --iface {iface}` first",
        root.join(iface).display()
    ))
    .into())
}

fn no_link(iface: &str) -> anyhow::Error {
    UsageError::BadConfig(format!(
        "the kernel attached to '{iface}' without a BPF link, which cannot be pinned (XDP links need Linux 5.9, TCX 6.6); run with --no-pin"
    ))
    .into()
}

/// Pins a new link as `<path>@<mode>` (the mode is kept in the name, so a later run reports it).
fn pin_link(fd: FdLink, path: &Path, mode: &str) -> Result<PinnedLink> {
    let p = path.with_file_name(format!(
        "{}@{mode}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("link")
    ));
    fd.pin(&p)
        .with_context(|| format!("pin the link at {}", p.display()))
}

/// Swaps the new program into a link pinned by a previous run. Returns the link's mode, or
/// None when there is no such link or it is stale (its interface went away): then the pin
/// is removed and the caller attaches afresh.
fn reattach(
    path: &Path,
    want_mode: Option<&str>,
    swap: impl FnOnce(FdLink) -> Result<()>,
) -> Option<&'static str> {
    let dir = path.parent()?;
    let stem = path.file_name()?.to_str()?;
    let found = std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let mode = name.strip_prefix(stem)?.strip_prefix('@')?.to_string();
        Some((e.path(), mode))
    })?;
    let (pin, mode) = found;
    if let Some(want) = want_mode.filter(|w| *w != mode) {
        // The link's mode cannot change: a new link in the wanted mode replaces it. The maps
        // stay, so counts continue; packets in the moment between the two are not counted.
        log::warn!(
            "XDP mode changes from {mode} to {want}: replacing the pinned link (counts continue; a few packets may pass uncounted)"
        );
        crate::kernel::pin_object::detach_link(&pin);
        let _ = std::fs::remove_file(&pin);
        return None;
    }
    let swapped = PinnedLink::from_pin(&pin)
        .map_err(anyhow::Error::from)
        .and_then(|l| swap(FdLink::from(l)));
    match swapped {
        Ok(()) => {
            log::info!(
                "took over the link pinned at {} (no packet missed)",
                pin.display()
            );
            Some(match mode.as_str() {
                "native" => "native",
                "skb" => "skb",
                _ => "tcx",
            })
        }
        Err(e) => {
            log::warn!(
                "pinned link {} is stale ({e:#}); attaching afresh",
                pin.display()
            );
            let _ = std::fs::remove_file(&pin);
            None
        }
    }
}

fn attach_xdp(
    p: &mut Xdp,
    iface: &str,
    mode: XdpMode,
) -> Result<(&'static str, aya::programs::xdp::XdpLinkId)> {
    match mode {
        XdpMode::Skb => match p_attach(p, iface, AyaXdpMode::Skb) {
            Ok(id) => Ok(("skb", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => Err(anyhow::anyhow!(e).context(format!("attach XDP (skb mode) to {iface}"))),
        },
        XdpMode::Native => match p_attach(p, iface, AyaXdpMode::Driver) {
            Ok(id) => Ok(("native", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => Err(UsageError::XdpModeUnsupported {
                iface: iface.into(),
                mode: "native",
                reason: e,
            }
            .into()),
        },
        XdpMode::Auto => match p_attach(p, iface, AyaXdpMode::Driver) {
            Ok(id) => Ok(("native", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => {
                log::warn!("XDP native mode failed on {iface} ({e}); falling back to skb mode");
                let id = p
                    .attach(iface, AyaXdpMode::Skb)
                    .with_context(|| format!("attach XDP (skb mode) to {iface}"))?;
                Ok(("skb", id))
            }
        },
    }
}

/// Whether an attach failed because the interface already has an XDP program: EBUSY from
/// `bpf_link_create` (an XDP link is there), EEXIST from netlink (a program is there).
fn taken(e: &str) -> bool {
    e.contains("os error 16") || e.contains("os error 17")
}

fn xdp_taken(iface: &str) -> anyhow::Error {
    UsageError::BadConfig(format!(
        "'{iface}' already has an XDP program attached (another rocemon, or another tool: see `ip link show {iface}`); stop or detach it first"
    ))
    .into()
}

fn p_attach(
    p: &mut Xdp,
    iface: &str,
    mode: AyaXdpMode,
) -> Result<aya::programs::xdp::XdpLinkId, String> {
    p.attach(iface, mode).map_err(|e| {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(c) = src {
            s.push_str(": ");
            s.push_str(&c.to_string());
            src = c.source();
        }
        s
    })
}
