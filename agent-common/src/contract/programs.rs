//! The kernel object's programs by name: the entry programs per hook, the slow programs they
//! tail-call (the general parser, reached when the fast path hands a frame on), and the
//! bench's yardsticks (never attached by the agent).

pub const PROG_XDP: &str = "rocemon_xdp";
pub const PROG_TC_INGRESS: &str = "rocemon_tc_ingress";
pub const PROG_TC_EGRESS: &str = "rocemon_tc_egress";
/// The AF_XDP capture mode's XDP program (redirects RoCE and mirror frames to sockets).
pub const PROG_AFXDP: &str = "rocemon_xdp_afxdp";
/// The slow programs; each lives in a program array of its program type
/// ([`super::maps::MAP_XDP_SLOW`], [`super::maps::MAP_TC_SLOW`]).
pub const PROG_XDP_SLOW: &str = "rocemon_xdp_slow";
pub const PROG_TC_INGRESS_SLOW: &str = "rocemon_tc_ingress_slow";
pub const PROG_TC_EGRESS_SLOW: &str = "rocemon_tc_egress_slow";
pub const PROG_AFXDP_SLOW: &str = "rocemon_xdp_afxdp_slow";
/// Benchmark baselines: one per-CPU counter bump.
pub const PROG_BASELINE_XDP: &str = "rocemon_baseline_xdp";
pub const PROG_BASELINE_TC: &str = "rocemon_baseline_tc";
/// Benchmark yardstick: the least an exact per-flow counter costs (IPv4 RoCE flows in a
/// per-CPU hash map, [`super::maps::MAP_FLOW_FLOOR`]).
pub const PROG_FLOW_FLOOR_XDP: &str = "rocemon_flow_floor_xdp";
/// The same at tc.
pub const PROG_FLOW_FLOOR_TC: &str = "rocemon_flow_floor_tc";
