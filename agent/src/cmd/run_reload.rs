//! A configuration reloaded live (SIGHUP): what applies at once, and what needs a restart.

use crate::config::Config;
use crate::pipeline::stages::Pipeline;

/// Applies a reloaded configuration: detectors, top-K, polling, the flow idle timeout, RDMA
/// and summary settings change at once; what needs reattaching or rebinding (interfaces, hooks, XDP mode, capture
/// mode, map size, pins, listen address, web settings, IPFIX export) is kept, with a warning naming it.
pub fn apply_reload(config: &mut Config, new: Config, pipeline: &mut Pipeline) {
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
    pipeline.set(config.pipeline());
    log::info!("configuration reloaded:\n{}", config.summary());
}
