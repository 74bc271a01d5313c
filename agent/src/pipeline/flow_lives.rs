//! A flow the full kernel map pushed out and admitted again keeps its totals in the agent.
//!
//! The flow maps are LRU maps: when full, the kernel drops the flow least recently touched,
//! and the flow's next packet (or a flow cache write-back of counts not yet in the map)
//! creates it again with fresh counts. The kernel never puts counts into a map twice (a cache
//! slot holds only its counts since its last write-back), so a flow's element starts afresh
//! as a whole, with a later first-seen time. What the agent read of the earlier life stays
//! in the flow table: a flow absent from a read although heard since the idle cut-off was
//! pushed out (the agent deletes only idle flows) and is held at its last totals, and a flow
//! that starts afresh has its earlier lives' totals added. Only what a life counted after the
//! agent's last read of it is lost, counted as push-outs (see `sources::flow_pressure`).

use agent_common::FlowStats;

/// A flow's earlier lives in the kernel map (boxed in the entry: most flows have none).
#[derive(Clone, Debug, Default)]
pub struct Lives {
    /// The flow's totals when its current life began: every earlier life, merged.
    pub before: FlowStats,
    /// The current life as the map held it at the last read.
    pub current: FlowStats,
}

/// Whether `now`, read from the map, is a new life of the flow read as `last`: fewer counts,
/// or a later first packet (a value read while its first packet was counted may lack its
/// time: no evidence either way).
pub fn restarted(last: &FlowStats, now: &FlowStats) -> bool {
    last.packets > 0
        && (now.packets < last.packets
            || (last.first_seen_ns != 0
                && now.first_seen_ns != 0
                && now.first_seen_ns > last.first_seen_ns))
}

/// The totals of a flow whose current life reads `current`.
pub fn totals(lives: &Lives, current: &FlowStats) -> FlowStats {
    let mut t = lives.before;
    t.merge(current);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(packets: u64, first: u64) -> FlowStats {
        FlowStats {
            packets,
            bytes: packets * 100,
            first_seen_ns: first,
            last_seen_ns: first + packets,
            ..FlowStats::default()
        }
    }

    #[test]
    fn fewer_packets_are_a_new_life() {
        assert!(restarted(&read(10, 5), &read(3, 5)));
    }

    #[test]
    fn a_later_first_packet_is_a_new_life_even_with_more_packets() {
        assert!(restarted(&read(10, 5), &read(30, 900)));
    }

    #[test]
    fn growing_counts_of_the_same_life_are_no_new_life() {
        assert!(!restarted(&read(10, 5), &read(30, 5)));
        assert!(!restarted(&read(10, 5), &read(10, 0)), "a torn first time");
        assert!(!restarted(&read(0, 0), &read(1, 7)), "nothing read before");
    }

    #[test]
    fn totals_add_the_earlier_lives() {
        let lives = Lives {
            before: read(10, 5),
            current: read(4, 900),
        };
        let t = totals(&lives, &read(4, 900));
        assert_eq!((t.packets, t.bytes, t.first_seen_ns), (14, 1400, 5));
        assert_eq!(t.last_seen_ns, 904);
    }
}
