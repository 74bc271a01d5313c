//! What the kernel maps cost and what the host has: the flow-map memory check reads both.

/// The CPUs a per-CPU map allocates for (possible CPUs, not only online ones).
pub fn possible_cpus() -> usize {
    aya::util::nr_cpus()
        .ok()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Entries of one interface's kernel flow maps: IPv4 flows under a 16-byte key, IPv6 flows
/// under a 40-byte one. Each is sized on its own, so a fabric of one family does not pay for
/// the other's map. The flows the host sends (tc egress) have a third map, a quarter of the
/// larger one ([`FlowMapSizes::own`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowMapSizes {
    pub ipv4: u32,
    pub ipv6: u32,
}

impl FlowMapSizes {
    /// Both maps of `entries`.
    pub const fn both(entries: u32) -> FlowMapSizes {
        FlowMapSizes {
            ipv4: entries,
            ipv6: entries,
        }
    }

    /// Entries of the map of the flows the host sends: a quarter of the larger family's map,
    /// at least [`OWN_MIN_ENTRIES`]. Its own budget, so that no flood that comes in pushes
    /// the host's flows out; a host sends on its own queue pairs, far fewer flows than a
    /// fabric or a mirror port brings in.
    pub fn own(&self) -> u32 {
        (self.ipv4.max(self.ipv6) / 4).max(OWN_MIN_ENTRIES)
    }

    /// Entries of the smallest of the three maps.
    pub fn smallest(&self) -> u32 {
        self.ipv4.min(self.ipv6).min(self.own())
    }

    /// About what an interface's flow state costs in kernel memory: the three maps,
    /// preallocated, per entry a value per CPU (the maps are per CPU), the key and the
    /// hash element's own overhead; and the per-CPU flow cache in front of them (fixed:
    /// 4,096 slots of a whole flow state per CPU, 1.2 MiB).
    pub fn bytes(&self, cpus: usize) -> u64 {
        let value = std::mem::size_of::<agent_common::FlowStats>().next_multiple_of(8) as u64;
        let maps: u64 = [
            (self.ipv4, std::mem::size_of::<agent_common::FlowKey4>()),
            (self.ipv6, std::mem::size_of::<agent_common::FlowKey>()),
            (self.own(), std::mem::size_of::<agent_common::FlowKey>()),
        ]
        .iter()
        .map(|&(entries, key)| {
            u64::from(entries) * (cpus as u64 * value + key.next_multiple_of(8) as u64 + 64)
        })
        .sum();
        let cache = u64::from(agent_common::flow_cache::FLOW_CACHE_SLOTS)
            * std::mem::size_of::<agent_common::flow_cache::CachedFlow>() as u64;
        maps + cpus as u64 * cache
    }
}

/// The least entries of the map of the flows the host sends ([`FlowMapSizes::own`]).
pub const OWN_MIN_ENTRIES: u32 = 256;

impl std::fmt::Display for FlowMapSizes {
    /// `16384`, or `IPv4 16384, IPv6 16` when the two differ.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ipv4 == self.ipv6 {
            write!(f, "{}", self.ipv4)
        } else {
            write!(f, "IPv4 {}, IPv6 {}", self.ipv4, self.ipv6)
        }
    }
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
