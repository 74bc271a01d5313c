//! A configuration reloaded live (SIGHUP): what applies at once, and what needs a restart.

use crate::config::Config;
use crate::pipeline::stages::Pipeline;

/// Applies a reloaded configuration: detectors, top-K, polling, the flow idle timeout, RDMA
/// and summary settings change at once; what needs reattaching or rebinding (interfaces, hooks, XDP mode, capture
/// mode, map size, pins, listen address, web settings, IPFIX export) is kept, with a warning naming it.
pub fn apply_reload(config: &mut Config, new: Config, pipeline: &mut Pipeline) {
    let before = config.summary();
    let restart_only = [
        (new.ifaces != config.ifaces, "interfaces"),
        (new.sflow != config.sflow, "sflow"),
        (new.ipfix != config.ipfix, "ipfix"),
        (new.hooks != config.hooks, "hooks"),
        (new.xdp_mode != config.xdp_mode, "xdp_mode"),
        (new.afxdp != config.afxdp, "capture/afxdp_mode"),
        (new.flow_maps != config.flow_maps, "flow_map_entries"),
        (
            new.pin != config.pin || new.pin_dir != config.pin_dir,
            "pin/pin_dir",
        ),
        (new.listen != config.listen, "listen"),
        (new.web != config.web, "web"),
        (new.program_stats != config.program_stats, "program_stats"),
        (
            new.switches != config.switches,
            "psn_tracking/session_counters/rhythm/flow_cache",
        ),
    ];
    let kept: Vec<&str> = restart_only
        .iter()
        .filter_map(|&(changed, name)| changed.then_some(name))
        .collect();
    if !kept.is_empty() {
        log::warn!(
            "reload: {} changed but need a restart to apply (systemctl restart rocemon); the rest is applied",
            kept.join(", ")
        );
    }
    config.top_k = new.top_k;
    config.poll_interval = new.poll_interval;
    config.flow_idle_timeout = new.flow_idle_timeout;
    config.summary_every = new.summary_every;
    config.rate_window_s = new.rate_window_s;
    config.elephant = new.elephant;
    config.ecmp = new.ecmp;
    config.rdma = new.rdma;
    config.sysfs_root = new.sysfs_root;
    config.log_level = new.log_level;
    if let Some(l) = config.log_level {
        log::set_max_level(l);
    }
    pipeline.set(crate::pipeline::stages::Settings::live(config));
    log::info!(
        "configuration reloaded: {}",
        changes(&before, &config.summary())
    );
}

/// What changed between two configuration summaries (`key: value` lines), on one line: a
/// reload (or a storm of them) logs a line each, not the whole configuration.
fn changes(before: &str, after: &str) -> String {
    let old: std::collections::BTreeMap<&str, &str> =
        before.lines().filter_map(|l| l.split_once(": ")).collect();
    let changed: Vec<String> = after
        .lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, v)| old.get(k) != Some(v))
        .map(|(k, v)| format!("{k} {} -> {v}", old.get(k).copied().unwrap_or("unset")))
        .collect();
    if changed.is_empty() {
        "nothing changed".into()
    } else {
        changed.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::changes;

    #[test]
    fn a_reload_says_what_changed_on_one_line() {
        let before = "interfaces: eth0\ntop_k: 10\npoll_interval_ms: 1000";
        let after = "interfaces: eth0\ntop_k: 2\npoll_interval_ms: 250";
        assert_eq!(
            changes(before, after),
            "top_k 10 -> 2; poll_interval_ms 1000 -> 250"
        );
        assert_eq!(changes(before, before), "nothing changed");
    }
}
