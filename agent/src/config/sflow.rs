//! `[sflow]` of the configuration: the receiver (listen address, receive buffer), the fabric
//! view's groups, and the collector's bounds and allow-list.

use super::{bad, FileConfig, SflowSection, UsageError};
use std::net::SocketAddr;

/// The sFlow receiver from the flag (over the file); `None` when neither asks for one.
pub(super) fn sflow_settings(
    flag: Option<&str>,
    file: Option<&SflowSection>,
    limits: crate::sflow::collector::Limits,
) -> Result<Option<crate::sflow::receiver::SflowSettings>, UsageError> {
    let Some(text) = flag.or(file.and_then(|f| f.listen.as_deref())) else {
        return Ok(None);
    };
    let listen: SocketAddr = match text.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => match text.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, crate::sflow::SFLOW_PORT),
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
        .unwrap_or(crate::sflow::receiver::DEFAULT_RECEIVE_BUFFER);
    if !(65_536..=1 << 30).contains(&receive_buffer_bytes) {
        return Err(bad(format!(
            "sflow.receive_buffer_bytes {receive_buffer_bytes} is out of range; use 65536 to 1073741824"
        )));
    }
    Ok(Some(crate::sflow::receiver::SflowSettings {
        listen,
        receive_buffer_bytes,
        limits,
    }))
}

/// The collector's bounds and allow-list from `[sflow]` (shared by `run` and `analyze`); the
/// groups' agents and uplinks are protected.
pub fn sflow_limits(
    file: &FileConfig,
    groups: &[crate::sflow::fabric::UplinkGroup],
) -> Result<crate::sflow::collector::Limits, UsageError> {
    use crate::sflow::collector::{Limits, Network};
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
pub fn sflow_groups(
    file: &FileConfig,
) -> Result<Vec<crate::sflow::fabric::UplinkGroup>, UsageError> {
    let groups = file
        .sflow
        .as_ref()
        .and_then(|s| s.groups.clone())
        .unwrap_or_default();
    crate::sflow::fabric::validate(&groups).map_err(bad)?;
    Ok(groups)
}
