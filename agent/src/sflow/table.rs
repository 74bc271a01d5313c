//! A bounded, aged table for the collector's state (agents, ports, flows, rhythm ports).
//! Anyone who can reach the sFlow port chooses its keys, so every table has a size, entries
//! expire when idle (a few export intervals), and a full table keeps the busiest: a new key
//! takes the place of the least busy of a few entries sampled at random (as Redis'
//! approximated LFU: O(1) per insert) only when that entry was updated once, like the new
//! key; an entry updated twice or more leaves only by going idle, and the protected ones (the
//! configured groups' agents and uplinks) never. So a flood of new keys mostly evicts itself
//! and the switches that keep sending keep their places. Every refusal, eviction and expiry
//! is counted.

use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;
use serde::Serialize;
use std::hash::Hash;

/// Entries sampled for an eviction.
const EVICTION_SAMPLES: usize = 8;

/// What a table's values do with an entry that leaves (evicted or expired): most forget it;
/// an agent's datagrams go to the aggregate of the agents no longer held.
pub trait Absorb {
    fn absorb(&mut self, _gone: &Self) {}
}

#[derive(Clone, Debug)]
struct Entry<V> {
    value: V,
    last_seen_ns: u64,
    /// Updates (samples, datagrams): how busy the entry is.
    busy: u64,
    protected: bool,
}

impl<V> Entry<V> {
    /// Whether an eviction may take this entry: unprotected and updated once.
    fn evictable(&self) -> bool {
        !self.protected && self.busy <= 1
    }
}

/// A table's figures, as reported and exported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    pub entries: usize,
    pub max_entries: usize,
    /// New keys refused: the table was full of protected entries.
    pub dropped: u64,
    /// Entries pushed out by a new key (the least busy of a sample).
    pub evicted: u64,
    /// Entries removed after the idle timeout.
    pub expired: u64,
}

#[derive(Clone, Debug)]
pub struct Table<K, V> {
    map: IndexMap<K, Entry<V>, FxBuildHasher>,
    max: usize,
    dropped: u64,
    evicted: u64,
    expired: u64,
    /// What left the table, absorbed.
    pub gone: V,
    rng: u64,
    /// Entries an eviction may take (unprotected, updated once): with none, a full table
    /// refuses a new key without sampling. A full table of busy entries (the rhythm ports,
    /// 64 of a fabric's thousands) is asked for a place at nearly every sample.
    evictable: usize,
}

impl<K: Hash + Eq + Clone, V: Default + Absorb> Table<K, V> {
    pub fn new(max: usize) -> Self {
        Table {
            map: IndexMap::default(),
            max: max.max(1),
            dropped: 0,
            evicted: 0,
            expired: 0,
            gone: V::default(),
            rng: 0x9E37_79B9_7F4A_7C15,
            evictable: 0,
        }
    }

    /// The entry of `key`, made if it is new and there is room (or a less busy unprotected
    /// entry to give way); None when the key is refused (counted).
    pub fn touch(&mut self, key: &K, now_ns: u64, protected: bool) -> Option<&mut V> {
        let (i, fresh) = match self.map.get_index_of(key) {
            Some(i) => (i, false),
            None => {
                if self.map.len() >= self.max && !self.evict_one() && !protected {
                    self.dropped += 1;
                    return None;
                }
                // A protected key is held even beyond the size: the configuration bounds them.
                let (i, _) = self.map.insert_full(
                    key.clone(),
                    Entry {
                        value: V::default(),
                        last_seen_ns: now_ns,
                        busy: 0,
                        protected,
                    },
                );
                (i, true)
            }
        };
        let (_, e) = self.map.get_index_mut(i)?;
        let was = !fresh && e.evictable();
        e.last_seen_ns = e.last_seen_ns.max(now_ns);
        e.busy = e.busy.saturating_add(1);
        e.protected |= protected;
        match (was, e.evictable()) {
            (false, true) => self.evictable += 1,
            (true, false) => self.evictable = self.evictable.saturating_sub(1),
            _ => {}
        }
        Some(&mut e.value)
    }

    /// Removes the least busy of a few unprotected entries sampled at random, if it was
    /// updated only once.
    fn evict_one(&mut self) -> bool {
        let n = self.map.len();
        if n == 0 || self.evictable == 0 {
            return false;
        }
        let mut victim: Option<(usize, u64)> = None;
        for _ in 0..EVICTION_SAMPLES.min(n) {
            // xorshift64: cheap, and the sample need not be unpredictable, only spread.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            // Lemire's range reduction: the high half of a 64x64 product, no division.
            let i = ((u128::from(self.rng) * n as u128) >> 64) as usize;
            let Some((_, e)) = self.map.get_index(i) else {
                continue;
            };
            if !e.protected && victim.is_none_or(|(_, b)| e.busy < b) {
                victim = Some((i, e.busy));
            }
        }
        let Some((i, _)) = victim.filter(|(_, busy)| *busy <= 1) else {
            return false;
        };
        if let Some((_, e)) = self.map.swap_remove_index(i) {
            self.gone.absorb(&e.value);
            self.evicted += 1;
            self.evictable = self.evictable.saturating_sub(1);
        }
        true
    }

    /// Removes the unprotected entries not seen for `idle_ns` before `now_ns`.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) {
        let before = self.map.len();
        let (gone, evictable) = (&mut self.gone, &mut self.evictable);
        *evictable = 0;
        self.map.retain(|_, e| {
            let keep = e.protected || now_ns.saturating_sub(e.last_seen_ns) <= idle_ns;
            if !keep {
                gone.absorb(&e.value);
            } else if e.evictable() {
                *evictable += 1;
            }
            keep
        });
        self.expired += (before - self.map.len()) as u64;
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|e| &e.value)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, e)| (k, &e.value))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.map.values_mut().map(|e| &mut e.value)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.map.iter_mut().map(|(k, e)| (k, &mut e.value))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn stats(&self) -> TableStats {
        TableStats {
            entries: self.map.len(),
            max_entries: self.max,
            dropped: self.dropped,
            evicted: self.evicted,
            expired: self.expired,
        }
    }
}

impl Absorb for u64 {}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize) -> Table<u32, u64> {
        Table::new(max)
    }

    #[test]
    fn a_full_table_keeps_its_busy_entries_under_a_flood_of_new_keys() {
        let mut t = table(100);
        for k in 0..50u32 {
            for _ in 0..100 {
                *t.touch(&k, 0, false).unwrap() += 1;
            }
        }
        for k in 1_000..201_000u32 {
            t.touch(&k, 0, false);
        }
        assert!((0..50u32).all(|k| t.contains_key(&k)), "{:?}", t.stats());
        assert_eq!(t.len(), 100);
        let s = t.stats();
        assert_eq!(
            s.evicted + s.dropped,
            200_000 - 50,
            "every new key counted: {s:?}"
        );
        assert!(
            s.evicted > s.dropped,
            "most new keys evict each other: {s:?}"
        );
    }

    #[test]
    fn a_full_table_of_busy_entries_refuses_new_keys_until_they_go_idle() {
        let mut t = table(4);
        for k in 0..4u32 {
            t.touch(&k, 0, false);
            t.touch(&k, 0, false);
        }
        assert!(t.touch(&9, 10, false).is_none());
        assert_eq!(t.stats().dropped, 1);
        t.expire(1_000, 100);
        assert!(t.touch(&9, 1_000, false).is_some());
    }

    #[test]
    fn protected_entries_are_never_pushed_out() {
        let mut t = table(10);
        for k in 0..5u32 {
            t.touch(&k, 0, true);
        }
        for k in 100..100_000u32 {
            t.touch(&k, 0, false);
        }
        assert!((0..5u32).all(|k| t.contains_key(&k)), "{:?}", t.stats());
    }

    #[test]
    fn a_protected_key_gets_in_even_when_the_table_is_full_of_protected_ones() {
        let mut t = table(3);
        for k in 0..3u32 {
            t.touch(&k, 0, true);
        }
        assert!(t.touch(&7, 0, false).is_none());
        assert_eq!(t.stats().dropped, 1);
        assert!(t.touch(&8, 0, true).is_some());
        assert!(t.contains_key(&8));
    }

    #[test]
    fn a_full_table_of_busy_entries_takes_a_key_again_once_one_goes_idle_and_its_successor_is_new()
    {
        // The count of evictable entries follows inserts, second updates and removals.
        let mut t = table(3);
        for k in 0..3u32 {
            t.touch(&k, 0, false);
        }
        t.touch(&0, 0, false);
        t.touch(&1, 0, false);
        assert_eq!(t.evictable, 1, "only key 2 was updated once");
        assert!(t.touch(&7, 10, false).is_some(), "7 takes 2's place");
        assert!(!t.contains_key(&2));
        assert_eq!(t.evictable, 1, "2 gone, 7 new");
        t.touch(&7, 10, false);
        assert_eq!(t.evictable, 0);
        assert!(
            t.touch(&8, 10, false).is_none(),
            "every entry busy: refused"
        );
        t.expire(1_000, 500);
        assert_eq!(t.evictable, 0, "all expired");
        assert!(t.is_empty());
    }

    #[test]
    fn idle_entries_expire_and_are_counted() {
        let mut t = table(10);
        t.touch(&1, 0, false);
        t.touch(&2, 5_000, false);
        t.touch(&3, 0, true);
        t.expire(10_000, 6_000);
        assert!(!t.contains_key(&1));
        assert!(t.contains_key(&2));
        assert!(t.contains_key(&3), "protected");
        assert_eq!(t.stats().expired, 1);
    }

    #[derive(Default)]
    struct Count(u64);
    impl Absorb for Count {
        fn absorb(&mut self, gone: &Self) {
            self.0 += gone.0;
        }
    }

    #[test]
    fn what_leaves_is_absorbed_into_gone() {
        let mut t: Table<u32, Count> = Table::new(2);
        t.touch(&1, 0, false).unwrap().0 = 5;
        t.touch(&2, 0, false).unwrap().0 = 7;
        t.touch(&3, 0, false).unwrap().0 = 1;
        t.expire(1_000_000, 10);
        assert_eq!(t.gone.0, 13, "evicted and expired alike");
        assert!(t.is_empty());
    }
}
