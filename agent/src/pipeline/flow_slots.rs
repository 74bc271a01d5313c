//! The flow table's storage: the flows in one dense vector, found through a hash index of
//! small slots (each flow's hash and position: 16 bytes).
//!
//! Why not one map of keys to entries: an entry is about 450 bytes (totals, rates, detector
//! state), so 10,000 flows span megabytes and every packet's update misses the cache. A
//! lookup has to compare the key inside the entry (`IndexMap` does: that compare was two
//! thirds of the flow thread's time on a 10,000-flow capture), and a table holding whole keys
//! (56-byte slots) misses in its own slots instead. Here the slots of 10,000 flows take
//! 256 KiB, and a slot's full 64-bit hash lets [`FlowSlots::prefetch_hashed`] find a flow's
//! entry without touching it: the flow thread asks for the entry's cache lines a few packets
//! ahead of its update (the lookup itself then compares the key in a cached entry), and for
//! the slot itself a few packets before that ([`FlowSlots::prefetch_slot`]: next to the
//! entries' traffic the slots do not stay cached). Order and removal are `IndexMap`'s: insertion order,
//! `swap_remove_at` moves the last entry into the hole, `retain` keeps the order.

use super::FlowEntry;
use crate::pipeline::prefetch::{prefetch, prefetch_line};
use agent_common::FlowKey;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// A flow's key in the table: the interface index and the flow key.
pub type SlotKey = (usize, FlowKey);

/// A slot: the flow's hash and its position in the entries.
type Slot = (u64, usize);

#[derive(Default)]
pub struct FlowSlots {
    index: HashTable<Slot>,
    entries: Vec<FlowEntry>,
    /// Each entry's key hash, at its position: a removal finds the slots of the entry it
    /// drops and of the entry it moves without reading either key (a flood into a full
    /// table removes an eighth of it at a time; reading and hashing each victim's key and
    /// each moved entry's was a cache miss and a hash per removal).
    hashes: Vec<u64>,
    hasher: rustc_hash::FxBuildHasher,
}

impl std::fmt::Debug for FlowSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter()).finish()
    }
}

impl FlowSlots {
    /// A key's hash, which the `*_hashed` calls take (computed once per packet).
    pub fn hash(&self, k: &SlotKey) -> u64 {
        self.hasher.hash_one(k)
    }

    /// The position of a flow, comparing keys in the entries.
    fn position(&self, hash: u64, k: &SlotKey) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |&(h, i)| {
                h == hash && (entries[i].iface, entries[i].key) == *k
            })
            .map(|&(_, i)| i)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The key hash kept for position `i`.
    #[cfg(test)]
    fn hash_at(&self, i: usize) -> Option<u64> {
        self.hashes.get(i).copied()
    }

    #[cfg(test)]
    pub fn contains_key(&self, k: &SlotKey) -> bool {
        self.position(self.hash(k), k).is_some()
    }

    pub fn get(&self, k: &SlotKey) -> Option<&FlowEntry> {
        self.position(self.hash(k), k).map(|i| &self.entries[i])
    }

    pub fn get_mut(&mut self, k: &SlotKey) -> Option<&mut FlowEntry> {
        self.position(self.hash(k), k).map(|i| &mut self.entries[i])
    }

    /// The position of a flow (as [`FlowSlots::values`] yields it); `hash` is the key's
    /// [`FlowSlots::hash`] (the flow table hashes a packet's key once).
    pub fn position_hashed(&self, hash: u64, k: &SlotKey) -> Option<usize> {
        debug_assert_eq!(hash, self.hash(k));
        self.position(hash, k)
    }

    /// Adds a flow that is not in the table (its key hashing to `hash`) at the end; returns
    /// its position.
    pub fn push_new_hashed(&mut self, hash: u64, e: FlowEntry) -> usize {
        debug_assert_eq!(hash, self.hash(&(e.iface, e.key)));
        debug_assert!(self.position(hash, &(e.iface, e.key)).is_none());
        let i = self.entries.len();
        self.entries.push(e);
        self.hashes.push(hash);
        self.index.insert_unique(hash, (hash, i), |&(h, _)| h);
        i
    }

    /// The flow at position `i`, which must be held.
    pub fn at_mut(&mut self, i: usize) -> &mut FlowEntry {
        &mut self.entries[i]
    }

    /// Removes the flow at position `i` as [`FlowSlots::swap_remove_at`] does, once `seen`
    /// has read it in place, and drops it there: a caller that keeps a few of its figures
    /// does not copy the whole entry out (a flood's eviction copied each victim's 450
    /// bytes for four totals). Returns whether `i` was held.
    pub fn swap_remove_seen(&mut self, i: usize, seen: impl FnOnce(&FlowEntry)) -> bool {
        let Some(e) = self.entries.get(i) else {
            return false;
        };
        seen(e);
        self.swap_remove_at(i).is_some()
    }

    /// Removes the flow at position `i` (as [`FlowSlots::values`] yields it); the last entry
    /// takes its place. Removing several by position goes from the highest down.
    pub fn swap_remove_at(&mut self, i: usize) -> Option<FlowEntry> {
        let hash = *self.hashes.get(i)?;
        if let Ok(slot) = self.index.find_entry(hash, |&(_, at)| at == i) {
            slot.remove();
        }
        let e = self.entries.swap_remove(i);
        self.hashes.swap_remove(i);
        if let Some(&moved) = self.hashes.get(i) {
            let last = self.entries.len();
            if let Some(slot) = self.index.find_mut(moved, |&(_, at)| at == last) {
                slot.1 = i;
            }
        }
        Some(e)
    }

    /// Keeps the flows `keep` says yes to, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(&FlowEntry) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|e| keep(e));
        if self.entries.len() != before {
            self.index.clear();
            self.hashes.clear();
            for i in 0..self.entries.len() {
                let e = &self.entries[i];
                let hash = self.hasher.hash_one((e.iface, e.key));
                self.hashes.push(hash);
                self.index.insert_unique(hash, (hash, i), |&(h, _)| h);
            }
        }
    }

    /// The flow at position `i`.
    pub fn at(&self, i: usize) -> Option<&FlowEntry> {
        self.entries.get(i)
    }

    pub fn values(&self) -> std::slice::Iter<'_, FlowEntry> {
        self.entries.iter()
    }

    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, FlowEntry> {
        self.entries.iter_mut()
    }

    /// Asks the CPU for the cache lines a packet's update of this flow touches (its key, its
    /// totals, its place on the active list), so that the update, a few packets later, does
    /// not wait for memory; `hash` is the key's [`FlowSlots::hash`]. Matches on the 64-bit
    /// hash alone (touching no entry); a flow not in the table, or a rare hash collision, only
    /// prefetches nothing or the wrong lines. Reads the flow's slot in the index: ask for it
    /// first ([`FlowSlots::prefetch_slot`]) a few packets earlier still.
    #[inline]
    pub fn prefetch_hashed(&self, hash: u64) {
        let Some(&(_, i)) = self.index.find(hash, |&(h, _)| h == hash) else {
            return;
        };
        let e = &self.entries[i];
        prefetch(&e.stats);
        prefetch_line(std::ptr::addr_of!(e.active).cast());
        prefetch_line(std::ptr::addr_of!(e.key).cast());
    }

    /// Asks for the index slot a hash most likely sits in, without reading it: the first slot
    /// whose control byte matches (the comparison never looks at the slot). The index of
    /// 10,000 flows is larger than what stays cached beside their entries, and this load was
    /// the flow thread's largest single stall when [`FlowSlots::prefetch_hashed`] met it.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        if let Some(slot) = self.index.find(hash, |_| true) {
            prefetch_line(std::ptr::from_ref(slot).cast());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_common::FlowStats;
    use proptest::prelude::*;

    fn entry(iface: usize, qp: u32) -> FlowEntry {
        let key = FlowKey {
            ip_version: 4,
            dest_qp: qp,
            ..FlowKey::default()
        };
        FlowEntry {
            iface,
            key,
            stats: FlowStats {
                packets: u64::from(qp) + 1,
                ..FlowStats::default()
            },
            rate_bytes: 0.0,
            rate_packets: 0.0,
            rate_ce: 0.0,
            rate_cnp: 0.0,
            elephant: Default::default(),
            prev_bytes: 0,
            prev_packets: 0,
            prev_ce: 0,
            prev_cnp: 0,
            ticked: false,
            generation: 0,
            baselined: false,
            active: false,
            rate_clock_s: 0.0,
            export: None,
            lives: None,
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(usize, u32),
        Remove(usize, u32),
        /// The same through [`FlowSlots::swap_remove_seen`].
        RemoveSeen(usize, u32),
        /// Keeps the flows whose QP is not a multiple of the value.
        Retain(u32),
        Prefetch(usize, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..2usize, 0..40u32).prop_map(|(i, q)| Op::Insert(i, q)),
            2 => (0..2usize, 0..40u32).prop_map(|(i, q)| Op::Remove(i, q)),
            2 => (0..2usize, 0..40u32).prop_map(|(i, q)| Op::RemoveSeen(i, q)),
            1 => (2..7u32).prop_map(Op::Retain),
            1 => (0..2usize, 0..40u32).prop_map(|(i, q)| Op::Prefetch(i, q)),
        ]
    }

    proptest! {
        /// Against a plain vector of keys with `IndexMap`'s order rules: the same flows in
        /// the same order, each found with its own entry, removed ones gone.
        #[test]
        fn slots_behave_as_an_ordered_map(ops in prop::collection::vec(op(), 0..300)) {
            let mut slots = FlowSlots::default();
            let mut model: Vec<(usize, u32)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(i, q) => {
                        let k = (i, entry(i, q).key);
                        let h = slots.hash(&k);
                        let at = match slots.position_hashed(h, &k) {
                            Some(at) => at,
                            None => slots.push_new_hashed(h, entry(i, q)),
                        };
                        prop_assert_eq!(slots.at_mut(at).key.dest_qp, q);
                        if !model.contains(&(i, q)) {
                            model.push((i, q));
                        }
                    }
                    Op::Remove(i, q) => {
                        // By the position the flow holds in the model (the order checked
                        // below is the table's), or past the end.
                        let pos = model.iter().position(|&k| k == (i, q));
                        let got = slots.swap_remove_at(pos.unwrap_or(model.len()));
                        prop_assert_eq!(got.map(|e| (e.iface, e.key.dest_qp)), pos.map(|_| (i, q)));
                        if let Some(p) = pos {
                            model.swap_remove(p);
                        }
                    }
                    Op::RemoveSeen(i, q) => {
                        let pos = model.iter().position(|&k| k == (i, q));
                        let mut seen = None;
                        let held = slots.swap_remove_seen(pos.unwrap_or(model.len()), |e| {
                            seen = Some((e.iface, e.key.dest_qp));
                        });
                        prop_assert_eq!(held, pos.is_some());
                        prop_assert_eq!(seen, pos.map(|_| (i, q)));
                        if let Some(p) = pos {
                            model.swap_remove(p);
                        }
                    }
                    Op::Retain(m) => {
                        slots.retain(|e| e.key.dest_qp % m != 0);
                        model.retain(|&(_, q)| q % m != 0);
                    }
                    Op::Prefetch(i, q) => {
                        let h = slots.hash(&(i, entry(i, q).key));
                        slots.prefetch_slot(h);
                        slots.prefetch_hashed(h);
                    }
                }
                let order: Vec<(usize, u32)> =
                    slots.values().map(|e| (e.iface, e.key.dest_qp)).collect();
                prop_assert_eq!(&order, &model);
                prop_assert_eq!(slots.len(), model.len());
                for (at, e) in slots.values().enumerate() {
                    prop_assert_eq!(slots.hash_at(at), Some(slots.hash(&(e.iface, e.key))));
                }
                prop_assert_eq!(slots.hash_at(slots.len()), None);
                for &(i, q) in &model {
                    let e = slots.get(&(i, entry(i, q).key));
                    prop_assert!(e.is_some_and(|e| e.iface == i && e.stats.packets == u64::from(q) + 1));
                }
            }
            for q in 0..40 {
                for i in 0..2 {
                    prop_assert_eq!(slots.contains_key(&(i, entry(i, q).key)), model.contains(&(i, q)));
                }
            }
        }
    }
}
