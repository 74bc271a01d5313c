//! The effective settings in words: `rocemon check-config` and the startup log print them.

use super::memory::possible_cpus;
use super::Config;

impl Config {
    /// The effective settings, one per line (`rocemon check-config`, the startup log).
    pub fn summary(&self) -> String {
        let hooks: Vec<&str> = self.hooks.iter().map(|h| h.name()).collect();
        let mut lines = vec![
            format!("interfaces: {}", self.ifaces.join(", ")),
            format!("hooks: {}", hooks.join(", ")),
            format!("xdp_mode: {:?}", self.xdp_mode).to_lowercase(),
            format!(
                "capture: {}",
                match self.afxdp {
                    Some(a) => format!(
                        "afxdp ({}; batch {}, coalesce {} us, busy poll {})",
                        format!("{:?}", a.mode).to_lowercase(),
                        a.batch,
                        a.coalesce_us,
                        if a.busy_poll_us == 0 {
                            "off".to_string()
                        } else {
                            format!("{} us", a.busy_poll_us)
                        }
                    ),
                    None => "maps".into(),
                }
            ),
            format!("listen: {}", self.listen),
            format!("top_k: {}", self.top_k),
            format!("poll_interval_ms: {}", self.poll_interval.as_millis()),
            format!(
                "flow_idle_timeout_seconds: {}",
                self.flow_idle_timeout.as_secs()
            ),
            format!(
                "flow_map_entries: {} (about {} MiB of kernel memory per interface on this host's {} CPUs)",
                self.flow_maps,
                self.flow_maps.bytes(possible_cpus()).div_ceil(1 << 20),
                possible_cpus()
            ),
            format!("rate_window_seconds: {}", self.rate_window_s),
            format!("pfc_storm_seconds: {}", self.pfc_storm_s),
            format!(
                "elephant: enter at {} B/s{}, leave below {}% of that",
                self.elephant.threshold_bytes_per_second,
                self.elephant
                    .threshold_link_share
                    .map(|s| format!(" or {}% of the link speed", s * 100.0))
                    .unwrap_or_default(),
                self.elephant.exit_ratio * 100.0
            ),
            format!(
                "ecmp: {} group(s){}",
                self.ecmp.groups.len(),
                if self.ecmp.hash.is_some() {
                    ", hash model set"
                } else {
                    ""
                }
            ),
            format!(
                "pins: {}",
                if self.pin {
                    self.pin_dir.display().to_string()
                } else {
                    "off".into()
                }
            ),
            format!(
                "kernel: psn tracking {}, session counters {}, rhythm {} ({} clock), flow cache {}, program stats {}",
                on_off(self.switches.psn_tracking),
                on_off(self.switches.session_counters),
                on_off(self.switches.rhythm),
                if self.switches.coarse_ring_clock {
                    "coarse"
                } else {
                    "fine"
                },
                on_off(self.switches.flow_cache),
                on_off(self.program_stats)
            ),
            crate::config::classes::summary(&self.switches.classes),
            match &self.sflow {
                Some(s) => format!(
                    "sflow: listen {}, receive buffer {} bytes",
                    s.listen, s.receive_buffer_bytes
                ),
                None => "sflow: off".into(),
            },
            match &self.ipfix {
                Some(x) => format!(
                    "ipfix: {} (observation domain {}, enterprise {}, active timeout {} s, templates every {} s on UDP, messages up to {} bytes)",
                    x.destinations
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    x.observation_domain,
                    x.enterprise,
                    x.active_timeout.as_secs(),
                    x.template_refresh.as_secs(),
                    x.max_message_bytes
                ),
                None => "ipfix: off".into(),
            },
        ];
        lines.push(format!(
            "web: tls {}, basic auth {} user(s), request timeout {:?}, header timeout {:?}, max {} connections ({} per client), {} concurrent requests",
            if self.web.tls.is_some() { "on" } else { "off" },
            self.web.users.len(),
            self.web.request_timeout,
            self.web.header_timeout,
            self.web.max_connections,
            self.web.max_connections_per_client,
            self.web.max_concurrent_requests
        ));
        lines.push(
            format!(
                "log: {} ({:?})",
                self.log_level.unwrap_or(log::LevelFilter::Info),
                self.log_format
            )
            .to_lowercase(),
        );
        lines.join("\n")
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
