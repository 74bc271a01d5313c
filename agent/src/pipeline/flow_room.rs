//! Room in a full bounded flow table: the quietest eighth leaves, its totals kept.

use super::{EndReason, FlowTable};

impl FlowTable {
    /// A full bounded table: the eighth of it that was quiet longest leaves (elephants stay),
    /// its totals kept in [`FlowTable::evicted`]. Amortised over the inserts that follow.
    /// The candidates are held by position, not by key (a flood of new flows calls this once
    /// per eighth of the table: copying every key, then finding each victim again by its
    /// hash, was most of its cost); ties of quiet time go by key, as before.
    pub(super) fn make_room(&mut self, max: usize) {
        let mut quiet: Vec<(u64, usize)> = self
            .entries
            .values()
            .enumerate()
            .filter(|(_, e)| !e.elephant.elephant)
            .map(|(i, e)| (e.stats.last_seen_ns, i))
            .collect();
        let n = (max / 8).max(1).min(quiet.len());
        if n == 0 {
            return;
        }
        if n < quiet.len() {
            let table = &self.entries;
            let key = |i: usize| table.at(i).map(|e| (e.iface, e.key));
            quiet.select_nth_unstable_by(n - 1, |a, b| {
                a.0.cmp(&b.0).then_with(|| key(a.1).cmp(&key(b.1)))
            });
        }
        let mut victims: Vec<usize> = quiet[..n].iter().map(|&(_, i)| i).collect();
        // From the highest position down: each removal moves the last entry, never a victim.
        victims.sort_unstable_by(|a, b| b.cmp(a));
        for i in victims {
            if let Some(e) = self.entries.swap_remove_at(i) {
                self.evicted.flows += 1;
                self.evicted.packets += e.stats.packets;
                self.evicted.bytes += e.stats.bytes;
                self.evicted.ecn_ce += e.stats.ecn_ce;
                self.evicted.cnp += e.stats.cnp;
                if self.record_ends {
                    self.ended.push((e, EndReason::LackOfResources));
                }
            }
        }
        // Keys of evicted flows on the active list are dropped at the next tick; a flood of
        // new flows within one tick would grow it past the table, so it is compacted here.
        if self.active.len() > 2 * max {
            self.compact_active();
        }
    }

    /// The active list without the keys of flows no longer held, each key once (a flow
    /// evicted and back within one tick was listed twice, and the tick then moved its rates
    /// twice). Amortised: the list is at most twice the table when it runs, at most the table
    /// after.
    pub(super) fn compact_active(&mut self) {
        let mut active = std::mem::take(&mut self.active);
        for k in &active {
            if let Some(e) = self.entries.get_mut(k) {
                e.active = false;
            }
        }
        active.retain(|k| match self.entries.get_mut(k) {
            Some(e) if !e.active => {
                e.active = true;
                true
            }
            _ => false,
        });
        self.active = active;
    }
}
