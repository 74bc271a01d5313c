//! RoCE traffic over capture time, for the charts of `analyze --html`: bytes by operation
//! class, packets, CE-marked packets and CNPs per time bucket. Memory stays bounded whatever
//! the capture's length: buckets start at 10 µs and double in width (merging pairs) whenever
//! more than [`MAX_BUCKETS`] would be needed.

use agent_common::opcode::{class, OpClass};
use agent_common::PacketRecord;
use serde::Serialize;

/// Buckets kept at most (the charts' resolution).
pub const MAX_BUCKETS: usize = 512;

/// One time bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Bucket {
    /// Wire bytes by operation class ([`OpClass`] order).
    pub bytes_by_class: [u64; OpClass::COUNT],
    pub packets: u64,
    pub ce: u64,
    pub cnp: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    start_ns: Option<u64>,
    width_ns: u64,
    buckets: Vec<Bucket>,
    /// The last bucket counted into and its offsets `[lo, hi)`: packets come in time order,
    /// so most find their bucket without a division.
    last: (u64, u64, usize),
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline {
            start_ns: None,
            width_ns: 10_000,
            buckets: Vec::new(),
            last: (0, 0, 0),
        }
    }

    /// Counts one RoCE packet of `len` wire bytes at `ts_ns`.
    pub fn record(&mut self, info: &PacketRecord, len: u64, ts_ns: u64) {
        let start = *self.start_ns.get_or_insert(ts_ns);
        // Out of order (a capture's timestamps may step back): the first bucket.
        let off = ts_ns.saturating_sub(start);
        let (lo, hi, last) = self.last;
        let i = if (lo..hi).contains(&off) {
            last
        } else {
            let mut i = (off / self.width_ns) as usize;
            while i >= MAX_BUCKETS {
                self.coarsen();
                i = (off / self.width_ns) as usize;
            }
            if self.buckets.len() <= i {
                self.buckets.resize(i + 1, Bucket::default());
            }
            let lo = i as u64 * self.width_ns;
            self.last = (lo, lo + self.width_ns, i);
            i
        };
        let b = &mut self.buckets[i];
        b.bytes_by_class[class(info.opcode()) as usize % OpClass::COUNT] += len;
        b.packets += 1;
        if info.is_ce() {
            b.ce += 1;
        }
        if info.is_cnp() {
            b.cnp += 1;
        }
    }

    /// Doubles the bucket width, merging neighbours.
    fn coarsen(&mut self) {
        self.width_ns *= 2;
        self.last = (0, 0, 0);
        let merged: Vec<Bucket> = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut m = pair[0];
                if let Some(b) = pair.get(1) {
                    agent_common::sum::add_all(&mut m.bytes_by_class, &b.bytes_by_class);
                    m.packets += b.packets;
                    m.ce += b.ce;
                    m.cnp += b.cnp;
                }
                m
            })
            .collect();
        self.buckets = merged;
    }

    /// Seconds per bucket.
    pub fn bucket_seconds(&self) -> f64 {
        self.width_ns as f64 / 1e9
    }

    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The time of the first bucket's start (the first RoCE packet).
    pub fn start_ns(&self) -> Option<u64> {
        self.start_ns
    }

    /// RoCE packets and CE-marked ones in the buckets that overlap `[from_ns, to_ns)`.
    pub fn packets_and_ce(&self, from_ns: u64, to_ns: u64) -> (u64, u64) {
        let Some(start) = self.start_ns else {
            return (0, 0);
        };
        let (lo, hi) = (from_ns.saturating_sub(start), to_ns.saturating_sub(start));
        let w = self.width_ns.max(1);
        let first = (lo / w) as usize;
        let last = (hi.saturating_sub(1) / w) as usize;
        self.buckets
            .iter()
            .enumerate()
            .skip(first)
            .take_while(|(i, _)| *i <= last)
            .fold((0, 0), |(p, c), (_, b)| (p + b.packets, c + b.ce))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(opcode: u8, ecn: u8) -> PacketRecord {
        let ip = |s: &str| s.parse().unwrap();
        let mut r =
            rocemon_testkit::frames::Roce::new(ip("10.0.0.1"), ip("10.0.0.2"), 1, 1, opcode);
        r.ecn = ecn;
        let f = r.frame();
        let rec = agent_common::parse_record(
            &agent_common::SliceReader(&f),
            agent_common::LinkType::Ethernet,
        );
        assert!(rec.is_roce());
        rec
    }

    #[test]
    fn buckets_count_and_stay_bounded() {
        let mut t = Timeline::new();
        let write = info(0x0A, 3);
        let cnp = info(0x81, 0);
        // One packet every 10 ms for 100 s: 10,000 ms-buckets would be needed.
        for k in 0..10_000u64 {
            t.record(&write, 100, k * 10_000_000);
        }
        t.record(&cnp, 60, 5_000_000_000);
        assert!(t.buckets().len() <= MAX_BUCKETS);
        let total: u64 = t.buckets().iter().map(|b| b.packets).sum();
        assert_eq!(total, 10_001);
        let bytes: u64 = t
            .buckets()
            .iter()
            .map(|b| b.bytes_by_class[OpClass::Write as usize])
            .sum();
        assert_eq!(bytes, 1_000_000);
        assert_eq!(t.buckets().iter().map(|b| b.ce).sum::<u64>(), 10_000);
        assert_eq!(t.buckets().iter().map(|b| b.cnp).sum::<u64>(), 1);
        assert!(t.bucket_seconds() >= 100.0 / MAX_BUCKETS as f64);
    }
}
