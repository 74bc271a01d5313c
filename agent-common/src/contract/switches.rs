//! The kernel programs' load-time globals, set by the loader before the verifier runs (the
//! code a switch turns off is pruned and never runs).

/// Load-time switches (1 on, 0 off).
pub const SWITCH_TRACK_PSN: &str = "ROCEMON_TRACK_PSN";
pub const SWITCH_SESSIONS: &str = "ROCEMON_SESSIONS";
/// The hooks whose RoCE packets feed the per-millisecond ring ([`crate::ring`]): a bit per
/// `Hook` discriminant, 0 off. One ingress hook and egress, so that no packet is added twice.
pub const SWITCH_RING_HOOKS: &str = "ROCEMON_RING_HOOKS";
/// 1: the ring takes the coarse clock (the time of the last tick) instead of the fine one.
/// The loader sets it where a tick is at most a millisecond (HZ >= 1000): the fine clock reads
/// the TSC, serialised, on every RoCE packet, its largest single cost.
pub const SWITCH_RING_COARSE: &str = "ROCEMON_RING_COARSE";
/// Load-time traffic class expectation (`TrafficClasses`): RoCE DSCP bit set (u64), RoCE
/// priority (u8), CNP DSCP bit set (u64).
pub const GLOBAL_ROCE_DSCP: &str = "ROCEMON_ROCE_DSCP";
pub const GLOBAL_ROCE_PRIORITY: &str = "ROCEMON_ROCE_PRIORITY";
pub const GLOBAL_CNP_DSCP: &str = "ROCEMON_CNP_DSCP";
/// The possible CPUs, set by the loader: how many CPUs' states a PSN gap is reconciled with.
pub const GLOBAL_NR_CPUS: &str = "ROCEMON_NR_CPUS";
