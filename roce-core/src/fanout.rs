//! The read-then-decode loop of [`crate::frames`] over several threads: one reads the capture, the others
//! decode and fold the frames, each owning the state of some keys.
//!
//! The reading thread finds each record's owner ([`Sharder`]), copies the record into that owner's batch and
//! hands full batches over a bounded channel; each owner decodes its records in capture order, so that the
//! state of a key sees the same frames in the same order as one thread alone would. Whatever needs every
//! record in order (the capture's span, its largest gap) is done by the reading thread as it reads, before
//! the record is handed on. Batches go back to the reading thread once used, so that the copying allocates
//! nothing after the first few.

use crossbeam_channel::{Receiver, Sender, bounded};
use roce_capture::{Capture, LinkType, Record};

use crate::decode::{Decoder, Frame};
use crate::shard::Sharder;

/// Records per batch: enough that handing one over costs nothing next to decoding it, few enough that the
/// owners start early and the batches in flight stay small (a few MiB in all).
const BATCH_RECORDS: usize = 2048;
/// Batches an owner may have waiting: the reading thread runs ahead of a slow owner only this far.
const QUEUE: usize = 4;

/// Where one record sits in a batch's bytes, and what it was.
#[derive(Debug, Clone, Copy)]
struct Meta {
    number: u64,
    iface: u32,
    link: LinkType,
    speed_bps: Option<u64>,
    ts_ns: u64,
    caplen: u32,
    len: u32,
    offset: u64,
    start: usize,
}

/// Records for one owner, copied out of the reader's buffer.
#[derive(Debug, Default)]
struct Batch {
    data: Vec<u8>,
    meta: Vec<Meta>,
}

impl Batch {
    fn push(&mut self, number: u64, rec: &Record<'_>) {
        self.meta.push(Meta {
            number,
            iface: rec.iface,
            link: rec.link,
            speed_bps: rec.speed_bps,
            ts_ns: rec.ts_ns,
            caplen: rec.caplen,
            len: rec.len,
            offset: rec.offset,
            start: self.data.len(),
        });
        self.data.extend_from_slice(rec.data);
    }

    fn clear(&mut self) {
        self.data.clear();
        self.meta.clear();
    }
}

/// Reads `capture` to its end, handing each record to `on_record` on this thread (with its number in the
/// merged stream), and then each decoded frame to `each` on the thread that owns its key (by `sharder`), with
/// that owner's state from `states` (one per owner). Returns the states.
pub fn run<S: Send>(
    capture: &mut Capture,
    decoder: Decoder,
    sharder: Sharder,
    mut states: Vec<S>,
    mut on_record: impl FnMut(u64, &Record<'_>),
    each: impl Fn(&mut S, &Frame<'_>) + Sync,
) -> Vec<S> {
    assert_eq!(
        states.len(),
        sharder.shards(),
        "one state per owner of the sharder"
    );
    let each = &each;
    std::thread::scope(|scope| {
        let (back_tx, back_rx): (Sender<Batch>, Receiver<Batch>) =
            bounded(states.len() * (QUEUE + 2));
        let mut inboxes = Vec::new();
        let mut handles = Vec::new();
        for mut state in states.drain(..) {
            let (tx, rx) = bounded::<Batch>(QUEUE);
            let back = back_tx.clone();
            inboxes.push(tx);
            handles.push(scope.spawn(move || {
                for mut batch in rx {
                    for m in &batch.meta {
                        let rec = Record {
                            iface: m.iface,
                            link: m.link,
                            speed_bps: m.speed_bps,
                            ts_ns: m.ts_ns,
                            caplen: m.caplen,
                            len: m.len,
                            data: &batch.data[m.start..m.start + m.caplen as usize],
                            offset: m.offset,
                        };
                        let mut f = Frame::empty(m.number, &rec);
                        decoder.decode_into(&mut f, rec.link);
                        each(&mut state, &f);
                    }
                    batch.clear();
                    // The reading thread may have stopped taking batches back: then this one is dropped.
                    let _ = back.try_send(batch);
                }
                state
            }));
        }
        drop(back_tx);
        let mut filling: Vec<Batch> = (0..inboxes.len()).map(|_| Batch::default()).collect();
        while let Some((number, rec)) = capture.next_record() {
            on_record(number, &rec);
            let owner = sharder.shard(&rec);
            let batch = &mut filling[owner];
            batch.push(number, &rec);
            if batch.meta.len() >= BATCH_RECORDS {
                let fresh = back_rx.try_recv().unwrap_or_default();
                let full = std::mem::replace(batch, fresh);
                // An owner that is gone panicked; its panic is raised when it is joined below.
                let _ = inboxes[owner].send(full);
            }
        }
        for (batch, inbox) in filling.into_iter().zip(&inboxes) {
            if !batch.meta.is_empty() {
                let _ = inbox.send(batch);
            }
        }
        drop(inboxes);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
