//! What the kernel maps cost and what the host has: the flow-map memory check reads both.

/// The CPUs a per-CPU map allocates for (possible CPUs, not only online ones).
pub fn possible_cpus() -> usize {
    aya::util::nr_cpus()
        .ok()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// About what one interface's flow maps cost in kernel memory: two maps (IPv4 flows under a
/// 16-byte key, IPv6 under a 40-byte one) of `entries` each, preallocated (LRU); per entry a
/// value per CPU (the maps are per CPU), the key, and the hash element's own overhead.
pub fn flow_map_bytes(entries: u32, cpus: usize) -> u64 {
    let value = std::mem::size_of::<agent_common::FlowStats>().next_multiple_of(8) as u64;
    [
        std::mem::size_of::<agent_common::FlowKey4>(),
        std::mem::size_of::<agent_common::FlowKey>(),
    ]
    .iter()
    .map(|k| u64::from(entries) * (cpus as u64 * value + k.next_multiple_of(8) as u64 + 64))
    .sum()
}

/// The host's memory (MemTotal).
pub(super) fn host_memory_bytes() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
