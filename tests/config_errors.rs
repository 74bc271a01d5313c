//! Every configuration and flag error a user can make: one test per case, each checking the
//! message (the problem and the fix) and exit status 2, for `rocemon run` and, for the file,
//! `rocemon check-config` as well.

use rocemon_testkit::TempDir;
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

fn rocemon(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rocemon")
}

fn assert_usage_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit status; stderr: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert!(err.len() < 2000, "a message of {} bytes", err.len());
}

/// A configuration file of `toml` in its own temporary directory (kept while the guard
/// lives).
fn config_file(toml: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new("rocemon-cfg").unwrap();
    let path = dir.path().join("rocemon.toml");
    std::fs::write(&path, toml).unwrap();
    (dir, path)
}

/// A configuration file (with a watched interface unless the case sets one) that `run` and
/// `check-config` must both refuse with `needle` in the message.
fn file_error(toml: &str, needle: &str) {
    let text = if toml.contains("interfaces") {
        toml.to_string()
    } else {
        format!("interfaces = [\"lo\"]\n{toml}")
    };
    let (_dir, path) = config_file(&text);
    let p = path.to_str().unwrap();
    assert_usage_error(&rocemon(&["run", "--config", p]), needle);
    assert_usage_error(&rocemon(&["check-config", p]), needle);
}

macro_rules! file_errors {
    ($($name:ident: $toml:expr => $needle:expr;)*) => {$(
        #[test]
        fn $name() {
            file_error($toml, $needle);
        }
    )*};
}

file_errors! {
    top_k_zero: "top_k = 0" => "top_k 0 is out of range; use 1 to 10000";
    top_k_too_large: "top_k = 10001" => "top_k 10001 is out of range";
    poll_interval_too_short: "poll_interval_ms = 5" => "poll_interval_ms 5 is out of range; use 10 to 60000";
    flow_idle_timeout_zero: "flow_idle_timeout_seconds = 0" => "flow_idle_timeout_seconds 0 is out of range; use 2 (two polls) to 86400";
    flow_idle_timeout_within_two_polls: "poll_interval_ms = 5000\nflow_idle_timeout_seconds = 9" => "flow_idle_timeout_seconds 9 is out of range; use 10 (two polls) to 86400";
    flow_map_too_small: "flow_map_entries = 8" => "flow_map_entries 8 is out of range";
    ipv4_flow_map_too_small: "flow_map_entries_ipv4 = 8" => "flow_map_entries_ipv4 8 is out of range; use 16 to 4194304";
    ipv6_flow_map_too_large: "flow_map_entries_ipv6 = 4194305" => "flow_map_entries_ipv6 4194305 is out of range; use 16 to 4194304";
    rate_window_zero: "rate_window_seconds = 0.0" => "rate_window_seconds 0 is out of range; use 0.01 to 3600";
    pfc_storm_zero: "pfc_storm_seconds = 0.0" => "pfc_storm_seconds 0 is out of range; use 0.001 to 3600";
    elephant_threshold_zero: "[elephant]\nthreshold_bytes_per_second = 0.0" => "elephant.threshold_bytes_per_second must be above 0";
    elephant_link_share_above_one: "[elephant]\nthreshold_link_share = 2.0" => "elephant.threshold_link_share 2 must be in (0, 1]";
    elephant_exit_ratio_zero: "[elephant]\nexit_ratio = 0.0" => "elephant.exit_ratio 0 must be in (0, 1]";
    elephant_negative_duration: "[elephant]\nmin_duration_seconds = -1.0" => "min_duration_seconds and release_seconds must be >= 0";
    ecmp_group_twice: "interfaces = [\"lo\", \"lo2\"]\n[ecmp]\ngroups = [{ name = \"s\", interfaces = [\"lo\", \"lo2\"] }, { name = \"s\", interfaces = [\"lo\", \"lo2\"] }]" => "ecmp group 's' is defined twice";
    ecmp_group_of_one: "[ecmp]\ngroups = [{ name = \"s\", interfaces = [\"lo\"] }]" => "ecmp group 's' needs at least two interfaces";
    ecmp_group_unwatched: "interfaces = [\"lo\", \"lo2\"]\n[ecmp]\ngroups = [{ name = \"s\", interfaces = [\"lo\", \"eth7\"] }]" => "names interface 'eth7', which is not watched";
    ecmp_hash_no_paths: "[ecmp.hash]\nfunction = \"crc16-8005\"\npaths = 0" => "ecmp.hash.paths 0 is out of range; use 1 to 4096";
    ecmp_hash_no_fields: "[ecmp.hash]\nfunction = \"crc16-8005\"\npaths = 4\nfields = []" => "ecmp.hash.fields is empty";
    afxdp_with_xdp_hook: "capture = \"afxdp\"\nhooks = [\"xdp\"]" => "AF_XDP capture attaches its own XDP program";
    afxdp_mode_without_capture: "afxdp_mode = \"copy\"" => "afxdp_mode is set but capture is not afxdp";
    afxdp_batch_without_capture: "afxdp_batch = 16" => "afxdp_batch is set but capture is not afxdp";
    afxdp_batch_zero: "capture = \"afxdp\"\nafxdp_batch = 0" => "afxdp_batch 0 is out of range; use 1 to 2048";
    afxdp_batch_above_the_ring: "capture = \"afxdp\"\nafxdp_batch = 4096" => "afxdp_batch 4096 is out of range; use 1 to 2048";
    afxdp_coalesce_too_long: "capture = \"afxdp\"\nafxdp_coalesce_us = 20000" => "afxdp_coalesce_us 20000 is out of range; use 0 to 10000";
    afxdp_busy_poll_without_capture: "afxdp_busy_poll_us = 50" => "afxdp_busy_poll_us is set but capture is not afxdp";
    hooks_empty: "hooks = []" => "hooks is empty";
    unknown_hook: "hooks = [\"kprobe\"]" => "unknown hook 'kprobe'";
    interface_twice: "interfaces = [\"lo\", \"lo\"]" => "interface 'lo' is given twice";
    interface_name_too_long: "interfaces = [\"abcdefghijklmnopq\"]" => "is not valid (1-15 characters";
    interface_name_with_escape: "interfaces = [\"e\\u001b[31m\"]" => "\"e\\u{1b}[31m\" is not valid";
    interface_name_with_nul: "interfaces = [\"e\\u0000x\"]" => "\"e\\0x\" is not valid";
    rdma_file_missing: "[rdma]\nqp_json = \"/nonexistent/qp.json\"" => "rdma.qp_json /nonexistent/qp.json";
    log_level_unknown: "log_level = \"loud\"" => "log_level \"loud\" is not a level";
    listen_not_an_address: "listen = \"nowhere\"" => "listen address 'nowhere' is not IP:PORT";
    classes_dscp_above_63: "[classes]\nroce_dscp = [64]" => "classes.roce_dscp has DSCP 64; a DSCP is 0 to 63";
    classes_dscp_empty: "[classes]\ncnp_dscp = []" => "classes.cnp_dscp is empty";
    classes_priority_above_7: "[classes]\nroce_priority = 9" => "classes.roce_priority 9 is not a priority; use 0 to 7, or \"any\"";
    classes_unknown_key: "[classes]\nroce_dcsp = [26]" => "unknown field `roce_dcsp`";
    sflow_listen_not_an_address: "[sflow]\nlisten = \"nowhere\"" => "is not IP or IP:PORT; use e.g. 0.0.0.0 (port 6343)";
    sflow_buffer_too_small: "[sflow]\nlisten = \"127.0.0.1\"\nreceive_buffer_bytes = 10" => "sflow.receive_buffer_bytes 10 is out of range; use 65536";
    sflow_group_of_one_uplink: "[[sflow.groups]]\nname = \"a\"\nagent = \"192.0.2.1\"\nuplinks = [1, 1]" => "sflow group 'a' needs at least two distinct uplinks";
    sflow_group_twice: "[[sflow.groups]]\nname = \"a\"\nagent = \"192.0.2.1\"\nuplinks = [1, 2]\n[[sflow.groups]]\nname = \"a\"\nagent = \"192.0.2.2\"\nuplinks = [1, 2]" => "sflow group 'a' is defined twice";
    sflow_group_bad_agent: "[[sflow.groups]]\nname = \"a\"\nagent = \"switch1\"\nuplinks = [1, 2]" => "invalid IP address syntax";
    sflow_agents_not_a_network: "[sflow]\nagents = [\"10.0.0.0/33\"]" => "sflow.agents: \"10.0.0.0/33\": the prefix length must be 0 to 32";
    sflow_agents_not_an_address: "[sflow]\nagents = [\"leaf-a\"]" => "sflow.agents: \"leaf-a\" is not an address or network";
    sflow_max_flows_zero: "[sflow]\nmax_flows = 0" => "sflow.max_flows 0 is out of range; use 1 to 10000000";
    sflow_idle_timeout_zero: "[sflow]\nidle_timeout_seconds = 0.0" => "sflow.idle_timeout_seconds 0 is out of range; use 1 to 86400";
    sflow_group_agent_not_allowed: "[sflow]\nagents = [\"10.0.0.0/8\"]\n[[sflow.groups]]\nname = \"a\"\nagent = \"192.0.2.1\"\nuplinks = [1, 2]" => "sflow group 'a' has agent 192.0.2.1, which sflow.agents does not allow";
    unknown_key: "top_kk = 3" => "unknown field `top_kk`";
    wrong_type: "top_k = \"three\"" => "invalid type";
}

/// A 50 MB log level is named, not echoed whole.
#[test]
fn huge_log_level_is_cut_in_the_message() {
    // A file: the argument list of one process has a bound of its own.
    let huge = "x".repeat(1 << 20);
    let (_dir, path) = config_file(&format!("interfaces = [\"lo\"]\nlog_level = \"{huge}\"\n"));
    let out = rocemon(&["run", "--config", path.to_str().unwrap()]);
    assert_usage_error(&out, "is not a level");
    assert_usage_error(&out, "(1048576 characters)");
}

/// `run` takes every threshold `analyze` takes, with the same check.
#[test]
fn run_pfc_storm_flag_out_of_range() {
    assert_usage_error(
        &rocemon(&["run", "--iface", "lo", "--pfc-storm-seconds", "7200"]),
        "--pfc-storm-seconds 7200 is out of range; use 0.001 to 3600",
    );
}

#[test]
fn analyze_pfc_storm_flag_out_of_range() {
    assert_usage_error(
        &rocemon(&["analyze", "--pfc-storm-seconds", "0", "/dev/null"]),
        "--pfc-storm-seconds 0 is out of range; use 0.001 to 3600",
    );
}

#[test]
fn run_link_speed_flag_zero() {
    assert_usage_error(
        &rocemon(&["run", "--iface", "lo", "--link-speed", "0"]),
        "--link-speed 0 is not a link speed; give Gb/s above 0, e.g. --link-speed 400",
    );
}

#[test]
fn analyze_link_speed_flag_zero() {
    assert_usage_error(
        &rocemon(&["analyze", "--link-speed", "0", "/dev/null"]),
        "--link-speed 0 is not a link speed; give Gb/s above 0, e.g. --link-speed 400",
    );
}

/// Every threshold `analyze` takes, `run` takes too, by the same flag.
#[test]
fn run_takes_every_threshold_analyze_takes() {
    let help = |cmd: &str| String::from_utf8_lossy(&rocemon(&[cmd, "--help"]).stdout).to_string();
    let (run, analyze) = (help("run"), help("analyze"));
    for flag in ["--elephant-bps", "--pfc-storm-seconds", "--link-speed"] {
        assert!(analyze.contains(flag), "analyze lacks {flag}");
        assert!(run.contains(flag), "run lacks {flag}");
    }
}

#[test]
fn analyze_tick_zero() {
    assert_usage_error(
        &rocemon(&["analyze", "--tick-ms", "0", "/dev/null"]),
        "--tick-ms must be at least 1",
    );
}

#[test]
fn analyze_elephant_threshold_zero() {
    assert_usage_error(
        &rocemon(&["analyze", "--elephant-bps", "0", "/dev/null"]),
        "a rate must be above 0",
    );
}

#[test]
fn analyze_bad_config_file() {
    let (_dir, path) = config_file("[ecmp.hash]\nfunction = \"crc16-8005\"\npaths = 0\n");
    assert_usage_error(
        &rocemon(&["analyze", "--config", path.to_str().unwrap(), "/dev/null"]),
        "ecmp.hash.paths 0 is out of range",
    );
}

/// `rocemon run --iface lo` with more flags, which it must refuse with the needle.
macro_rules! flag_errors {
    ($($name:ident: [$($arg:expr),*] => $needle:expr;)*) => {$(
        #[test]
        fn $name() {
            assert_usage_error(&rocemon(&["run", "--iface", "lo", $($arg),*]), $needle);
        }
    )*};
}

// A flag's value out of range is named by the flag (the key would send the user to a file
// that does not say it).
flag_errors! {
    top_k_flag_zero: ["--top-k", "0"] => "--top-k 0 is out of range; use 1 to 10000";
    poll_interval_flag_too_short: ["--poll-interval-ms", "5"]
        => "--poll-interval-ms 5 is out of range; use 10 to 60000";
    flow_idle_timeout_flag_too_long: ["--flow-idle-timeout-seconds", "86401"]
        => "--flow-idle-timeout-seconds 86401 is out of range; use 2 (two polls) to 86400";
    flow_map_flag_too_small: ["--flow-map-entries", "8"]
        => "--flow-map-entries 8 is out of range; use 16 to 4194304";
    ipv4_flow_map_flag_too_small: ["--flow-map-entries-ipv4", "3"]
        => "--flow-map-entries-ipv4 3 is out of range; use 16 to 4194304";
}

/// A flag over a file key: the error names the flag, whose value was used.
#[test]
fn a_flag_over_the_file_is_named_by_the_flag() {
    let (_dir, path) = config_file("interfaces = [\"lo\"]\nflow_map_entries_ipv6 = 4194305\n");
    assert_usage_error(
        &rocemon(&[
            "run",
            "--config",
            path.to_str().unwrap(),
            "--flow-map-entries-ipv6",
            "4194306",
        ]),
        "--flow-map-entries-ipv6 4194306 is out of range",
    );
}

/// toml points at the mistake with a caret under the line: the caret keeps its own line, under
/// the value it points at.
#[test]
fn a_toml_error_keeps_its_caret_under_the_line() {
    let (_dir, path) =
        config_file("interfaces = [\"lo\"]\n[elephant]\nthreshold_bytes_per_second = \"x\"\n");
    let out = rocemon(&["check-config", path.to_str().unwrap()]);
    assert_usage_error(&out, "expected f64");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let quoted = lines
        .iter()
        .position(|l| l.ends_with("threshold_bytes_per_second = \"x\""))
        .unwrap_or_else(|| panic!("the line quoted on its own: {err}"));
    let caret = lines[quoted + 1];
    let col = caret
        .find('^')
        .unwrap_or_else(|| panic!("a caret line: {err}"));
    assert_eq!(&lines[quoted][col..col + 3], "\"x\"", "{err}");
}

/// A missing interface is said before anything else: no start banner above it.
#[test]
fn a_missing_interface_is_said_before_the_banner() {
    let out = rocemon(&["run", "--iface", "rvnosuch0", "--listen", "127.0.0.1:0"]);
    assert_usage_error(&out, "no such interface 'rvnosuch0'");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("starting"), "{err}");
}

#[test]
fn interface_flag_with_control_characters() {
    assert_usage_error(
        &rocemon(&["run", "--iface", "a\u{7}b"]),
        "\"a\\u{7}b\" is not valid",
    );
}

/// A flow map the host cannot hold is refused, naming its cost (it used to start silently
/// and take gigabytes of kernel memory).
#[test]
fn flow_maps_larger_than_the_host_are_refused() {
    let names: Vec<String> = (0..200).map(|i| format!("\"rv{i}\"")).collect();
    file_error(
        &format!(
            "interfaces = [{}]\nflow_map_entries = 4194304",
            names.join(", ")
        ),
        "lower flow_map_entries",
    );
}

/// `rocemon check-config` over `toml`, which must be valid: what it prints.
fn valid_config(toml: &str) -> String {
    let (_dir, path) = config_file(toml);
    let out = rocemon(&["check-config", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}

/// `check-config` names each family's map when their sizes differ.
#[test]
fn check_config_names_each_flow_map_when_they_differ() {
    let text = valid_config(
        "interfaces = [\"lo\"]\nflow_map_entries = 65536\nflow_map_entries_ipv6 = 16\n",
    );
    assert!(
        text.contains("flow_map_entries: IPv4 65536, IPv6 16 (about "),
        "{text}"
    );
}

/// `check-config` says what the flow map costs on this host.
#[test]
fn check_config_names_the_flow_map_memory() {
    let text = valid_config("interfaces = [\"lo\"]\nflow_map_entries = 65536\n");
    assert!(
        text.contains("flow_map_entries: 65536 (about ") && text.contains("MiB of kernel memory"),
        "{text}"
    );
}

#[test]
fn reload_of_no_process() {
    assert_usage_error(
        &rocemon(&["reload", "--pid", "999999999"]),
        "no process 999999999",
    );
}

/// `rocemon reload` signals only a rocemon: this test process is not one.
#[test]
fn reload_of_another_program() {
    let me = std::process::id().to_string();
    assert_usage_error(&rocemon(&["reload", "--pid", &me]), "not rocemon");
}

/// An sFlow port already taken: exit 2, the address named, the flag to change.
#[test]
fn sflow_port_taken() {
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let out = rocemon(&[
        "run",
        "--sflow-listen",
        &addr,
        "--listen",
        "127.0.0.1:0",
        "--no-pin",
    ]);
    assert_usage_error(&out, &format!("cannot receive sFlow on udp://{addr}"));
    assert_usage_error(&out, "--sflow-listen");
}

/// Neither an interface nor an sFlow address: the message offers both.
#[test]
fn nothing_to_watch_names_both_ways() {
    assert_usage_error(
        &rocemon(&["run"]),
        "or --sflow-listen ADDR to collect sFlow only",
    );
}

/// `rocemon ARGS` must refuse with exit 2 and the needle (the problem and the fix).
macro_rules! command_errors {
    ($($name:ident: [$($arg:expr),*] => $needle:expr;)*) => {$(
        #[test]
        fn $name() {
            assert_usage_error(&rocemon(&[$($arg),*]), $needle);
        }
    )*};
}

command_errors! {
    analyze_max_flows_zero: ["analyze", "--max-flows", "0", "x.pcap"]
        => "--max-flows must be at least 1";
    analyze_stdin_twice: ["analyze", "-", "-"]
        => "standard input (-) can be given once; name the other captures by their files";
    analyze_link_speed_zero: ["analyze", "--link-speed", "0", "x.pcap"]
        => "--link-speed 0 is not a link speed; give Gb/s above 0, e.g. --link-speed 400";
    top_ca_file_missing: ["top", "--addr", "https://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem"]
        => "--ca-file /nonexistent/ca.pem";
    top_password_file_missing: ["top", "--addr", "127.0.0.1:1", "--user", "u", "--password-file", "/nonexistent/pw"]
        => "--password-file /nonexistent/pw";
    top_user_without_password: ["top", "--addr", "127.0.0.1:1", "--user", "u"]
        => "--user needs a password: --password-file FILE or ROCEMON_PASSWORD";
    top_nobody_listening: ["top", "--addr", "127.0.0.1:1", "--iterations", "1"]
        => "cannot reach rocemon at http://127.0.0.1:1";
}

file_errors! {
    web_request_timeout_zero: "[web]\nrequest_timeout_seconds = 0.0" => "web.request_timeout_seconds 0 is out of range; use 0.1 to 300";
    web_concurrent_requests_zero: "[web]\nmax_concurrent_requests = 0" => "web.max_concurrent_requests 0 is out of range; use 1 to 1000";
    web_header_timeout_too_long: "[web]\nheader_timeout_seconds = 301.0" => "web.header_timeout_seconds 301 is out of range; use 0.1 to 300";
    web_per_client_zero: "[web]\nmax_connections_per_client = 0" => "web.max_connections_per_client 0 is out of range; use 1 to 10000";
    web_config_file_missing: "[web]\nconfig_file = \"/nonexistent/web.yml\"" => "/nonexistent/web.yml";
}

/// An agent nobody answers for is not a configuration mistake: the line says who is missing
/// and what to set, without calling the configuration bad.
#[test]
fn an_unreachable_agent_is_not_bad_configuration() {
    let out = rocemon(&["top", "--addr", "127.0.0.1:1", "--iterations", "1"]);
    assert_usage_error(&out, "is `rocemon run` listening there? (set --addr)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("bad configuration"), "{err}");
}

/// `rdma -j` output that is not JSON names the source and the parser's words.
#[test]
fn unparsable_rdma_output_is_named() {
    let (_dir, path) = config_file("this is not rdma -j output");
    assert_usage_error(
        &rocemon(&["rdma", "--qp-json", path.to_str().unwrap()]),
        "cannot parse `rdma -j res` output",
    );
}

/// A capture the user may not read (as root nothing is unreadable, so the test drops to
/// nobody for the run).
#[test]
fn a_capture_without_read_permission_is_named() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !rocemon_testkit::require_root("dropping to another user") {
        return;
    }
    let dir = TempDir::new("rocemon-perm").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.path().join("secret.pcap");
    std::fs::write(&p, b"\xd4\xc3\xb2\xa1").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(BIN)
        .args(["analyze", p.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run rocemon as nobody");
    assert_usage_error(&out, "Permission denied");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secret.pcap"),
        "the file is named"
    );
}

/// AF_XDP capture serves at most 64 receive queues: an interface with more is refused with
/// the `ethtool -L` that fixes it.
#[test]
fn afxdp_on_an_interface_with_too_many_queues_is_refused() {
    use rocemon_testkit::netns::VethPair;
    if !rocemon_testkit::require_root("namespaces and veth pairs") {
        return;
    }
    let pair = VethPair::with_queues("rcqmax", 65).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.ns_a, BIN])
        .args([
            "run",
            "--iface",
            &pair.a_if,
            "--capture",
            "afxdp",
            "--no-pin",
        ])
        .args(["--listen", "127.0.0.1:9449"])
        .output()
        .unwrap();
    assert_usage_error(
        &out,
        "has 65 receive queues; AF_XDP capture serves at most 64",
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ethtool -L"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn analyze_elephant_threshold_not_a_rate() {
    assert_usage_error(
        &rocemon(&["analyze", "--elephant-bps", "fast", "/dev/null"]),
        "write bits per second as 1G, 100Mbit",
    );
}
