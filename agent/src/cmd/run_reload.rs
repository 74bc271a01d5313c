//! A configuration reloaded live (SIGHUP): what applies at once, and what needs a restart.

use crate::config::Config;
use crate::pipeline::flows::FlowTable;

/// Applies a reloaded configuration: detectors, top-K, polling, RDMA and summary settings
/// change at once; what needs reattaching or rebinding (interfaces, hooks, XDP mode, capture
/// mode, map size, pins, listen address, web settings) is kept, with a warning naming it.
pub fn apply_reload(config: &mut Config, new: Config, table: &mut FlowTable) {
    let mut kept = Vec::new();
    if new.ifaces != config.ifaces {
        kept.push("interfaces");
    }
    if new.sflow != config.sflow {
        kept.push("sflow");
    }
    if new.hooks != config.hooks {
        kept.push("hooks");
    }
    if new.xdp_mode != config.xdp_mode {
        kept.push("xdp_mode");
    }
    if new.afxdp != config.afxdp {
        kept.push("capture/afxdp_mode");
    }
    if new.flow_map_entries != config.flow_map_entries {
        kept.push("flow_map_entries");
    }
    if new.pin != config.pin || new.pin_dir != config.pin_dir {
        kept.push("pin/pin_dir");
    }
    if new.listen != config.listen {
        kept.push("listen");
    }
    if new.web != config.web {
        kept.push("web");
    }
    if new.program_stats != config.program_stats {
        kept.push("program_stats");
    }
    if new.switches != config.switches {
        kept.push("psn_tracking/session_counters/rhythm");
    }
    if !kept.is_empty() {
        log::warn!(
            "reload: {} changed but need a restart to apply (systemctl restart rocemon); the rest is applied",
            kept.join(", ")
        );
    }
    config.top_k = new.top_k;
    config.poll_interval = new.poll_interval;
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
    table.tau_s = config.rate_window_s;
    log::info!("configuration reloaded:\n{}", config.summary());
}
