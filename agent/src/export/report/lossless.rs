//! The lossless fabric in `rocemon analyze`'s report: PFC and PAUSE frames, RoCE by DSCP and
//! 802.1p priority, lossy RoCE (outside the configured classes).

use crate::detect::findings::thousands;
use agent_common::classes::TrafficClasses;
use agent_common::headers::mac_control::{quanta_seconds, PRIORITIES};
use agent_common::HookCounters;
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Serialize, Debug, Clone)]
pub struct Pfc {
    pub frames: u64,
    /// Every priority, 0 to 7.
    pub priorities: Vec<PfcPriority>,
    /// The link speed the seconds assume (`--link-speed`).
    pub link_speed_bps: u64,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct PfcPriority {
    pub priority: u8,
    pub xoff: u64,
    pub xon: u64,
    pub quanta: u64,
    /// Wall time paused: the union of the pause intervals at the link speed (a refreshed
    /// XOFF extends the pause, an XON ends it). Known where the frames' times are (analyze);
    /// null live.
    pub paused_seconds: Option<f64>,
}

#[derive(Serialize, Debug, Clone)]
pub struct Pause {
    pub frames: u64,
    pub xon: u64,
    pub quanta: u64,
    pub seconds: f64,
    /// MAC control frames of other opcodes.
    pub other_mac_control: u64,
}

/// Packets and bytes of one DSCP or priority.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ClassCount {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcp: Option<u8>,
    pub packets: u64,
    pub bytes: u64,
}

/// RoCE outside its class.
#[derive(Serialize, Debug, Clone)]
pub struct Lossy {
    pub packets: u64,
    pub bytes: u64,
    /// CNPs outside the CNP class.
    pub cnp_out_of_class: u64,
    /// The expectation: RoCE DSCPs, priority ("any" or 0-7), CNP DSCPs.
    pub expected: String,
}

/// The CNPs' own classes.
#[derive(Serialize, Debug, Clone)]
pub struct CnpClasses {
    pub dscp: Vec<ClassCount>,
    pub pcp: Vec<ClassCount>,
}

fn nonzero(packets: &[u64], bytes: &[u64], dscp: bool) -> Vec<ClassCount> {
    packets
        .iter()
        .zip(bytes)
        .enumerate()
        .filter(|(_, (p, _))| **p > 0)
        .map(|(i, (p, b))| ClassCount {
            dscp: dscp.then_some(i as u8),
            pcp: (!dscp).then_some(i as u8),
            packets: *p,
            bytes: *b,
        })
        .collect()
}

pub fn pfc(c: &HookCounters, link_speed_bps: u64) -> Pfc {
    Pfc {
        frames: c.pfc_frames,
        priorities: (0..PRIORITIES)
            .map(|p| PfcPriority {
                priority: p as u8,
                xoff: c.pfc_xoff[p],
                xon: c.pfc_xon[p],
                quanta: c.pfc_quanta[p],
                paused_seconds: None,
            })
            .collect(),
        link_speed_bps,
    }
}

pub fn pause(c: &HookCounters, link_speed_bps: u64) -> Pause {
    Pause {
        frames: c.pause_frames,
        xon: c.pause_xon,
        quanta: c.pause_quanta,
        seconds: quanta_seconds(c.pause_quanta, link_speed_bps),
        other_mac_control: c.mac_control_other,
    }
}

pub fn dscp(c: &HookCounters) -> Vec<ClassCount> {
    nonzero(&c.roce_dscp_packets, &c.roce_dscp_bytes, true)
}

pub fn pcp(c: &HookCounters) -> Vec<ClassCount> {
    nonzero(&c.roce_pcp_packets, &c.roce_pcp_bytes, false)
}

pub fn cnp_classes(c: &HookCounters) -> CnpClasses {
    CnpClasses {
        dscp: nonzero(&c.cnp_dscp_packets, &c.cnp_dscp_bytes, true),
        pcp: nonzero(&c.cnp_pcp_packets, &c.cnp_pcp_bytes, false),
    }
}

pub fn lossy(c: &HookCounters, classes: &TrafficClasses) -> Lossy {
    Lossy {
        packets: c.lossy_roce_packets,
        bytes: c.lossy_roce_bytes,
        cnp_out_of_class: c.cnp_out_of_class,
        expected: crate::config::classes::summary(classes)
            .trim_start_matches("classes: ")
            .to_string(),
    }
}

/// The table's lossless lines (only what the capture has).
/// Counts with thousands separated, as in the rest of the table.
pub fn table(s: &mut String, pfc: &Pfc, pause: &Pause, dscp: &[ClassCount], lossy: &Lossy) {
    if pfc.frames > 0 {
        let prios: Vec<String> = pfc
            .priorities
            .iter()
            .filter(|p| p.xoff + p.xon > 0)
            .map(|p| {
                format!(
                    "p{} xoff {} xon {} ({:.6} s)",
                    p.priority,
                    thousands(p.xoff),
                    thousands(p.xon),
                    quanta_seconds(p.quanta, pfc.link_speed_bps)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "PFC         {:>12}   {}",
            thousands(pfc.frames),
            prios.join("  ")
        );
    }
    if pause.frames + pause.other_mac_control > 0 {
        let _ = writeln!(
            s,
            "PAUSE       {:>12}   xon {}  {:.6} s requested  (other MAC control {})",
            thousands(pause.frames),
            thousands(pause.xon),
            pause.seconds,
            thousands(pause.other_mac_control)
        );
    }
    if !dscp.is_empty() {
        let d: Vec<String> = dscp
            .iter()
            .map(|c| format!("{} {}", c.dscp.unwrap_or(0), thousands(c.packets)))
            .collect();
        let _ = writeln!(s, "DSCP        {}", d.join("  "));
        let _ = writeln!(
            s,
            "Lossy RoCE  {:>12}   outside {}; CNPs out of class {}",
            thousands(lossy.packets),
            lossy.expected,
            thousands(lossy.cnp_out_of_class)
        );
    }
}
