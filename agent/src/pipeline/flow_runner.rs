//! Where a capture's time-ordered work runs: the flow table ([`FlowSide`]) and the views
//! ([`Views`]) on this thread, or as a pipeline of threads (frames parsed here -> the flow
//! table -> the views), each handed batches of steps in order, so the result is the same to
//! the bit either way. Batches go round: the parsing side fills one, the flow thread writes
//! what it said of each step beside it, the views read both and send the batch back empty
//! (no allocation, and no page faults of fresh memory, per batch).

use crate::pipeline::flow_side::{FlowSide, Step, Told};
use crate::pipeline::views_side::Views;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Steps handed on at a time (one channel message). Each hand-over may wake a thread, and on
/// a machine of two cores the four threads share them; the prefetches ahead stop at a
/// batch's end. 4,096 rather than 1,024 (interleaved medians of nine, two CPUs): the bench's
/// mixed capture 213 to 198 ms, small frames 184 to 175, large 294 to 288; 2,048 and 8,192
/// no better.
const BATCH: usize = 4096;

/// Batches in flight between two threads: enough to ride out a burst of ticks, few enough to
/// keep memory small (16,384 steps of 128 bytes: 2 MiB a channel; peak RSS unchanged within
/// a megabyte on the bench's captures).
const BATCHES_IN_FLIGHT: usize = 4;

/// A batch of steps and what the flow table said of each.
type Passed = (Vec<Step>, Vec<Told>);

/// The flow table and the views, here or on threads of their own.
pub enum Runner {
    Here(Box<(FlowSide, Views)>),
    Threads {
        batch: Vec<Step>,
        tx: SyncSender<Vec<Step>>,
        /// Emptied batches coming back from the views for reuse.
        spare: Receiver<Vec<Step>>,
        flows: JoinHandle<Option<FlowSide>>,
        views: JoinHandle<Views>,
    },
}

impl Runner {
    /// On threads when `parallel` and they can be started, else here.
    pub fn new(side: FlowSide, views: Views, parallel: bool) -> Runner {
        if !parallel {
            return Runner::Here(Box::new((side, views)));
        }
        let (tx, rx) = sync_channel::<Vec<Step>>(BATCHES_IN_FLIGHT);
        let (told_tx, told_rx) = sync_channel::<Passed>(BATCHES_IN_FLIGHT);
        let (spare_tx, spare) = sync_channel::<Vec<Step>>(2 * BATCHES_IN_FLIGHT + 2);
        let (told_spare_tx, told_spare) = sync_channel::<Vec<Told>>(2 * BATCHES_IN_FLIGHT + 2);
        // Each side goes to its thread once the thread runs, so a thread that cannot be
        // started leaves both here, and the analysis runs on this thread instead.
        let (side_tx, side_rx) = sync_channel::<FlowSide>(1);
        let (views_tx, views_rx) = sync_channel::<Views>(1);
        let flows = std::thread::Builder::new()
            .name("analyze-flows".into())
            .spawn(move || {
                let side = side_rx.recv().ok()?;
                Some(run_flows(side, rx, told_tx, told_spare))
            });
        let Ok(flows) = flows else {
            return Runner::Here(Box::new((side, views)));
        };
        let viewer = std::thread::Builder::new()
            .name("analyze-views".into())
            .spawn(move || {
                let views = views_rx
                    .recv()
                    .expect("the views are sent before the steps");
                run_views(views, told_rx, spare_tx, told_spare_tx)
            });
        let Ok(viewer) = viewer else {
            // The flow thread waits for its side: without it, it ends.
            drop(side_tx);
            let _ = flows.join();
            return Runner::Here(Box::new((side, views)));
        };
        // Both threads wait for their state first; they are running, so the sends succeed.
        let (Ok(()), Ok(())) = (side_tx.send(side), views_tx.send(views)) else {
            unreachable!("a started thread waits for its state");
        };
        Runner::Threads {
            batch: Vec::with_capacity(BATCH),
            tx,
            spare,
            flows,
            views: viewer,
        }
    }

    /// Hands over one frame's step, which `fill` writes in place (in the batch on its way to
    /// the flow thread: the step is never copied on this side).
    pub fn push_with(&mut self, fill: impl FnOnce(&mut Step)) {
        match self {
            Runner::Here(both) => {
                let mut s = Step::At(0);
                fill(&mut s);
                let told = both.0.step(&s);
                both.1.step(&s, &told);
            }
            Runner::Threads {
                batch, tx, spare, ..
            } => {
                batch.push(Step::At(0));
                if let Some(s) = batch.last_mut() {
                    fill(s);
                }
                if batch.len() == BATCH {
                    let next = spare
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                    let full = std::mem::replace(batch, next);
                    // A send fails only if the thread is gone (it panicked): `finish`
                    // reports that.
                    let _ = tx.send(full);
                }
            }
        }
    }

    /// Every step handed over, the flow side and the views back.
    pub fn finish(self) -> (FlowSide, Views) {
        match self {
            Runner::Here(both) => *both,
            Runner::Threads {
                batch,
                tx,
                flows,
                views,
                ..
            } => {
                let _ = tx.send(batch);
                drop(tx);
                let side = match flows.join() {
                    Ok(Some(side)) => side,
                    Ok(None) => unreachable!("the flow thread got its side before any step"),
                    Err(p) => std::panic::resume_unwind(p),
                };
                let views = views
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                (side, views)
            }
        }
    }
}

/// The flow thread: each batch through the flow table, then on to the views with what the
/// table said of each step.
fn run_flows(
    mut side: FlowSide,
    rx: Receiver<Vec<Step>>,
    tx: SyncSender<Passed>,
    spare: Receiver<Vec<Told>>,
) -> FlowSide {
    while let Ok(batch) = rx.recv() {
        let mut told = spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        side.run_batch(&batch, &mut told);
        if tx.send((batch, told)).is_err() {
            break; // the views are gone (a panic): `finish` reports it
        }
    }
    side
}

/// The views' thread: each batch in order, then both vectors back for reuse.
fn run_views(
    mut views: Views,
    rx: Receiver<Passed>,
    spare: SyncSender<Vec<Step>>,
    told_spare: SyncSender<Vec<Told>>,
) -> Views {
    while let Ok((mut batch, told)) = rx.recv() {
        views.run_batch(&batch, &told);
        batch.clear();
        // Back for reuse (dropped when enough spares wait).
        let _ = spare.try_send(batch);
        let _ = told_spare.try_send(told);
    }
    views
}
