//! `[ipfix]` of the configuration and the `--ipfix` flags: flow records for flow collectors.
//!
//! ```toml
//! [ipfix]
//! collectors = ["udp://192.0.2.10:4739", "tcp://flows.example.net:4739"]
//! observation_domain_id = 42       # default: from /etc/machine-id (each host its own)
//! enterprise_number = 32473        # Private Enterprise Number of the RoCE elements
//! active_timeout_seconds = 60      # a record of a flow that goes on, this often
//! template_refresh_seconds = 60    # templates again on UDP
//! max_message_bytes = 1400         # one IPFIX message (a UDP datagram) at most
//! queue_records = 262144           # records waiting for the exporter at most
//! ```

/// Seconds between two records of a flow that goes on (the convention of flow exporters).
pub const DEFAULT_ACTIVE_TIMEOUT_S: u64 = 60;

use super::{bad, UsageError};
use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// IPFIX's registered port (UDP and TCP).
pub const IPFIX_PORT: u16 = 4739;
/// RFC 5612's Private Enterprise Number for documentation: the RoCE elements' default until
/// an operator sets the number their collectors know.
pub const DEFAULT_ENTERPRISE: u32 = 32473;
/// Seconds between template refreshes on UDP.
pub const DEFAULT_TEMPLATE_REFRESH_S: u64 = 60;
/// Fits an Ethernet MTU of 1500 with IPv6 and UDP headers, and some tunnel overhead.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1400;
/// Records waiting for the exporter thread at most (about 200 bytes each).
pub const DEFAULT_QUEUE_RECORDS: usize = 262_144;
/// The smallest message size: it holds the templates and an IPv6 record (585 bytes).
pub const MIN_MESSAGE_BYTES: usize = 640;

/// Where records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Udp(SocketAddr),
    Tcp(SocketAddr),
    File(PathBuf),
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Udp(a) => write!(f, "udp://{a}"),
            Destination::Tcp(a) => write!(f, "tcp://{a}"),
            Destination::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// The exporter's settings (validated: `config::ipfix`).
#[derive(Clone, Debug, PartialEq)]
pub struct IpfixSettings {
    pub destinations: Vec<Destination>,
    pub observation_domain: u32,
    pub enterprise: u32,
    pub active_timeout: Duration,
    pub template_refresh: Duration,
    pub max_message_bytes: usize,
    pub queue_records: usize,
}

/// `[ipfix]`, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpfixSection {
    pub collectors: Option<Vec<String>>,
    pub observation_domain_id: Option<u32>,
    pub enterprise_number: Option<u32>,
    pub active_timeout_seconds: Option<u64>,
    pub template_refresh_seconds: Option<u64>,
    pub max_message_bytes: Option<usize>,
    pub queue_records: Option<usize>,
}

/// A collector as written: `udp://HOST:PORT`, `tcp://HOST:PORT`, or `HOST[:PORT]` (UDP; port
/// 4739 when left out). Names are resolved now: a name that does not resolve is a mistake to
/// see at start, not a silence later.
pub fn destination(text: &str) -> Result<Destination, UsageError> {
    let (tcp, rest) = if let Some(r) = text.strip_prefix("tcp://") {
        (true, r)
    } else if let Some(r) = text.strip_prefix("udp://") {
        (false, r)
    } else if text.contains("://") {
        return Err(bad(format!(
            "IPFIX collector {} has a scheme rocemon does not speak; use udp://HOST:PORT or tcp://HOST:PORT",
            crate::error::quote(text)
        )));
    } else {
        (false, text)
    };
    let addr = resolve(rest).ok_or_else(|| {
        bad(format!(
            "IPFIX collector {} is not HOST:PORT or does not resolve; use e.g. udp://192.0.2.10:4739, tcp://[2001:db8::10]:4739 or collector.example.net:4739",
            crate::error::quote(text)
        ))
    })?;
    Ok(if tcp {
        Destination::Tcp(addr)
    } else {
        Destination::Udp(addr)
    })
}

fn resolve(text: &str) -> Option<SocketAddr> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Some(a);
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, IPFIX_PORT));
    }
    let with_port = if text
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        text.to_string()
    } else {
        format!("{text}:{}", IPFIX_PORT)
    };
    with_port.to_socket_addrs().ok()?.next()
}

/// The observation domain when none is configured: from the host's machine id (each agent
/// its own, the same across restarts), else from its host name.
fn default_domain() -> u32 {
    let id = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default();
    // FNV-1a: stable across builds and versions (std's hasher is not).
    let mut h: u32 = 0x811c_9dc5;
    for b in id.trim().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The exporter's settings: destinations from `flags` (over the file's `collectors`) plus
/// `file` (`analyze --ipfix-file`); `None` when there is nowhere to send.
pub fn ipfix_settings(
    flags: &[String],
    file_out: Option<PathBuf>,
    section: Option<&IpfixSection>,
    active_timeout_flag: Option<u64>,
) -> Result<Option<IpfixSettings>, UsageError> {
    let s = section.cloned().unwrap_or_default();
    let written: Vec<String> = if flags.is_empty() {
        s.collectors.clone().unwrap_or_default()
    } else {
        flags.to_vec()
    };
    let mut destinations = Vec::new();
    for t in &written {
        let d = destination(t)?;
        if destinations.contains(&d) {
            return Err(bad(format!(
                "IPFIX collector {d} is given twice; list each collector once"
            )));
        }
        destinations.push(d);
    }
    destinations.extend(file_out.map(Destination::File));
    let (active, name) = match (active_timeout_flag, s.active_timeout_seconds) {
        (Some(v), _) => (v, "--ipfix-active-timeout-seconds"),
        (None, Some(v)) => (v, "ipfix.active_timeout_seconds"),
        (None, None) => (DEFAULT_ACTIVE_TIMEOUT_S, ""),
    };
    if !(1..=86_400).contains(&active) {
        return Err(bad(format!(
            "{name} {active} is out of range; use 1 to 86400 (flow exporters use 60 by convention)"
        )));
    }
    let refresh = s
        .template_refresh_seconds
        .unwrap_or(DEFAULT_TEMPLATE_REFRESH_S);
    if !(1..=86_400).contains(&refresh) {
        return Err(bad(format!(
            "ipfix.template_refresh_seconds {refresh} is out of range; use 1 to 86400 (e.g. 60)"
        )));
    }
    let max = s.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
    if !(MIN_MESSAGE_BYTES..=65_535).contains(&max) {
        return Err(bad(format!(
            "ipfix.max_message_bytes {max} is out of range; use {} to 65535 (below the path MTU for UDP, e.g. 1400)",
            MIN_MESSAGE_BYTES
        )));
    }
    let queue = s.queue_records.unwrap_or(DEFAULT_QUEUE_RECORDS);
    if !(1_000..=100_000_000).contains(&queue) {
        return Err(bad(format!(
            "ipfix.queue_records {queue} is out of range; use 1000 to 100000000"
        )));
    }
    if destinations.is_empty() {
        if active_timeout_flag.is_some() {
            return Err(bad(
                "--ipfix-active-timeout-seconds is set but there is no IPFIX collector; add --ipfix HOST:PORT (or [ipfix] collectors)".into(),
            ));
        }
        return Ok(None);
    }
    Ok(Some(IpfixSettings {
        destinations,
        observation_domain: s.observation_domain_id.unwrap_or_else(default_domain),
        enterprise: s.enterprise_number.unwrap_or(DEFAULT_ENTERPRISE),
        active_timeout: Duration::from_secs(active),
        template_refresh: Duration::from_secs(refresh),
        max_message_bytes: max,
        queue_records: queue,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> IpfixSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_plain_address_is_udp_and_a_bare_ip_takes_port_4739() {
        assert_eq!(
            destination("127.0.0.1:2055").unwrap(),
            Destination::Udp("127.0.0.1:2055".parse().unwrap())
        );
        assert_eq!(
            destination("::1").unwrap(),
            Destination::Udp("[::1]:4739".parse().unwrap())
        );
        assert_eq!(
            destination("tcp://[::1]:9995").unwrap(),
            Destination::Tcp("[::1]:9995".parse().unwrap())
        );
        assert_eq!(
            destination("localhost").unwrap(),
            Destination::Udp("127.0.0.1:4739".parse().unwrap())
        );
    }

    #[test]
    fn an_unknown_scheme_names_the_ones_that_work() {
        let e = destination("sctp://127.0.0.1:4739")
            .unwrap_err()
            .to_string();
        assert!(e.contains("udp://HOST:PORT or tcp://HOST:PORT"), "{e}");
    }

    #[test]
    fn a_collector_that_is_no_address_says_how_to_write_one() {
        let e = destination("udp://127.0.0.1:99999")
            .unwrap_err()
            .to_string();
        assert!(e.contains("e.g. udp://192.0.2.10:4739"), "{e}");
    }

    #[test]
    fn nothing_to_send_to_is_no_exporter() {
        assert_eq!(ipfix_settings(&[], None, None, None).unwrap(), None);
    }

    #[test]
    fn flags_replace_the_files_collectors() {
        let s = section("collectors = [\"127.0.0.1:1\"]\nobservation_domain_id = 5");
        let got = ipfix_settings(&["tcp://127.0.0.1:2".into()], None, Some(&s), Some(30))
            .unwrap()
            .unwrap();
        assert_eq!(
            got.destinations,
            vec![Destination::Tcp("127.0.0.1:2".parse().unwrap())]
        );
        assert_eq!(got.observation_domain, 5);
        assert_eq!(got.active_timeout, Duration::from_secs(30));
        assert_eq!(got.enterprise, DEFAULT_ENTERPRISE);
    }

    #[test]
    fn a_collector_given_twice_is_refused() {
        let e = ipfix_settings(
            &["127.0.0.1:1".into(), "udp://127.0.0.1:1".into()],
            None,
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_their_key_and_range() {
        for (text, want) in [
            (
                "active_timeout_seconds = 0",
                "ipfix.active_timeout_seconds 0 is out of range",
            ),
            (
                "template_refresh_seconds = 0",
                "ipfix.template_refresh_seconds 0",
            ),
            ("max_message_bytes = 100", "use 640 to 65535"),
            ("queue_records = 1", "ipfix.queue_records 1"),
        ] {
            let s = section(&format!("collectors = [\"127.0.0.1:1\"]\n{text}"));
            let e = ipfix_settings(&[], None, Some(&s), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn an_active_timeout_without_a_collector_says_what_is_missing() {
        let e = ipfix_settings(&[], None, None, Some(30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("add --ipfix HOST:PORT"), "{e}");
    }

    #[test]
    fn the_default_domain_is_stable() {
        assert_eq!(default_domain(), default_domain());
    }
}
