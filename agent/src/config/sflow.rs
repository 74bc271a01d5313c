//! `[sflow]` of the configuration: the receiver (listen address, receive buffer), the fabric
//! view's groups, and the collector's bounds and allow-list.

use super::{bad, FileConfig, SflowSection, UsageError};
use serde::Deserialize;
use std::net::IpAddr;
use std::net::SocketAddr;

/// The IANA port of sFlow.
pub const SFLOW_PORT: u16 = 6343;

/// Flows held at most by default (a fabric has many; see [`Limits`]).
pub const MAX_FLOWS: usize = 65_536;
/// Ports held at most by default: a fabric of 500 switches of 64 ports, both directions
/// (about 130 bytes each with its index; a smaller bound refuses a big fabric's ports one by one, each
/// refusal after a search for an entry to push out).
pub const MAX_PORTS: usize = 65_536;
/// Agents (address, sub-agent) held at most by default: 500 switches with a few sub-agents.
pub const MAX_AGENTS: usize = 2_048;
/// An entry not updated for this long expires: sFlow agents export counters every 20-30 s
/// and flow samples as they come, so four export intervals without a word is a gone port,
/// flow or switch.
pub const DEFAULT_IDLE_TIMEOUT_NS: u64 = 120_000_000_000;
/// How much the collector holds, whom it listens to and whom it protects (`[sflow]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Agent networks whose datagrams are read (empty: any); the others are counted in
    /// `denied_datagrams` and dropped.
    pub allow: Vec<Network>,
    pub max_agents: usize,
    pub max_ports: usize,
    pub max_flows: usize,
    pub idle_timeout_ns: u64,
    /// The configured groups' agents and uplinks: never pushed out, never expired.
    pub protected: Vec<(IpAddr, Vec<u32>)>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            allow: Vec::new(),
            max_agents: MAX_AGENTS,
            max_ports: MAX_PORTS,
            max_flows: MAX_FLOWS,
            idle_timeout_ns: DEFAULT_IDLE_TIMEOUT_NS,
            protected: Vec::new(),
        }
    }
}

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Network {
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Network, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address or network; use e.g. \"10.0.0.0/8\""))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Network { addr, prefix })
    }
}

/// The validated `[sflow]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SflowSettings {
    pub listen: SocketAddr,
    /// The socket's receive buffer (SO_RCVBUF; the kernel doubles it for its bookkeeping).
    pub receive_buffer_bytes: usize,
    /// The collector's bounds, allow-list and protected groups.
    pub limits: Limits,
}

/// Default receive buffer: 32 MiB, about 14,000 datagrams of 1,400 bytes (70 ms at 200,000
/// datagrams per second: what a poll's share of the same core can take away). Kernel memory,
/// used only while datagrams wait.
pub const DEFAULT_RECEIVE_BUFFER: usize = 32 << 20;
/// `[[sflow.groups]]`: one switch's ECMP uplinks.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkGroup {
    pub name: String,
    /// The switch's sFlow agent address.
    pub agent: IpAddr,
    /// The uplinks' ifIndex values.
    pub uplinks: Vec<u32>,
}

impl UplinkGroup {
    /// The member name of an uplink: "AGENT/IFINDEX".
    pub fn member(&self, if_index: u32) -> String {
        format!("{}/{}", self.agent, if_index)
    }
}

/// Checks the groups; the message names the key and the fix.
pub fn validate(groups: &[UplinkGroup]) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    for g in groups {
        if !names.insert(&g.name) {
            return Err(format!(
                "sflow group '{}' is defined twice; give each group one name",
                g.name
            ));
        }
        let distinct: std::collections::BTreeSet<_> = g.uplinks.iter().collect();
        if distinct.len() < 2 {
            return Err(format!(
                "sflow group '{}' needs at least two distinct uplinks (uplinks = [1, 2])",
                g.name
            ));
        }
    }
    Ok(())
}

/// The sFlow receiver from the flag (over the file); `None` when neither asks for one.
pub(super) fn sflow_settings(
    flag: Option<&str>,
    file: Option<&SflowSection>,
    limits: Limits,
) -> Result<Option<SflowSettings>, UsageError> {
    let Some(text) = flag.or(file.and_then(|f| f.listen.as_deref())) else {
        return Ok(None);
    };
    let listen: SocketAddr = match text.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => match text.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, SFLOW_PORT),
            Err(_) => {
                return Err(bad(format!(
                    "sFlow listen address {} is not IP or IP:PORT; use e.g. 0.0.0.0 (port 6343) or [::]:6343",
                    crate::error::quote(text)
                )))
            }
        },
    };
    let receive_buffer_bytes = file
        .and_then(|f| f.receive_buffer_bytes)
        .unwrap_or(DEFAULT_RECEIVE_BUFFER);
    if !(65_536..=1 << 30).contains(&receive_buffer_bytes) {
        return Err(bad(format!(
            "sflow.receive_buffer_bytes {receive_buffer_bytes} is out of range; use 65536 to 1073741824"
        )));
    }
    Ok(Some(SflowSettings {
        listen,
        receive_buffer_bytes,
        limits,
    }))
}

/// The collector's bounds and allow-list from `[sflow]` (shared by `run` and `analyze`); the
/// groups' agents and uplinks are protected.
pub fn sflow_limits(file: &FileConfig, groups: &[UplinkGroup]) -> Result<Limits, UsageError> {
    let mut l = Limits::default();
    let Some(f) = file.sflow.as_ref() else {
        l.protected = groups
            .iter()
            .map(|g| (g.agent, g.uplinks.clone()))
            .collect();
        return Ok(l);
    };
    for text in f.agents.iter().flatten() {
        let n: Network = text
            .parse()
            .map_err(|e| bad(format!("sflow.agents: {e}")))?;
        l.allow.push(n);
    }
    for (key, value, slot) in [
        ("max_agents", f.max_agents, &mut l.max_agents),
        ("max_ports", f.max_ports, &mut l.max_ports),
        ("max_flows", f.max_flows, &mut l.max_flows),
    ] {
        if let Some(v) = value {
            if !(1..=10_000_000).contains(&v) {
                return Err(bad(format!(
                    "sflow.{key} {v} is out of range; use 1 to 10000000"
                )));
            }
            *slot = v;
        }
    }
    if let Some(t) = f.idle_timeout_seconds {
        if !(t.is_finite() && (1.0..=86_400.0).contains(&t)) {
            return Err(bad(format!(
                "sflow.idle_timeout_seconds {t} is out of range; use 1 to 86400 (a few of the switches' export intervals, e.g. 120)"
            )));
        }
        l.idle_timeout_ns = (t * 1e9) as u64;
    }
    for g in groups {
        if !l.allow.is_empty() && !l.allow.iter().any(|n| n.contains(g.agent)) {
            return Err(bad(format!(
                "sflow group '{}' has agent {}, which sflow.agents does not allow; add it (or its network) to sflow.agents",
                g.name, g.agent
            )));
        }
    }
    l.protected = groups
        .iter()
        .map(|g| (g.agent, g.uplinks.clone()))
        .collect();
    Ok(l)
}

/// The `[[sflow.groups]]` of a file (shared by `run` and `analyze`), validated.
pub fn sflow_groups(file: &FileConfig) -> Result<Vec<UplinkGroup>, UsageError> {
    let groups = file
        .sflow
        .as_ref()
        .and_then(|s| s.groups.clone())
        .unwrap_or_default();
    validate(&groups).map_err(bad)?;
    Ok(groups)
}
