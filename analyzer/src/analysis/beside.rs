//! The report's second core: the DCQCN pass (pairing, rate bins, CNP times) and the hosts pass run on a
//! thread of their own, beside the loop that reads, decodes and counts.
//!
//! They took about a third of `report`'s time on the saturation benchmark, and the machines this runs on have
//! more than one core. The loop copies each record (its bytes and where it came from) into a batch; full
//! batches go to the thread over a bounded channel, which decodes them again and hands the frames to its
//! passes in the capture's order, so their results are those of the single loop. Memory stays a few batches
//! of at most [`BATCH_BYTES`] each, whatever the capture's length; when the passes fall behind, the loop waits.
//! Decoding twice costs less than what moves: the passes need the frame's every field, and an owned copy
//! of a decoded frame would be the record again.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{Scope, ScopedJoinHandle};

use roce_capture::read::Record;
use roce_capture::{Capture, LinkType};
use roce_core::decode::{Decoder, Frame};
use roce_core::passes::hosts::HostsPass;

use super::dcqcn::DcqcnPass;

/// A batch is sent once it holds this many records...
const BATCH_RECORDS: usize = 4096;
/// ...or this many bytes of them (full-size frames fill a batch with fewer records).
const BATCH_BYTES: usize = 1 << 20;
/// Batches waiting for the thread; with the one it works on and the one being filled, the memory it costs.
const QUEUED: usize = 2;

/// The passes that run beside the loop.
#[derive(Debug)]
pub(super) struct Passes {
    pub dcqcn: DcqcnPass,
    pub hosts: HostsPass,
    /// The ICRC is not checked again: only the statistics pass reads its verdict, on the loop's own frames.
    decoder: Decoder,
}

impl Passes {
    pub fn new(dcqcn: DcqcnPass, hosts: HostsPass, decoder: Decoder) -> Self {
        Passes {
            dcqcn,
            hosts,
            decoder: Decoder {
                check_icrc: false,
                ..decoder
            },
        }
    }

    fn batch(&mut self, b: &Batch) {
        for r in &b.records {
            let rec = Record {
                iface: r.iface,
                link: r.link,
                speed_bps: r.speed_bps,
                ts_ns: r.ts_ns,
                caplen: r.caplen,
                len: r.len,
                data: &b.bytes[r.start..r.start + r.caplen as usize],
                offset: 0,
            };
            let mut f = Frame::empty(r.number, &rec);
            self.decoder.decode_into(&mut f, rec.link);
            self.dcqcn.frame(&f);
            self.hosts.frame(&f);
        }
    }
}

fn take(slot: &Mutex<Option<Passes>>) -> Option<Passes> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// One record as the loop saw it; its bytes are in the batch's buffer from `start`.
#[derive(Debug, Clone, Copy)]
struct Copied {
    number: u64,
    ts_ns: u64,
    caplen: u32,
    len: u32,
    iface: u32,
    link: LinkType,
    speed_bps: Option<u64>,
    start: usize,
}

#[derive(Debug, Default)]
struct Batch {
    records: Vec<Copied>,
    bytes: Vec<u8>,
}

impl Batch {
    fn full(&self) -> bool {
        self.records.len() >= BATCH_RECORDS || self.bytes.len() >= BATCH_BYTES
    }

    fn clear(&mut self) {
        self.records.clear();
        self.bytes.clear();
    }
}

#[derive(Debug)]
enum Sink<'scope> {
    Thread {
        to: SyncSender<Batch>,
        /// Batches the thread is done with, to be filled again rather than allocated.
        back: Receiver<Batch>,
        handle: ScopedJoinHandle<'scope, Option<Passes>>,
    },
    /// No thread could be started: the batches are handed to the passes on the loop's own thread.
    Here(Box<Passes>),
}

/// The loop's end of the thread: [`Beside::frame`] for every frame, [`Beside::between`] when it asks.
#[derive(Debug)]
pub(super) struct Beside<'scope> {
    sink: Sink<'scope>,
    batch: Batch,
    /// Link type by tap: learnt at a pause, since a frame does not carry it.
    links: Vec<LinkType>,
    /// The last record's tap was new: its link type is filled in at the pause.
    unresolved: bool,
}

impl<'scope> Beside<'scope> {
    /// Starts the thread in `scope`; with `here`, the passes run on the caller's thread instead.
    pub fn start<'env>(scope: &'scope Scope<'scope, 'env>, passes: Passes, here: bool) -> Self {
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
                for batch in from_loop {
                    if let Some(p) = &mut passes {
                        p.batch(&batch);
                    }
                    // The loop may have finished and gone: then the batch is simply dropped.
                    let _ = to_loop.send(batch);
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

    fn with(sink: Sink<'scope>) -> Self {
        Beside {
            sink,
            batch: Batch::default(),
            links: Vec::new(),
            unresolved: false,
        }
    }

    /// Copies `f` into the batch; true when the loop must pause and call [`Beside::between`] (a frame of a
    /// tap whose link type is not known yet).
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) -> bool {
        let link = self.links.get(f.iface as usize).copied();
        let start = self.batch.bytes.len();
        self.batch.bytes.extend_from_slice(f.data);
        self.batch.records.push(Copied {
            number: f.number,
            ts_ns: f.ts_ns,
            caplen: f.data.len() as u32,
            len: f.len,
            iface: f.iface,
            link: link.unwrap_or(LinkType::ETHERNET),
            speed_bps: f.speed_bps,
            start,
        });
        if link.is_none() {
            self.unresolved = true;
            return true;
        }
        if self.batch.full() {
            self.send();
        }
        false
    }

    /// At a pause of the loop: learns the taps' link types.
    pub fn between(&mut self, capture: &Capture) {
        if !self.unresolved {
            return;
        }
        self.links = capture.taps().iter().map(|t| t.description.link).collect();
        if let Some(last) = self.batch.records.last_mut()
            && let Some(&link) = self.links.get(last.iface as usize)
        {
            last.link = link;
        }
        self.unresolved = false;
        if self.batch.full() {
            self.send();
        }
    }

    fn send(&mut self) {
        match &mut self.sink {
            Sink::Thread { to, back, .. } => {
                let mut next = back.try_recv().unwrap_or_default();
                next.clear();
                let full = std::mem::replace(&mut self.batch, next);
                // A thread that has gone has panicked: `finish` passes its panic on.
                let _ = to.send(full);
            }
            Sink::Here(passes) => {
                passes.batch(&self.batch);
                self.batch.clear();
            }
        }
    }

    /// Hands the last batch over and waits for the passes.
    pub fn finish(mut self) -> Passes {
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
