//! Values by name, written as a JSON object in name order (what a `BTreeMap` writes), held in
//! a fixed array: a flow's NAKs, operation classes and messages are three such objects, and
//! as maps they were three heap allocations per flow (with their page faults, about a third
//! of building the report of 10,000 flows).

use serde::ser::{Serialize, SerializeMap, Serializer};

/// `N` values by name, in name order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Named<T, const N: usize>([(&'static str, T); N]);

impl<T, const N: usize> Named<T, N> {
    /// The values, sorted by name.
    pub fn new(mut items: [(&'static str, T); N]) -> Self {
        items.sort_by_key(|(name, _)| *name);
        Named(items)
    }

    /// The values in name order, given `order` ([`NameOrder::of`] their names): what
    /// [`Named::new`] makes, without sorting (the report builds three of these per flow, for
    /// a quarter million flows: the order is found once).
    pub fn in_order(items: [(&'static str, T); N], order: &NameOrder<N>) -> Self
    where
        T: Copy,
    {
        Named(order.0.map(|i| items[i]))
    }

    /// Name and value, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &T)> {
        self.0.iter().map(|(k, v)| (*k, v))
    }

    /// The values, in name order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|(_, v)| v)
    }
}

/// The name order of `N` names: where each comes in [`Named`]'s order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameOrder<const N: usize>([usize; N]);

impl<const N: usize> NameOrder<N> {
    /// The indices of `names` sorted by name.
    pub fn of(names: [&str; N]) -> Self {
        let mut order: [usize; N] = std::array::from_fn(|i| i);
        order.sort_by_key(|&i| names[i]);
        NameOrder(order)
    }
}

impl<T: Serialize, const N: usize> Serialize for Named<T, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(N))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn writes_what_a_btree_map_writes() {
        let items = [("write", 3u64), ("ack", 1), ("send", 0), ("atomic", 7)];
        let map: BTreeMap<&str, u64> = items.iter().copied().collect();
        let named = Named::new(items);
        assert_eq!(
            serde_json::to_string(&named).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        assert_eq!(
            named.values().copied().collect::<Vec<_>>(),
            vec![1, 7, 0, 3]
        );
        assert_eq!(
            named.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec!["ack", "atomic", "send", "write"]
        );
    }

    #[test]
    fn in_order_makes_what_new_makes() {
        let items = [("write", 3u64), ("ack", 1), ("send", 0), ("atomic", 7)];
        let order = NameOrder::of(items.map(|(k, _)| k));
        assert_eq!(Named::in_order(items, &order), Named::new(items));
    }
}
