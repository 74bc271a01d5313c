//! Raw command-line flags (clap). They are turned into one validated [`crate::config::Config`]
//! by `config/`; nothing else reads them.

/// The runbook's default home (the HTML report's links and the alert rules' default base):
/// the project's repository.
pub const RUNBOOK_URL: &str = "https://github.com/rocemon/rocemon/blob/main/docs/runbook.md";

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "rocemon",
    version,
    about = "RoCEv2 telemetry: per-opcode, ECN, CNP and per-flow counters from XDP/tc, served to Prometheus"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Attach to interfaces, count RoCEv2 traffic in the kernel and serve /metrics.
    Run(RunArgs),
    /// Analyse a pcap or pcapng capture offline with the same parser and flow logic.
    Analyze(AnalyzeArgs),
    /// A live terminal view of a running agent: top flows, elephants, ECMP collisions.
    Top(TopArgs),
    /// RDMA NIC port counters and the host's RC connections with their derived UDP source
    /// ports (and predicted ECMP paths with a hash model): for hosts whose RoCE bypasses the
    /// kernel.
    Rdma(RdmaArgs),
    /// Detach the programs and remove the maps that `rocemon run` pinned (all interfaces, or
    /// the ones given).
    Detach(DetachArgs),
    /// Validate a configuration file and print what it sets; exit status 2 when it is wrong.
    CheckConfig(CheckConfigArgs),
    /// Ask a running agent to reload its configuration (SIGHUP), as the systemd unit's
    /// ExecReload does: no `kill` binary needed.
    Reload(ReloadArgs),
}

#[derive(Args, Debug)]
pub struct ReloadArgs {
    /// The agent's process id (systemd: $MAINPID).
    #[arg(long)]
    pub pid: u32,
}

#[derive(Args, Debug)]
pub struct DetachArgs {
    /// Interface to detach from (repeat for several; default: every pinned interface).
    #[arg(
        long = "iface",
        visible_alias = "interface",
        short = 'i',
        value_name = "IF"
    )]
    pub ifaces: Vec<String>,
    /// The bpffs directory of the pins (default: pin_dir of --config, else /sys/fs/bpf/rocemon).
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// Configuration file whose pin_dir to use.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Remove the pins even while a running agent holds them.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct CheckConfigArgs {
    /// The TOML configuration file.
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct RdmaArgs {
    /// Root of the sysfs tree (tests point it at a fake tree).
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Read `rdma -j res show qp` output from this file instead of running `rdma`.
    #[arg(long, value_name = "FILE")]
    pub qp_json: Option<PathBuf>,
    /// Read `rdma -j res show cm_id` output from this file instead of running `rdma`.
    #[arg(long, value_name = "FILE")]
    pub cm_id_json: Option<PathBuf>,
    /// Configuration file: its [ecmp.hash] model gives each connection a predicted path.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// The agent's address: HOST:PORT, or a URL (http:// or https://).
    #[arg(long, default_value = "127.0.0.1:9442")]
    pub addr: String,
    /// PEM file with the CA (or self-signed certificate) to trust for https (implies https).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Basic authentication user (the password comes from --password-file or
    /// ROCEMON_PASSWORD).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// File holding the basic authentication password.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Flows to show (the API's ?limit=; --top is the same, as in analyze).
    #[arg(long, visible_alias = "top", default_value_t = 20)]
    pub limit: usize,
    /// Stop after this many refreshes (0: until Ctrl-C or `q`).
    #[arg(long, default_value_t = 0)]
    pub iterations: u64,
    /// Print one plain screen and exit (for scripts; also what a pipe gets each refresh).
    #[arg(long)]
    pub once: bool,
}

#[derive(Args, Debug, Default)]
pub struct RunArgs {
    /// Interface to watch (repeat for several).
    #[arg(
        long = "iface",
        visible_alias = "interface",
        short = 'i',
        value_name = "IF"
    )]
    pub ifaces: Vec<String>,
    /// XDP attach mode: auto tries native (driver) mode and falls back to skb (generic)
    /// (default: auto).
    #[arg(long, value_enum)]
    pub xdp_mode: Option<XdpModeArg>,
    /// Hooks to attach, comma-separated: xdp, tc-ingress, tc-egress (default: xdp,tc-egress;
    /// none with --capture afxdp).
    #[arg(long, value_delimiter = ',')]
    pub hooks: Option<Vec<String>>,
    /// Address for the HTTP endpoint (/metrics) (default: 127.0.0.1:9442).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// TOML configuration file; flags given on the command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Per-flow metric series are exported for this many flows with the highest rates
    /// (default: 20).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// How often the kernel maps are read, in milliseconds (default: 1000).
    #[arg(long, value_name = "MS")]
    pub poll_interval_ms: Option<u64>,
    /// A flow with no packet for this many seconds leaves the flow maps (and the flow table),
    /// making room: a full map refuses new flows (default: 60).
    #[arg(long, value_name = "SECONDS")]
    pub flow_idle_timeout_seconds: Option<u64>,
    /// Entries of each kernel flow map, IPv4 and IPv6 (per interface) (default: 16384).
    #[arg(long, value_name = "N")]
    pub flow_map_entries: Option<u32>,
    /// Entries of the IPv4 flow map alone (default: --flow-map-entries).
    #[arg(long, value_name = "N")]
    pub flow_map_entries_ipv4: Option<u32>,
    /// Entries of the IPv6 flow map alone (default: --flow-map-entries; 16 on a fabric
    /// without IPv6 saves its memory).
    #[arg(long, value_name = "N")]
    pub flow_map_entries_ipv6: Option<u32>,
    /// Print a one-line summary to stderr every N seconds (0: never) (default: 0).
    #[arg(long, value_name = "SECONDS")]
    pub summary_every: Option<u64>,
    /// Elephant entry threshold, bits per second: 1G, 100Mbit, 400Gb/s, or 12.5MB for bytes
    /// (overrides elephant.threshold_bytes_per_second) (default: 100Mbit).
    #[arg(long, value_name = "RATE", value_parser = crate::config::units::parse_rate)]
    pub elephant_bps: Option<f64>,
    /// A priority paused without a break for longer than this is a PFC storm (a finding;
    /// SONiC's PFC watchdog detects in 0.2 s) (default: 0.2, or pfc_storm_seconds of the file).
    #[arg(long, value_name = "SECONDS")]
    pub pfc_storm_seconds: Option<f64>,
    /// Speed in Gb/s of the watched links whose driver reports none (veth, some VFs): PFC
    /// and PAUSE quanta become seconds and elephant link shares are taken at it (overrides
    /// elephant.link_speed_mbps; a speed the driver reports wins) (default:
    /// elephant.link_speed_mbps of the file, else none: no pause time on such a link).
    #[arg(long, value_name = "GBPS")]
    pub link_speed: Option<f64>,
    /// Root of the sysfs tree for RDMA NIC counters (default: /sys).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
    /// Where RoCE frames are counted: maps (in the kernel) or afxdp (RoCE and mirror frames
    /// are redirected to AF_XDP sockets and counted in userspace; for mirror collectors)
    /// (default: maps).
    #[arg(long, value_enum)]
    pub capture: Option<CaptureArg>,
    /// AF_XDP socket mode: auto tries zero-copy and falls back to copy (default: auto).
    #[arg(long, value_enum)]
    pub afxdp_mode: Option<super::afxdp::BindMode>,
    /// Do not pin maps and links: the programs detach and the counts end when rocemon exits.
    #[arg(long)]
    pub no_pin: bool,
    /// Do not turn on the kernel's BPF run-time statistics (rocemon_program_run_seconds_total
    /// then counts only where `sysctl kernel.bpf_stats_enabled=1` is set).
    #[arg(long)]
    pub no_program_stats: bool,
    /// Leave PSN tracking (gaps, retransmissions per flow) out of the kernel programs: the
    /// verifier prunes it and it costs nothing per packet (rocemon_psn_gaps_total stays 0).
    #[arg(long)]
    pub no_psn_tracking: bool,
    /// Leave the per mirror-session / tunnel counters out of the kernel programs (hosts
    /// without mirror traffic).
    #[arg(long)]
    pub no_session_counters: bool,
    /// Leave the per-millisecond RoCE series out of the kernel programs: no training rhythm
    /// (rocemon_training_* stay absent), one clock read and one array update less per packet.
    #[arg(long)]
    pub no_rhythm: bool,
    /// Count every RoCE packet in the kernel's flow maps directly, without the per-CPU flow
    /// cache in front of them (same counts; about 60 ns more per packet where the cache hits).
    #[arg(long)]
    pub no_flow_cache: bool,
    /// The bpffs directory for pinned maps and links (default: /sys/fs/bpf/rocemon).
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// Web configuration file (Prometheus exporter style: tls_server_config, basic_auth_users).
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (RUST_LOG overrides it) (default: info).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format: auto (journal under systemd, else text), text, journal, json (default:
    /// auto).
    #[arg(long, value_enum)]
    pub log_format: Option<crate::config::logging::LogFormat>,
    /// Receive sFlow v5 from switches on this address (IP, or IP:PORT; port 6343 by default),
    /// alone or next to interface hooks.
    #[arg(long, value_name = "ADDR")]
    pub sflow_listen: Option<String>,
    /// Export every flow as IPFIX records to this collector: udp://HOST:PORT, tcp://HOST:PORT
    /// or HOST[:PORT] (UDP, port 4739); repeat for several (default: [ipfix] collectors of
    /// the config file, else no export).
    #[arg(long = "ipfix", value_name = "COLLECTOR")]
    pub ipfix: Vec<String>,
    /// Seconds between two IPFIX records of a flow that goes on (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub ipfix_active_timeout_seconds: Option<u64>,
}

/// Where RoCE frames are counted (flag and configuration file value).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureArg {
    /// In the kernel programs, read from maps (the default).
    Maps,
    /// In userspace, from AF_XDP sockets fed by an XDP redirect (mirror collectors).
    Afxdp,
}

/// How to attach XDP (flag and configuration file value).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpModeArg {
    Auto,
    Native,
    Skb,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng; Ethernet, Linux cooked SLL or SLL2), plain or gzip,
    /// zstd or xz compressed; `-` reads standard input. Several files are one capture, merged
    /// in timestamp order.
    #[arg(required_unless_present = "read", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A capture file, as tshark and tcpdump take it (the same as naming it).
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub read: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// How many flows the table shows (JSON always lists every flow); --limit is the same,
    /// as in `rocemon top` and the API's ?limit=.
    #[arg(long, visible_alias = "limit", default_value_t = 10)]
    pub top: usize,
    /// Also write the report as one self-contained HTML page (charts, opens offline).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Where the HTML report's findings link their runbook entries: your copy of
    /// docs/runbook.md (a wiki, an internal mirror); each link adds `#kind`.
    #[arg(long, value_name = "URL", default_value = RUNBOOK_URL)]
    pub runbook_url: String,
    /// Never show a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Configuration file: its [elephant], [ecmp] and rate_window_seconds settings apply.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Elephant entry threshold, bits per second: 1G, 100Mbit, 400Gb/s, or 12.5MB for bytes
    /// (default 100Mbit, or the configuration file's).
    #[arg(long, value_name = "RATE", value_parser = crate::config::units::parse_rate)]
    pub elephant_bps: Option<f64>,
    /// Capture-time interval between rate and detector ticks, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// Flows held at most (memory stays bounded for any capture): when full, the flows quiet
    /// the longest leave, their totals counted under flows_evicted.
    #[arg(long, default_value_t = rocemon_defaults::MAX_FLOWS)]
    pub max_flows: usize,
    /// Speed of the captured link in Gb/s: PFC and PAUSE quanta (512 bit times each) become
    /// seconds at this speed.
    #[arg(long, value_name = "GBPS", default_value_t = rocemon_defaults::LINK_SPEED_GBPS)]
    pub link_speed: f64,
    /// A priority paused without a break for longer than this is a PFC storm (a finding;
    /// SONiC's PFC watchdog detects in 0.2 s) (default: 0.2, or pfc_storm_seconds of --config).
    #[arg(long, value_name = "SECONDS")]
    pub pfc_storm_seconds: Option<f64>,
    /// Export the capture's flows as IPFIX records to this collector: udp://HOST:PORT,
    /// tcp://HOST:PORT or HOST[:PORT] (UDP, port 4739); repeat for several. Records are on
    /// capture time: one every active timeout of a flow that goes on, and its last at the end.
    #[arg(long = "ipfix", value_name = "COLLECTOR")]
    pub ipfix: Vec<String>,
    /// Write the capture's flows as IPFIX messages into this file (RFC 5655).
    #[arg(long, value_name = "FILE")]
    pub ipfix_file: Option<PathBuf>,
    /// Seconds of capture time between two IPFIX records of a flow that goes on (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub ipfix_active_timeout_seconds: Option<u64>,
}

/// Defaults shared by flags and code (they live with the analysis they configure).
pub use super::analyze::defaults as rocemon_defaults;
