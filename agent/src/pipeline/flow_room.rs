//! Room in a full bounded flow table: the quietest eighth leaves, its totals kept.

use super::{EndReason, FlowTable};

/// Elephants [`FlowTable::make_room`] makes room for among its candidates at first (then as
/// many as the last time met).
pub(super) const ROOM_SPARE: usize = 8;

impl FlowTable {
    /// A full bounded table: the eighth of it that was quiet longest leaves (elephants stay),
    /// its totals kept in [`FlowTable::evicted`]. Amortised over the inserts that follow.
    /// The candidates are held by position, not by key (a flood of new flows calls this once
    /// per eighth of the table: copying every key, then finding each victim again by its
    /// hash, was most of its cost); ties of quiet time go by key, as before.
    pub(super) fn make_room(&mut self, max: usize) {
        // Every flow by the time of its last packet: the walk reads one cache line of each
        // entry (the elephant flag sits in another one, read below for the few candidates).
        let mut quiet = std::mem::take(&mut self.room_scratch);
        quiet.clear();
        quiet.extend(
            self.entries
                .values()
                .enumerate()
                .map(|(i, e)| (e.stats.last_seen_ns, i)),
        );
        let want = (max / 8).max(1);
        let table = &self.entries;
        let key = |i: usize| table.at(i).map(|e| (e.iface, e.key));
        let elephant = |i: usize| table.at(i).is_some_and(|e| e.elephant.elephant);
        // The quietest `want + spare` first, and the elephants among them out of the way:
        // when at least `want` others remain, the quietest `want` flows that are no
        // elephants are all among them. Otherwise more elephants were there than spared
        // for: again with twice as many.
        let mut spare = self.room_spare;
        let n = loop {
            let k = (want + spare).min(quiet.len());
            select_quietest(&mut quiet, k, key);
            let mut kept = 0;
            for j in 0..k {
                if !elephant(quiet[j].1) {
                    quiet.swap(j, kept);
                    kept += 1;
                }
            }
            if kept >= want || k == quiet.len() {
                self.room_spare = (k - kept).max(ROOM_SPARE);
                let n = want.min(kept);
                select_quietest(&mut quiet[..kept], n, key);
                break n;
            }
            spare = spare.saturating_mul(2);
        };
        if n == 0 {
            self.room_scratch = quiet;
            return;
        }
        // From the highest position down: each removal moves the last entry, never a victim.
        let victims = &mut quiet[..n];
        victims.sort_unstable_by_key(|v| std::cmp::Reverse(v.1));
        let evicted = &mut self.evicted;
        for &(_, i) in victims.iter() {
            if self.record_ends {
                if let Some(e) = self.entries.swap_remove_at(i) {
                    evicted.add(&e);
                    self.ended.push((e, EndReason::LackOfResources));
                }
            } else {
                self.entries.swap_remove_seen(i, |e| evicted.add(e));
            }
        }
        self.room_scratch = quiet;
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
    ///
    /// A held flow is on the list exactly when its entry says `active`, so the list is made
    /// again from the entries, in their order, in one walk: no key of the old list is looked
    /// up (two lookups for each of twice the table's keys, an entry's cache miss each, were a
    /// fifth of a flood's eviction). The order differs from the old list's only in which
    /// flow a tick visits first; what a tick does to a flow does not depend on it.
    pub(super) fn compact_active(&mut self) {
        let mut active = std::mem::take(&mut self.active);
        active.clear();
        active.extend(
            self.entries
                .values()
                .filter(|e| e.active)
                .map(|e| (e.iface, e.key)),
        );
        self.active = active;
    }
}

/// Puts the `n` quietest of `quiet` (last seen, position) by (last seen, key) in its first
/// `n` places, in no order: `key` gives a position's key. The selection compares times alone (a plain integer
/// compare: looking up both keys on every tie of the comparator made the selection most of
/// a flood's eviction), then settles the ties at its edge by key: of the flows last seen at
/// the edge's time, on either side of it, the lowest keys take the places left.
fn select_quietest<K: Ord>(quiet: &mut [(u64, usize)], n: usize, key: impl Fn(usize) -> K) {
    if n == 0 || n >= quiet.len() {
        return;
    }
    quiet.select_nth_unstable_by_key(n - 1, |q| q.0);
    let edge = quiet[n - 1].0;
    if !quiet[n..].iter().any(|q| q.0 == edge) {
        return;
    }
    // The part before n in two: earlier than the edge, then at the edge.
    let mut below = 0;
    for j in 0..n {
        if quiet[j].0 < edge {
            quiet.swap(j, below);
            below += 1;
        }
    }
    // Every flow at the edge to the front of what is left, then by key.
    let mut at = below;
    for j in below..quiet.len() {
        if quiet[j].0 == edge {
            quiet.swap(j, at);
            at += 1;
        }
    }
    quiet[below..at].sort_unstable_by_key(|q| key(q.1));
}

#[cfg(test)]
mod tests {
    use super::select_quietest;
    use proptest::prelude::*;

    proptest! {
        /// The same `n` as a selection by (last seen, key) over every pair: ties at the edge
        /// go by key.
        #[test]
        fn selects_the_quietest_by_time_then_key(
            times in prop::collection::vec(0..6u64, 1..80),
            keys in prop::collection::vec(any::<u32>(), 80),
            n in 1..80usize,
        ) {
            let mut quiet: Vec<(u64, usize)> = times.iter().enumerate().map(|(i, &t)| (t, i)).collect();
            let key = |i: usize| (keys[i], i);
            let n = n.min(quiet.len());
            let mut want = quiet.clone();
            want.sort_by_key(|q| (q.0, key(q.1)));
            select_quietest(&mut quiet, n, key);
            let mut got: Vec<usize> = quiet[..n].iter().map(|q| q.1).collect();
            let mut want: Vec<usize> = want[..n].iter().map(|q| q.1).collect();
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }
}
