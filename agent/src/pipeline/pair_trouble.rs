//! What went wrong between which hosts, millisecond by millisecond: the trouble a slow step
//! is blamed on must be the job's own (CE marks, loss recovery, lossy-class packets between
//! its hosts), never another tenant's on the same link at the same time. Only milliseconds
//! with trouble are kept (a clean capture keeps nothing), for the last minute, and for at
//! most [`MAX_PAIRS`] host pairs and [`MAX_EVENTS`] entries (beyond them trouble is counted
//! as unattributed, never blamed on a job).

use crate::detect::slow_steps::Trouble;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// A host: its IP version and address.
pub type Host = (u8, [u8; 16]);

/// Host pairs with an index of their own.
const MAX_PAIRS: usize = 4_096;
/// Entries (a host pair's trouble in one millisecond) kept at most.
const MAX_EVENTS: usize = 1 << 20;

/// A host pair's trouble in one millisecond: 24 bytes (a [`Trouble`]'s four 64-bit counts
/// made entries of 48, and a capture with CE marks spread over many hosts keeps one per
/// marked packet). The counts saturate (a millisecond carries far fewer packets).
#[derive(Clone, Copy, Debug, Default)]
struct Event {
    ms: u64,
    ce: u32,
    recoveries: u32,
    lossy: u32,
    pair: u16,
}

impl Event {
    fn new(ms: u64, pair: u16, t: &Trouble) -> Event {
        let mut e = Event {
            ms,
            pair,
            ..Event::default()
        };
        e.add(t);
        e
    }

    fn add(&mut self, t: &Trouble) {
        let add = |a: &mut u32, b: u64| *a = a.saturating_add(u32::try_from(b).unwrap_or(u32::MAX));
        add(&mut self.ce, t.ce);
        add(&mut self.recoveries, t.recoveries);
        add(&mut self.lossy, t.lossy);
    }

    fn trouble(&self) -> Trouble {
        Trouble {
            packets: 0,
            ce: u64::from(self.ce),
            recoveries: u64::from(self.recoveries),
            lossy: u64::from(self.lossy),
        }
    }
}

/// The store.
#[derive(Clone, Debug, Default)]
pub struct PairTrouble {
    pairs: FxHashMap<(Host, Host), u16>,
    pair_of: Vec<(Host, Host)>,
    /// A host pair's trouble in one millisecond, in time order.
    events: VecDeque<Event>,
    /// Trouble of pairs beyond [`MAX_PAIRS`], or pushed out by [`MAX_EVENTS`].
    pub unattributed: u64,
}

impl PairTrouble {
    /// Notes trouble `t` from `src` to `dst` in millisecond `ms`; entries older than
    /// `window_ms` before the newest leave.
    pub fn note(&mut self, ms: u64, src: Host, dst: Host, t: &Trouble, window_ms: u64) {
        if t.ce + t.recoveries + t.lossy == 0 {
            return;
        }
        let next = self.pair_of.len();
        let pair = match self.pairs.get(&(src, dst)) {
            Some(&p) => p,
            None if next < MAX_PAIRS => {
                self.pairs.insert((src, dst), next as u16);
                self.pair_of.push((src, dst));
                next as u16
            }
            None => {
                self.unattributed += 1;
                return;
            }
        };
        match self.events.back_mut() {
            Some(e) if e.ms == ms && e.pair == pair => e.add(t),
            Some(e) if e.ms > ms => {
                // Out of order (a capture's timestamps may step back): in its place.
                let i = self.events.partition_point(|e| e.ms <= ms);
                self.events.insert(i, Event::new(ms, pair, t));
            }
            _ => self.events.push_back(Event::new(ms, pair, t)),
        }
        let newest = self.events.back().map_or(ms, |e| e.ms);
        while self
            .events
            .front()
            .is_some_and(|e| e.ms + window_ms < newest)
        {
            self.events.pop_front();
        }
        if self.events.len() > MAX_EVENTS {
            self.events.pop_front();
            self.unattributed += 1;
        }
    }

    /// Which pairs run between two hosts of `hosts` (index by pair).
    pub fn pairs_among(&self, hosts: &[Host]) -> Vec<bool> {
        self.pair_of
            .iter()
            .map(|(a, b)| hosts.contains(a) && hosts.contains(b))
            .collect()
    }

    /// The trouble of the pairs `among` picks in milliseconds `[from_ms, to_ms)` (packets
    /// left at 0: only trouble is kept).
    pub fn within(&self, from_ms: u64, to_ms: u64, among: &[bool]) -> Trouble {
        let i = self.events.partition_point(|e| e.ms < from_ms);
        let mut out = Trouble::default();
        for e in self
            .events
            .range(i..)
            .take_while(|e| e.ms < to_ms)
            .filter(|e| among.get(usize::from(e.pair)).copied().unwrap_or(false))
        {
            out.add(&e.trouble());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(last: u8) -> Host {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 0, 0, last]);
        (4, a)
    }

    fn ce(n: u64) -> Trouble {
        Trouble {
            packets: n,
            ce: n,
            ..Trouble::default()
        }
    }

    #[test]
    fn only_the_pairs_among_the_hosts_count() {
        let mut s = PairTrouble::default();
        s.note(10, h(1), h(2), &ce(3), 60_000);
        s.note(10, h(3), h(4), &ce(5), 60_000);
        s.note(11, h(2), h(1), &ce(1), 60_000);
        let among = s.pairs_among(&[h(1), h(2)]);
        assert_eq!(s.within(0, 100, &among).ce, 4);
        assert_eq!(s.within(11, 12, &among).ce, 1);
        let other = s.pairs_among(&[h(3), h(4)]);
        assert_eq!(s.within(0, 100, &other).ce, 5);
    }

    #[test]
    fn clean_packets_keep_nothing() {
        let mut s = PairTrouble::default();
        let clean = Trouble {
            packets: 1,
            ..Trouble::default()
        };
        s.note(1, h(1), h(2), &clean, 60_000);
        assert!(s.events.is_empty());
    }

    #[test]
    fn entries_older_than_the_window_leave() {
        let mut s = PairTrouble::default();
        s.note(1, h(1), h(2), &ce(1), 100);
        s.note(500, h(1), h(2), &ce(1), 100);
        let among = s.pairs_among(&[h(1), h(2)]);
        assert_eq!(s.within(0, 1_000, &among).ce, 1);
    }

    #[test]
    fn an_out_of_order_entry_is_kept_in_its_place() {
        let mut s = PairTrouble::default();
        s.note(5, h(1), h(2), &ce(1), 60_000);
        s.note(3, h(1), h(2), &ce(2), 60_000);
        let among = s.pairs_among(&[h(1), h(2)]);
        assert_eq!(s.within(3, 4, &among).ce, 2);
        assert_eq!(s.within(4, 6, &among).ce, 1);
    }

    #[test]
    fn an_entry_is_24_bytes_and_its_counts_saturate() {
        assert_eq!(std::mem::size_of::<Event>(), 24);
        let mut e = Event::new(1, 0, &ce(u64::from(u32::MAX) - 1));
        e.add(&ce(5));
        assert_eq!(e.trouble().ce, u64::from(u32::MAX));
    }
}
