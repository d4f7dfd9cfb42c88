//! A read's second core: the passes that need every frame in order ([`InOrder`]: for the report, the DCQCN
//! pass with its pairing, rate bins and CNP times, and the hosts pass) run on a thread of their own, beside
//! the loop that reads, decodes and counts.
//!
//! They took about a third of `report`'s time on the saturation benchmark, and the machines this runs on have
//! more than one core. The loop decodes each frame once; what these passes read of it, its [`Brief`], goes
//! into a batch, and full batches go to the thread over a bounded channel, which hands the briefs to its
//! passes in the capture's order, so their results are those of the single loop. A brief is a fixed-size
//! copy of a few fields (152 bytes on x86-64): the thread neither gets the record's bytes nor decodes them
//! again (which it did before, a fifth of its time). Memory stays a few batches of [`BATCH_FRAMES`] briefs
//! each, whatever the capture's length; when the passes fall behind, the loop waits.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{Scope, ScopedJoinHandle};

use roce_core::decode::Frame;
use roce_core::passes::brief::Brief;
use roce_core::passes::hosts::HostsPass;

use super::InOrder;
use super::dcqcn::DcqcnPass;

/// A batch is sent once it holds this many frames: few enough that a batch stays under a MiB, many enough
/// that the channel is crossed rarely.
const BATCH_FRAMES: usize = 4096;
/// Batches waiting for the thread; with the one it works on and the one being filled, the memory it costs
/// (about 5 MiB at most). Two were too few where the loop, this thread and the read-ahead thread share two
/// cores: whichever the scheduler set aside left the others without input or without room, and the cores
/// idled for a sixth of the read of a gzip file. With eight the other one always has work
/// (`report` on that file: 0.78 to 0.72 s; BENCHMARKS.md).
const QUEUED: usize = 8;

/// The report's passes beside the loop.
#[derive(Debug)]
pub(super) struct Passes {
    pub dcqcn: DcqcnPass,
    pub hosts: HostsPass,
}

impl InOrder for Passes {
    #[inline]
    fn brief(&mut self, b: &Brief) {
        self.dcqcn.frame(b);
        self.hosts.frame(b);
    }
}

fn batch<P: InOrder>(passes: &mut P, b: &Batch) {
    for f in &b.frames {
        passes.brief(f);
    }
}

fn take<P>(slot: &Mutex<Option<P>>) -> Option<P> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Frames in brief, in the capture's order.
#[derive(Debug, Default)]
struct Batch {
    frames: Vec<Brief>,
}

impl Batch {
    fn full(&self) -> bool {
        self.frames.len() >= BATCH_FRAMES
    }
}

enum Sink<'scope, P> {
    Thread {
        to: SyncSender<Batch>,
        /// Batches the thread is done with, to be filled again rather than allocated.
        back: Receiver<Batch>,
        handle: ScopedJoinHandle<'scope, Option<P>>,
    },
    /// No thread could be started: the batches are handed to the passes on the loop's own thread.
    Here(Box<P>),
}

/// The loop's end of the thread: [`Beside::frame`] for every frame.
pub(super) struct Beside<'scope, P> {
    sink: Sink<'scope, P>,
    batch: Batch,
}

impl<'scope, P: InOrder + 'scope> Beside<'scope, P> {
    /// Starts the thread in `scope`; with `here`, the passes run on the caller's thread instead.
    pub fn start<'env>(scope: &'scope Scope<'scope, 'env>, passes: P, here: bool) -> Self {
        if here {
            return Beside::with(Sink::Here(Box::new(passes)));
        }
        let (to, from_loop) = mpsc::sync_channel::<Batch>(QUEUED);
        let (to_loop, back) = mpsc::channel::<Batch>();
        // The passes go to the thread through `slot`, and stay here when no thread can be started.
        let slot = Arc::new(Mutex::new(Some(passes)));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("analysis".to_owned())
            .spawn_scoped(scope, move || {
                let mut passes = take(&theirs);
                for b in from_loop {
                    if let Some(p) = &mut passes {
                        batch(p, &b);
                    }
                    // The loop may have finished and gone: then the batch is simply dropped.
                    let _ = to_loop.send(b);
                }
                passes
            });
        let sink = match spawned {
            Ok(handle) => Sink::Thread { to, back, handle },
            Err(_) => {
                Sink::Here(Box::new(take(&slot).unwrap_or_else(|| {
                    unreachable!("a thread never started took the passes")
                })))
            }
        };
        Beside::with(sink)
    }

    fn with(sink: Sink<'scope, P>) -> Self {
        Beside {
            sink,
            batch: Batch::default(),
        }
    }

    /// Adds `f`'s brief to the batch, and sends the batch when it is full.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.batch.frames.push(Brief::of(f));
        if self.batch.full() {
            self.send();
        }
    }

    fn send(&mut self) {
        match &mut self.sink {
            Sink::Thread { to, back, .. } => {
                let mut next = back.try_recv().unwrap_or_default();
                next.frames.clear();
                let full = std::mem::replace(&mut self.batch, next);
                // A thread that has gone has panicked: `finish` passes its panic on.
                let _ = to.send(full);
            }
            Sink::Here(passes) => {
                batch(passes.as_mut(), &self.batch);
                self.batch.frames.clear();
            }
        }
    }

    /// Hands the last batch over and waits for the passes.
    pub fn finish(mut self) -> P {
        self.send();
        match self.sink {
            Sink::Thread { to, handle, .. } => {
                drop(to);
                let passes = handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                passes.unwrap_or_else(|| {
                    unreachable!("the thread was given the passes as it started")
                })
            }
            Sink::Here(passes) => *passes,
        }
    }
}
