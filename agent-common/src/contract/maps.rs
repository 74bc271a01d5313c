//! The kernel object's maps by name, and the flow maps' sizes and words (the map modules of
//! their own, [`crate::ring`], [`crate::pause_ring`], [`crate::flow_cache`], name theirs).

/// Name of the per-CPU array of `HookCounters`, indexed by `Hook`.
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Name of the LRU per-CPU hash of `FlowKey` -> `FlowStats`: the IPv6 flows.
pub const MAP_FLOWS: &str = "FLOWS";
/// Name of the LRU per-CPU hash of `FlowKey4` -> `FlowStats`: the IPv4 flows, under a key
/// of 16 bytes instead of 40 (cheaper to hash on every packet).
pub const MAP_FLOWS4: &str = "FLOWS4";
/// Name of the LRU per-CPU hash of `FlowKey` -> `FlowStats` for the flows the host sends
/// (tc egress), both families: a budget of their own, so no flood that comes in can push
/// them out (an incoming flood churns only the other two maps).
pub const MAP_FLOWS_OUT: &str = "FLOWS_OUT";

/// What a flow map holds, in words for a person: `IPv4`, `IPv6` (flows that come in) or
/// `sent` (the flows the host sends).
pub fn flow_map_holds(map: &str) -> &'static str {
    match map {
        MAP_FLOWS4 => "IPv4",
        MAP_FLOWS_OUT => "sent",
        _ => "IPv6",
    }
}

/// The `map` label of failures that concern both flow maps at once (the kernel counts a
/// failed flow update without its family; a read or a delete covers both maps).
pub const MAP_LABEL_FLOWS: &str = "flows";
/// Default number of flows each kernel flow map (IPv4, IPv6) holds (per interface).
pub const FLOW_MAP_ENTRIES: u32 = 16_384;
/// Name of the XSKMAP (receive queue -> AF_XDP socket) of the capture mode.
pub const MAP_XSKS: &str = "XSKS";
/// Receive queues the capture mode can serve (the XSKMAP's size).
pub const MAX_CAPTURE_QUEUES: u32 = 64;
/// Name of the per-CPU hash of `SessionKey` -> `SessionStats`.
pub const MAP_SESSIONS: &str = "SESSIONS";
/// Program array of the XDP slow programs (XDP and AF_XDP hooks).
pub const MAP_XDP_SLOW: &str = "XDP_SLOW";
/// Program array of the tc slow programs (ingress and egress).
pub const MAP_TC_SLOW: &str = "TC_SLOW";
/// The bench's flow floor's map (IPv4 RoCE flows in a per-CPU hash map, sized by the bench
/// at load time).
pub const MAP_FLOW_FLOOR: &str = "FLOW_FLOOR";
