//! Reads the kernel's pause ring ([`agent_common::pause_ring`]): the PFC and PAUSE frames each
//! CPU took since the last read, in time order, and how many the ring no longer held.

use agent_common::pause_ring::{
    slot_of, PauseEvent, MAP_PAUSE_HEAD, MAP_PAUSE_RING, PAUSE_RING_SLOTS,
};
use anyhow::{Context, Result};
use aya::maps::PerCpuArray;
use aya::Ebpf;

/// What a read found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PauseRead {
    /// The frames since the last read, oldest first.
    pub events: Vec<PauseEvent>,
    /// Frames the ring overwrote before this read (the pause time of this poll is then the
    /// quanta's bound).
    pub lost: u64,
}

/// Where each CPU's ring was read up to.
#[derive(Debug, Default)]
pub struct PauseRingReader {
    /// Per CPU: the next frame to read (None before the first read: what the ring held then
    /// is from before this agent).
    next: Option<Vec<u64>>,
}

impl PauseRingReader {
    /// The frames since the last read (none at the first). An object without the ring (a
    /// build from before it, under `--ab`) gives none.
    pub fn read(&mut self, ebpf: &Ebpf) -> Result<PauseRead> {
        let (Some(heads), Some(ring)) = (ebpf.map(MAP_PAUSE_HEAD), ebpf.map(MAP_PAUSE_RING)) else {
            return Ok(PauseRead::default());
        };
        let heads: PerCpuArray<_, u64> = PerCpuArray::try_from(heads)?;
        let ring: PerCpuArray<_, PauseEvent> = PerCpuArray::try_from(ring)?;
        let now: Vec<u64> = heads.get(&0, 0).context("read PAUSE_HEAD")?.to_vec();
        let Some(next) = self.next.replace(now.clone()) else {
            return Ok(PauseRead::default());
        };
        let mut out = PauseRead::default();
        // Per CPU, the frames [from, head) the ring still holds.
        let mut wanted: Vec<(usize, u64, u64)> = Vec::new();
        for (cpu, &head) in now.iter().enumerate() {
            let last = next.get(cpu).copied().unwrap_or(head).min(head);
            let from = last.max(head.saturating_sub(u64::from(PAUSE_RING_SLOTS)));
            out.lost += from - last;
            if head > from {
                wanted.push((cpu, from, head));
            }
        }
        if wanted.is_empty() {
            return Ok(out);
        }
        // One read of a slot gives every CPU's value.
        let mut slots: Vec<u32> = wanted
            .iter()
            .flat_map(|&(_, from, head)| (from..head).map(slot_of))
            .collect();
        slots.sort_unstable();
        slots.dedup();
        let mut values = Vec::with_capacity(slots.len());
        for &s in &slots {
            values.push(ring.get(&s, 0).context("read PAUSE_RING")?);
        }
        // A CPU that wrapped past a slot while it was read: those frames are lost.
        let after: Vec<u64> = heads.get(&0, 0).context("read PAUSE_HEAD")?.to_vec();
        for (cpu, from, head) in wanted {
            let overwritten = after
                .get(cpu)
                .copied()
                .unwrap_or(head)
                .saturating_sub(u64::from(PAUSE_RING_SLOTS));
            for n in from..head {
                if n < overwritten {
                    out.lost += 1;
                    continue;
                }
                let v = slots
                    .binary_search(&slot_of(n))
                    .ok()
                    .and_then(|i| values.get(i))
                    .and_then(|v| v.get(cpu));
                if let Some(v) = v {
                    out.events.push(*v);
                }
            }
        }
        out.events.sort_by_key(|e| e.ts_ns);
        Ok(out)
    }
}
