//! One validated configuration: the TOML file (if any), then command-line flags over it.
//! Every rule lives here, and every message names the key and the fix.

pub use crate::config::cli::CaptureArg;

/// Where pins go unless configured otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/rocemon";
use crate::config::cli::{RunArgs, XdpModeArg};
use crate::config::ecmp::EcmpConfig;
use crate::config::elephant::ElephantConfig;
pub use crate::config::logging::LogFormat;
pub use crate::config::web::{WebSection, WebSettings};
use crate::error::UsageError;
pub use afxdp::{AfxdpOptions, BindMode};
use agent_common::Hook;
pub use rdma::RdmaConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub mod afxdp;
pub mod analyze;
pub mod classes;
pub mod cli;
pub mod ecmp;
pub mod elephant;
pub mod ipfix;
pub mod logging;
mod memory;
pub mod rdma;
pub mod sflow;
pub mod switches;
use sflow::sflow_settings;
pub use sflow::{sflow_groups, sflow_limits};
mod summary;
pub mod thresholds;
pub mod units;
pub use thresholds::{pfc_storm_seconds, DEFAULT_PFC_STORM_S};
pub mod web;

use memory::host_memory_bytes;
pub use memory::{possible_cpus, FlowMapSizes};

/// The configuration file, as written (all keys optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub interfaces: Option<Vec<String>>,
    pub hooks: Option<Vec<String>>,
    pub xdp_mode: Option<XdpModeArg>,
    pub listen: Option<String>,
    pub top_k: Option<usize>,
    pub poll_interval_ms: Option<u64>,
    /// Seconds without a packet after which a flow leaves the flow maps.
    pub flow_idle_timeout_seconds: Option<u64>,
    pub flow_map_entries: Option<u32>,
    /// The IPv4 flow map alone (default: `flow_map_entries`).
    pub flow_map_entries_ipv4: Option<u32>,
    /// The IPv6 flow map alone (default: `flow_map_entries`).
    pub flow_map_entries_ipv6: Option<u32>,
    pub summary_every: Option<u64>,
    /// Time constant of the smoothed flow rates.
    pub rate_window_seconds: Option<f64>,
    /// A priority paused without a break for longer than this is a PFC storm.
    pub pfc_storm_seconds: Option<f64>,
    pub elephant: Option<ElephantConfig>,
    pub ecmp: Option<EcmpConfig>,
    /// The traffic classes RoCE and CNPs are expected in (lossy RoCE).
    pub classes: Option<crate::config::classes::ClassesSection>,
    /// The sFlow collector (switches' view).
    pub sflow: Option<SflowSection>,
    /// Flow records for flow collectors.
    pub ipfix: Option<ipfix::IpfixSection>,
    pub sysfs_root: Option<std::path::PathBuf>,
    /// "maps" (count in the kernel) or "afxdp" (redirect RoCE to AF_XDP sockets).
    pub capture: Option<CaptureArg>,
    pub afxdp_mode: Option<BindMode>,
    /// AF_XDP receive tuning (see `AfxdpOptions`): descriptors per pass, the pause that lets
    /// frames gather, busy polling.
    pub afxdp_batch: Option<u32>,
    pub afxdp_coalesce_us: Option<u32>,
    pub afxdp_busy_poll_us: Option<u32>,
    /// RC connections from the kernel's RDMA resource view (hardware RoCE hosts).
    pub rdma: Option<RdmaConfig>,
    /// Pin maps and links so counting goes on across restarts (default true).
    pub pin: Option<bool>,
    /// Turn on the kernel's BPF run-time statistics (per-program run time and count).
    pub program_stats: Option<bool>,
    /// Track PSN gaps and retransmissions per flow in the kernel programs (default true).
    pub psn_tracking: Option<bool>,
    /// Count per mirror session / tunnel id in the kernel programs (default true).
    pub session_counters: Option<bool>,
    /// Keep RoCE bytes per millisecond in the kernel for the training rhythm (default true).
    pub rhythm: Option<bool>,
    /// The kernel's per-CPU flow cache in front of the flow maps (default true).
    pub flow_cache: Option<bool>,
    /// The bpffs directory for the pins (default /sys/fs/bpf/rocemon).
    pub pin_dir: Option<std::path::PathBuf>,
    /// TLS, basic auth (a web configuration file), request timeout, connection bounds.
    pub web: Option<WebSection>,
    /// error, warn, info (default), debug, trace.
    pub log_level: Option<String>,
    /// auto (journal under systemd, else text), text, journal, json.
    pub log_format: Option<LogFormat>,
}

/// `[sflow]`: where the collector listens and how much the kernel may buffer for it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SflowSection {
    /// IP or IP:PORT (port 6343 by default).
    pub listen: Option<String>,
    pub receive_buffer_bytes: Option<usize>,
    /// ECMP groups of switch uplinks (the fabric view).
    pub groups: Option<Vec<sflow::UplinkGroup>>,
    /// Agent networks whose datagrams are read (default: any), e.g. ["10.0.0.0/8"].
    pub agents: Option<Vec<String>>,
    /// Table bounds (agents, switch ports, flows) and how long an idle entry is kept.
    pub max_agents: Option<usize>,
    pub max_ports: Option<usize>,
    pub max_flows: Option<usize>,
    pub idle_timeout_seconds: Option<f64>,
}

/// How to attach XDP.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Native (driver) mode, falling back to skb mode with a warning.
    Auto,
    Native,
    Skb,
}

/// The validated configuration of `rocemon run`.
#[derive(Clone, Debug)]
pub struct Config {
    pub ifaces: Vec<String>,
    pub hooks: Vec<Hook>,
    pub xdp_mode: XdpMode,
    pub listen: SocketAddr,
    pub top_k: usize,
    pub poll_interval: Duration,
    /// A flow with no packet for this long is deleted from the flow maps (the kernel's and the
    /// AF_XDP tally's): a full map refuses new flows, so this is what makes room.
    pub flow_idle_timeout: Duration,
    pub flow_maps: FlowMapSizes,
    pub summary_every: Option<Duration>,
    pub rate_window_s: f64,
    pub elephant: ElephantConfig,
    /// A priority paused without a break for longer than this is a PFC storm (seconds).
    pub pfc_storm_s: f64,
    pub ecmp: EcmpConfig,
    /// Root of the sysfs tree (RDMA NIC counters, link speeds).
    pub sysfs_root: std::path::PathBuf,
    /// `Some` in AF_XDP capture mode (then `hooks` holds [`Hook::AfXdp`]).
    pub afxdp: Option<AfxdpOptions>,
    pub rdma: RdmaConfig,
    /// Where maps and links are pinned (and where `--no-pin` looks for a previous run's pins).
    pub pin_dir: std::path::PathBuf,
    /// Pin maps and links; false: nothing outlives the process.
    pub pin: bool,
    /// Turn on the kernel's BPF run-time statistics while the agent runs.
    pub program_stats: bool,
    /// The kernel programs' load-time switches (PSN tracking, session counters).
    pub switches: switches::Switches,
    /// The sFlow receiver, when configured.
    pub sflow: Option<sflow::SflowSettings>,
    /// ECMP groups of switch uplinks, for the sFlow fabric view.
    pub sflow_groups: Vec<sflow::UplinkGroup>,
    /// The IPFIX exporter, when a collector is configured.
    pub ipfix: Option<ipfix::IpfixSettings>,
    pub web: WebSettings,
    /// `None`: info, or what RUST_LOG says.
    pub log_level: Option<log::LevelFilter>,
    pub log_format: LogFormat,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9442";
pub const DEFAULT_TOP_K: usize = 20;
/// Seconds without a packet before a flow leaves the flow maps: longer than the pauses of a
/// training job between steps (seconds), short enough that a host's churn of QPs does not fill
/// the maps.
pub const DEFAULT_FLOW_IDLE_TIMEOUT_S: u64 = 60;

fn bad(msg: String) -> UsageError {
    UsageError::BadConfig(msg)
}

/// A setting that a flag or a file key gives (the flag over the key): its value, and the name
/// an error about it must use: the flag's if the value came from the command line, else the
/// key's (`None`: neither gave one).
fn setting<T>(
    flag: Option<T>,
    flag_name: &'static str,
    file: Option<T>,
    key: &'static str,
) -> Option<(T, &'static str)> {
    match (flag, file) {
        (Some(v), _) => Some((v, flag_name)),
        (None, Some(v)) => Some((v, key)),
        (None, None) => None,
    }
}

/// Parses a hook name as written on the command line or in the file.
pub fn parse_hook(s: &str) -> Result<Hook, UsageError> {
    match s.trim() {
        "xdp" => Ok(Hook::Xdp),
        "tc-ingress" | "tc_ingress" => Ok(Hook::TcIngress),
        "tc-egress" | "tc_egress" => Ok(Hook::TcEgress),
        other => Err(bad(format!(
            "unknown hook '{other}' in hooks; use xdp, tc-ingress and/or tc-egress"
        ))),
    }
}

impl Config {
    /// Reads the file named by `--config` (if any) and applies the flags over it.
    pub fn from_args(args: &RunArgs) -> Result<Config, UsageError> {
        let file = match &args.config {
            Some(p) => load_file(p)?,
            None => FileConfig::default(),
        };
        Config::merge(file, args)
    }

    /// Flags override the file; then every value is checked.
    pub fn merge(file: FileConfig, args: &RunArgs) -> Result<Config, UsageError> {
        let (rate_window_s, mut elephant, ecmp) = detectors(&file)?;
        let classes = classes(&file)?;
        let sflow_groups = sflow_groups(&file)?;
        let sflow = sflow_settings(
            args.sflow_listen.as_deref(),
            file.sflow.as_ref(),
            sflow_limits(&file, &sflow_groups)?,
        )?;
        let ipfix = ipfix::ipfix_settings(
            &args.ipfix,
            None,
            file.ipfix.as_ref(),
            args.ipfix_active_timeout_seconds,
        )?;
        let ifaces = if args.ifaces.is_empty() {
            file.interfaces.unwrap_or_default()
        } else {
            args.ifaces.clone()
        };
        if ifaces.is_empty() && sflow.is_none() {
            return Err(bad(
                "no interface to watch; pass --iface IF (or set interfaces = [\"IF\"] in the config file), or --sflow-listen ADDR to collect sFlow only".into(),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(ifaces.len());
        for name in &ifaces {
            // The kernel's rule (dev_valid_name), and no control characters.
            if name.is_empty()
                || name.len() > 15
                || name == "."
                || name == ".."
                || name.contains(['/', ':'])
                || name.contains(char::is_whitespace)
                || name.contains(char::is_control)
            {
                return Err(bad(format!(
                    "interface name {} is not valid (1-15 characters, no '/', ':', spaces or control characters)",
                    crate::error::quote(name)
                )));
            }
            if !seen.insert(name.as_str()) {
                return Err(bad(format!(
                    "interface '{name}' is given twice; list each interface once"
                )));
            }
        }
        let capture = args.capture.or(file.capture).unwrap_or(CaptureArg::Maps);
        let afxdp_mode = args.afxdp_mode.or(file.afxdp_mode);
        let hook_names = args.hooks.clone().or(file.hooks).unwrap_or_else(|| {
            if capture == CaptureArg::Afxdp {
                Vec::new()
            } else {
                vec!["xdp".into(), "tc-egress".into()]
            }
        });
        let mut hooks = Vec::new();
        if capture == CaptureArg::Afxdp {
            hooks.push(Hook::AfXdp);
        } else if afxdp_mode.is_some() {
            return Err(bad(
                "afxdp_mode is set but capture is not afxdp; add --capture afxdp (capture = \"afxdp\") or drop the AF_XDP mode".into(),
            ));
        }
        let afxdp = afxdp_options(
            capture,
            afxdp_mode,
            [
                file.afxdp_batch,
                file.afxdp_coalesce_us,
                file.afxdp_busy_poll_us,
            ],
        )?;
        for h in &hook_names {
            let h = parse_hook(h)?;
            if h == Hook::Xdp && capture == CaptureArg::Afxdp {
                return Err(bad(
                    "hooks has xdp, but AF_XDP capture attaches its own XDP program; drop xdp from hooks (tc-ingress and tc-egress may stay) or use --capture maps".into(),
                ));
            }
            if !hooks.contains(&h) {
                hooks.push(h);
            }
        }
        if hooks.is_empty() {
            return Err(bad(
                "hooks is empty; use xdp, tc-ingress and/or tc-egress".into()
            ));
        }
        let xdp_mode = match args.xdp_mode.or(file.xdp_mode).unwrap_or(XdpModeArg::Auto) {
            XdpModeArg::Auto => XdpMode::Auto,
            XdpModeArg::Native => XdpMode::Native,
            XdpModeArg::Skb => XdpMode::Skb,
        };
        let listen_s = args
            .listen
            .clone()
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = listen_s.parse().map_err(|_| {
            bad(format!(
                "listen address '{listen_s}' is not IP:PORT; use e.g. 127.0.0.1:9442 or [::]:9442"
            ))
        })?;
        let (top_k, name) =
            setting(args.top_k, "--top-k", file.top_k, "top_k").unwrap_or((DEFAULT_TOP_K, "top_k"));
        if top_k == 0 || top_k > 10_000 {
            return Err(bad(format!(
                "{name} {top_k} is out of range; use 1 to 10000"
            )));
        }
        let (poll_ms, name) = setting(
            args.poll_interval_ms,
            "--poll-interval-ms",
            file.poll_interval_ms,
            "poll_interval_ms",
        )
        .unwrap_or((1000, "poll_interval_ms"));
        if !(10..=60_000).contains(&poll_ms) {
            return Err(bad(format!(
                "{name} {poll_ms} is out of range; use 10 to 60000"
            )));
        }
        let (idle_s, name) = setting(
            args.flow_idle_timeout_seconds,
            "--flow-idle-timeout-seconds",
            file.flow_idle_timeout_seconds,
            "flow_idle_timeout_seconds",
        )
        .unwrap_or((DEFAULT_FLOW_IDLE_TIMEOUT_S, "flow_idle_timeout_seconds"));
        // Two polls at least: the flow cache holds a flow for up to two polls after its last
        // packet, and a flow must be read once after it went quiet.
        let min_idle_s = (2 * poll_ms).div_ceil(1000).max(1);
        if !(min_idle_s..=86_400).contains(&idle_s) {
            return Err(bad(format!(
                "{name} {idle_s} is out of range; use {min_idle_s} (two polls) to 86400"
            )));
        }
        let flow_maps = flow_map_sizes(
            args,
            [
                file.flow_map_entries,
                file.flow_map_entries_ipv4,
                file.flow_map_entries_ipv6,
            ],
        )?;
        let need = flow_maps.bytes(possible_cpus()) * ifaces.len() as u64;
        if let Some(total) = host_memory_bytes() {
            if need > total / 2 {
                return Err(bad(format!(
                    "flow maps of {flow_maps} entries need about {} MiB of kernel memory on this host ({} interface(s) x 2 maps (IPv4, IPv6) x {} CPUs x {} bytes per flow), more than half of its {} MiB; lower flow_map_entries (or flow_map_entries_ipv4/_ipv6 for the family the fabric does not use)",
                    need >> 20,
                    ifaces.len(),
                    possible_cpus(),
                    std::mem::size_of::<agent_common::FlowStats>(),
                    total >> 20
                )));
            }
        }
        let summary = args.summary_every.or(file.summary_every).unwrap_or(0);
        let pfc_storm_s = pfc_storm_seconds(args.pfc_storm_seconds, file.pfc_storm_seconds)?;
        if let Some(bits) = args.elephant_bps {
            elephant.threshold_bytes_per_second = bits / 8.0;
            elephant.validate().map_err(bad)?;
        }
        if let Some(gbps) = args.link_speed {
            elephant.link_speed_mbps = Some(thresholds::link_speed_bps(gbps)? as f64 / 1e6);
        }
        ecmp.validate(Some(&ifaces)).map_err(bad)?;
        let rdma = file.rdma.unwrap_or_default();
        for (key, path, what) in [
            ("rdma.qp_json", &rdma.qp_json, "qp"),
            ("rdma.cm_id_json", &rdma.cm_id_json, "cm_id"),
        ] {
            if let Some(p) = path {
                if let Err(e) = std::fs::metadata(p) {
                    return Err(bad(format!(
                        "{key} {}: {e}; record it with `rdma -j res show {what} > FILE`, or remove the key to ask `rdma` itself",
                        p.display()
                    )));
                }
            }
        }
        let web = WebSettings::load(&file.web.unwrap_or_default(), args.web_config.as_deref())?;
        let log_level = match args.log_level.clone().or(file.log_level) {
            Some(l) => Some(crate::config::logging::parse_level(&l).map_err(bad)?),
            None => None,
        };
        Ok(Config {
            pfc_storm_s,
            ipfix,
            web,
            log_level,
            log_format: args
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Auto),
            ifaces,
            hooks,
            xdp_mode,
            listen,
            top_k,
            poll_interval: Duration::from_millis(poll_ms),
            flow_idle_timeout: Duration::from_secs(idle_s),
            flow_maps,
            summary_every: (summary > 0).then(|| Duration::from_secs(summary)),
            rate_window_s,
            elephant,
            ecmp,
            sysfs_root: args
                .sysfs_root
                .clone()
                .or(file.sysfs_root)
                .unwrap_or_else(|| "/sys".into()),
            afxdp,
            rdma,
            pin: !args.no_pin && file.pin.unwrap_or(true),
            program_stats: !args.no_program_stats && file.program_stats.unwrap_or(true),
            sflow,
            sflow_groups,
            switches: switches::Switches {
                psn_tracking: !args.no_psn_tracking && file.psn_tracking.unwrap_or(true),
                session_counters: !args.no_session_counters
                    && file.session_counters.unwrap_or(true),
                classes,
                rhythm: !args.no_rhythm && file.rhythm.unwrap_or(true),
                flow_cache: !args.no_flow_cache && file.flow_cache.unwrap_or(true),
                ..switches::Switches::default()
            },
            pin_dir: args
                .pin_dir
                .clone()
                .or(file.pin_dir)
                .unwrap_or_else(|| DEFAULT_PIN_DIR.into()),
        })
    }
}

/// The AF_XDP settings of a file, validated: `None` unless the capture is AF_XDP (then a
/// tuning key is a mistake, named).
/// The two flow maps' entries: `flow_map_entries` for both, each family's own key over it,
/// flags over the file (`file`: the three keys as written); each in range.
fn flow_map_sizes(args: &RunArgs, file: [Option<u32>; 3]) -> Result<FlowMapSizes, UsageError> {
    let in_range = |(n, name): (u32, &str)| {
        if (16..=4_194_304).contains(&n) {
            Ok(n)
        } else {
            Err(bad(format!(
                "{name} {n} is out of range; use 16 to 4194304"
            )))
        }
    };
    let both = setting(
        args.flow_map_entries,
        "--flow-map-entries",
        file[0],
        "flow_map_entries",
    )
    .unwrap_or((agent_common::FLOW_MAP_ENTRIES, "flow_map_entries"));
    in_range(both)?;
    let ipv4 = setting(
        args.flow_map_entries_ipv4,
        "--flow-map-entries-ipv4",
        file[1],
        "flow_map_entries_ipv4",
    )
    .unwrap_or(both);
    let ipv6 = setting(
        args.flow_map_entries_ipv6,
        "--flow-map-entries-ipv6",
        file[2],
        "flow_map_entries_ipv6",
    )
    .unwrap_or(both);
    Ok(FlowMapSizes {
        ipv4: in_range(ipv4)?,
        ipv6: in_range(ipv6)?,
    })
}

fn afxdp_options(
    capture: CaptureArg,
    mode: Option<BindMode>,
    [batch, coalesce_us, busy_poll_us]: [Option<u32>; 3],
) -> Result<Option<AfxdpOptions>, UsageError> {
    let keys = [
        ("afxdp_batch", batch, 1, afxdp::MAX_BATCH),
        ("afxdp_coalesce_us", coalesce_us, 0, 10_000),
        ("afxdp_busy_poll_us", busy_poll_us, 0, 10_000),
    ];
    for (name, v, lo, hi) in keys {
        let Some(v) = v else { continue };
        if capture != CaptureArg::Afxdp {
            return Err(bad(format!(
                "{name} is set but capture is not afxdp; add capture = \"afxdp\" or drop {name}"
            )));
        }
        if !(lo..=hi).contains(&v) {
            return Err(bad(format!("{name} {v} is out of range; use {lo} to {hi}")));
        }
    }
    if capture != CaptureArg::Afxdp {
        return Ok(None);
    }
    let d = AfxdpOptions::default();
    Ok(Some(AfxdpOptions {
        mode: mode.unwrap_or(d.mode),
        batch: batch.unwrap_or(d.batch),
        coalesce_us: coalesce_us.unwrap_or(d.coalesce_us),
        busy_poll_us: busy_poll_us.unwrap_or(d.busy_poll_us),
    }))
}

/// The detector settings of a file (shared by `run` and `analyze`), validated.
pub fn detectors(file: &FileConfig) -> Result<(f64, ElephantConfig, EcmpConfig), UsageError> {
    let rate_window = file
        .rate_window_seconds
        .unwrap_or(thresholds::RATE_TAU_SECONDS);
    if !(0.01..=3600.0).contains(&rate_window) {
        return Err(bad(format!(
            "rate_window_seconds {rate_window} is out of range; use 0.01 to 3600"
        )));
    }
    let elephant = file.elephant.clone().unwrap_or_default();
    elephant.validate().map_err(bad)?;
    let ecmp = file.ecmp.clone().unwrap_or_default();
    ecmp.validate(None).map_err(bad)?;
    Ok((rate_window, elephant, ecmp))
}

/// The `[classes]` section of a file (shared by `run` and `analyze`), validated.
pub fn classes(file: &FileConfig) -> Result<agent_common::TrafficClasses, UsageError> {
    file.classes
        .clone()
        .unwrap_or_default()
        .resolve()
        .map_err(bad)
}

/// Reads and parses a TOML configuration file.
pub fn load_file(path: &Path) -> Result<FileConfig, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(format!(
            "cannot read config file {}: {e}; check the path given to --config",
            path.display()
        ))
    })?;
    // toml's message points at the error with a caret under the line: it keeps its lines.
    toml::from_str(&text).map_err(|e| {
        bad(format!(
            "config file {}: {}",
            path.display(),
            e.to_string().trim_end()
        ))
    })
}
#[cfg(test)]
mod tests;
