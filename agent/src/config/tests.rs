//! Flags over the file, defaults, and the error messages of the validated configuration.
use super::*;

fn args(ifaces: &[&str]) -> RunArgs {
    RunArgs {
        ifaces: ifaces.iter().map(|s| s.to_string()).collect(),
        ..RunArgs::default()
    }
}

#[test]
fn defaults() {
    let c = Config::merge(FileConfig::default(), &args(&["eth0"])).unwrap();
    assert_eq!(c.hooks, vec![Hook::Xdp, Hook::TcEgress]);
    assert_eq!(c.xdp_mode, XdpMode::Auto);
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(c.top_k, 20);
}

/// `--link-speed` (Gb/s) is the speed of links whose driver reports none, over the file's
/// `elephant.link_speed_mbps`.
#[test]
fn the_link_speed_flag_is_the_fallback_link_speed() {
    let file = || -> FileConfig {
        toml::from_str("interfaces = [\"a\"]\n[elephant]\nlink_speed_mbps = 1000.0").unwrap()
    };
    let c = Config::merge(file(), &args(&["a"])).unwrap();
    assert_eq!(c.elephant.link_speed_mbps, Some(1000.0));
    let mut a = args(&["a"]);
    a.link_speed = Some(25.0);
    let c = Config::merge(file(), &a).unwrap();
    assert_eq!(c.elephant.link_speed_mbps, Some(25_000.0));
}

#[test]
fn flags_override_file() {
    let file: FileConfig = toml::from_str(
        "interfaces = [\"a\"]\nhooks = [\"tc-ingress\"]\ntop_k = 5\nlisten = \"127.0.0.1:1\"\nxdp_mode = \"skb\"",
    )
    .unwrap();
    let mut a = args(&["b"]);
    a.top_k = Some(7);
    let c = Config::merge(file, &a).unwrap();
    assert_eq!(c.ifaces, vec!["b"]);
    assert_eq!(c.hooks, vec![Hook::TcIngress]);
    assert_eq!(c.top_k, 7);
    assert_eq!(c.xdp_mode, XdpMode::Skb);
    assert_eq!(c.listen.port(), 1);
}

#[test]
fn both_flow_maps_take_flow_map_entries_by_default() {
    let c = Config::merge(FileConfig::default(), &args(&["a"])).unwrap();
    assert_eq!(
        c.flow_maps,
        FlowMapSizes::both(agent_common::FLOW_MAP_ENTRIES)
    );
    let file: FileConfig = toml::from_str("flow_map_entries = 4096").unwrap();
    let c = Config::merge(file, &args(&["a"])).unwrap();
    assert_eq!(c.flow_maps, FlowMapSizes::both(4096));
}

#[test]
fn each_flow_map_is_sized_on_its_own() {
    let file: FileConfig = toml::from_str(
        "flow_map_entries = 4096
flow_map_entries_ipv6 = 16",
    )
    .unwrap();
    let c = Config::merge(file, &args(&["a"])).unwrap();
    assert_eq!(
        c.flow_maps,
        FlowMapSizes {
            ipv4: 4096,
            ipv6: 16
        }
    );
    // A flag over the file, for one family.
    let file: FileConfig = toml::from_str("flow_map_entries_ipv4 = 1024").unwrap();
    let mut a = args(&["a"]);
    a.flow_map_entries_ipv4 = Some(2048);
    a.flow_map_entries = Some(512);
    let c = Config::merge(file, &a).unwrap();
    assert_eq!(
        c.flow_maps,
        FlowMapSizes {
            ipv4: 2048,
            ipv6: 512
        }
    );
}

#[test]
fn the_flow_cache_is_in_the_memory_figure() {
    // 1.2 MiB per CPU whatever the maps' sizes: the smallest maps on 4 CPUs cost more.
    let cache = 4 * 4096 * std::mem::size_of::<agent_common::flow_cache::CachedFlow>() as u64;
    assert_eq!(cache, 4 * 1248 * 1024);
    assert!(FlowMapSizes::both(16).bytes(4) > cache);
}

#[test]
fn the_map_of_sent_flows_is_a_quarter_of_the_larger_map() {
    assert_eq!(FlowMapSizes::both(16_384).own(), 4_096);
    let v6_only = FlowMapSizes {
        ipv4: 16,
        ipv6: 65_536,
    };
    assert_eq!(v6_only.own(), 16_384);
    assert_eq!(FlowMapSizes::both(256).own(), 256, "at least 256");
}

#[test]
fn a_small_ipv6_map_costs_less_memory() {
    let both = FlowMapSizes::both(65_536).bytes(4);
    let v4_only = FlowMapSizes {
        ipv4: 65_536,
        ipv6: 16,
    }
    .bytes(4);
    // Exactly the IPv6 entries left out (the map of sent flows follows the larger map).
    let value = std::mem::size_of::<agent_common::FlowStats>().next_multiple_of(8) as u64;
    assert_eq!(both - v4_only, (65_536 - 16) * (4 * value + 40 + 64));
    assert!(v4_only * 10 < both * 6, "{v4_only} vs {both}");
    assert_eq!(FlowMapSizes::both(16).to_string(), "16");
    assert_eq!(
        FlowMapSizes {
            ipv4: 65_536,
            ipv6: 16
        }
        .to_string(),
        "IPv4 65536, IPv6 16"
    );
}

#[test]
fn kernel_switches_default_on_and_follow_file_then_flags() {
    let c = Config::merge(FileConfig::default(), &args(&["a"])).unwrap();
    assert_eq!(c.switches, super::switches::Switches::default());
    assert!(c.switches.psn_tracking && c.switches.session_counters);
    let file: FileConfig = toml::from_str("psn_tracking = false").unwrap();
    let c = Config::merge(file, &args(&["a"])).unwrap();
    assert!(!c.switches.psn_tracking && c.switches.session_counters);
    let mut a = args(&["a"]);
    a.no_session_counters = true;
    let c = Config::merge(FileConfig::default(), &a).unwrap();
    assert!(c.switches.psn_tracking && !c.switches.session_counters);
}

#[test]
fn flow_cache_defaults_on_and_turns_off_by_file_or_flag() {
    let c = Config::merge(FileConfig::default(), &args(&["a"])).unwrap();
    assert!(c.switches.flow_cache);
    let file: FileConfig = toml::from_str("flow_cache = false").unwrap();
    assert!(
        !Config::merge(file, &args(&["a"]))
            .unwrap()
            .switches
            .flow_cache
    );
    let mut a = args(&["a"]);
    a.no_flow_cache = true;
    assert!(
        !Config::merge(FileConfig::default(), &a)
            .unwrap()
            .switches
            .flow_cache
    );
}

#[test]
fn errors_name_the_key_and_fix() {
    let e = Config::merge(FileConfig::default(), &args(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--iface"), "{e}");
    let mut a = args(&["x"]);
    a.hooks = Some(vec!["kprobe".into()]);
    let e = Config::merge(FileConfig::default(), &a)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown hook 'kprobe'") && e.contains("tc-ingress"),
        "{e}"
    );
    let mut a = args(&["x"]);
    a.listen = Some("localhost".into());
    let e = Config::merge(FileConfig::default(), &a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("IP:PORT"), "{e}");
    let mut a = args(&["x"]);
    a.top_k = Some(0);
    let e = Config::merge(FileConfig::default(), &a)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--top-k 0 is out of range"),
        "the flag, not the key: {e}"
    );
    let e = toml::from_str::<FileConfig>("interfacez = []")
        .unwrap_err()
        .to_string();
    assert!(e.contains("interfacez"), "{e}");
    assert!(Config::merge(FileConfig::default(), &args(&["a", "a"])).is_err());
    assert!(Config::merge(FileConfig::default(), &args(&["a/b"])).is_err());
}

#[test]
fn detector_sections() {
    let file: FileConfig = toml::from_str(
        r#"
interfaces = ["u0", "u1"]
rate_window_seconds = 1.5
[elephant]
threshold_bytes_per_second = 1e6
min_duration_seconds = 2
[ecmp]
groups = [{ name = "spine", interfaces = ["u0", "u1"] }]
[ecmp.hash]
function = "crc16-1021"
seed = 7
fields = ["src_ip", "dst_ip", "protocol", "src_port", "dst_port", "dest_qp"]
paths = 4
"#,
    )
    .unwrap();
    let c = Config::merge(file, &args(&[])).unwrap();
    assert_eq!(c.elephant.threshold_bytes_per_second, 1e6);
    assert_eq!(c.ecmp.groups[0].interfaces.len(), 2);
    assert_eq!(c.ecmp.hash.as_ref().unwrap().paths, 4);
    assert_eq!(c.rate_window_s, 1.5);
    let file: FileConfig =
        toml::from_str("[ecmp]\ngroups = [{ name = \"g\", interfaces = [\"a\", \"b\"] }]").unwrap();
    let e = Config::merge(file, &args(&["a"])).unwrap_err().to_string();
    assert!(e.contains("'b', which is not watched"), "{e}");
    let e = toml::from_str::<FileConfig>("[ecmp.hash]\nfunction = \"md5\"\npaths = 2")
        .unwrap_err()
        .to_string();
    assert!(e.contains("md5"), "{e}");
}

/// The `(default: X)` that `rocemon run --help` says for `flag` (its long name).
fn help_default(flag: &str) -> String {
    use clap::CommandFactory;
    let cmd = crate::config::cli::Cli::command();
    let run = cmd.find_subcommand("run").expect("run");
    let arg = run
        .get_arguments()
        .find(|a| a.get_long() == Some(flag))
        .unwrap_or_else(|| panic!("--{flag}"));
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let at = help
        .find("(default: ")
        .unwrap_or_else(|| panic!("--{flag} says no default: {help}"));
    let rest = &help[at + "(default: ".len()..];
    rest[..rest.find(')').unwrap_or(rest.len())].to_string()
}

/// What `run --help` says is what an empty configuration gets (so the two cannot drift).
#[test]
fn run_help_says_the_defaults_a_configuration_gets() {
    let c = Config::merge(FileConfig::default(), &args(&["eth0"])).unwrap();
    let hooks: Vec<String> = c.hooks.iter().map(|h| h.name().replace('_', "-")).collect();
    assert_eq!(
        help_default("hooks").split(';').next(),
        Some(hooks.join(",").as_str())
    );
    assert_eq!(help_default("listen"), c.listen.to_string());
    assert_eq!(help_default("top-k"), c.top_k.to_string());
    assert_eq!(
        help_default("poll-interval-ms"),
        c.poll_interval.as_millis().to_string()
    );
    assert_eq!(
        help_default("flow-idle-timeout-seconds"),
        c.flow_idle_timeout.as_secs().to_string()
    );
    assert_eq!(
        help_default("flow-map-entries"),
        c.flow_maps.ipv4.to_string()
    );
    assert_eq!(c.flow_maps.ipv4, c.flow_maps.ipv6);
    assert_eq!(help_default("summary-every"), "0");
    assert_eq!(c.summary_every, None);
    assert_eq!(
        crate::config::units::parse_rate(&help_default("elephant-bps")).unwrap() / 8.0,
        c.elephant.threshold_bytes_per_second
    );
    assert_eq!(
        help_default("sysfs-root"),
        c.sysfs_root.display().to_string()
    );
    assert_eq!(help_default("pin-dir"), c.pin_dir.display().to_string());
    assert_eq!(help_default("capture"), "maps");
    assert!(c.afxdp.is_none());
    assert_eq!(help_default("xdp-mode"), "auto");
    assert_eq!(c.xdp_mode, XdpMode::Auto);
    assert_eq!(help_default("log-format"), "auto");
    assert_eq!(c.log_format, LogFormat::Auto);
    assert_eq!(help_default("log-level"), "info");
    assert_eq!(c.log_level, None, "None is info (main.rs)");
}

/// Every option of every subcommand that takes one value and has no fixed default says what
/// happens without it, or is a file or address only given when wanted.
#[test]
fn every_run_option_with_a_value_says_its_default() {
    use clap::CommandFactory;
    let cmd = crate::config::cli::Cli::command();
    let run = cmd.find_subcommand("run").expect("run");
    // Given only when wanted: nothing happens without them.
    let optional = ["config", "web-config", "sflow-listen", "iface"];
    for a in run.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        if !a.get_action().takes_values() || optional.contains(&long) {
            continue;
        }
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(
            !a.get_default_values().is_empty() || help.contains("default"),
            "--{long} says no default: {help}"
        );
    }
}
