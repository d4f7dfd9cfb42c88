//! The read-then-decode loop of [`crate::frames`] over several threads, each owning the state of some keys.
//!
//! The reading thread does as little as it can per record: it copies runs of records out of the capture
//! ([`Capture::read_batch`], which reads a file's plain packet records at their fixed offsets) into chunks of
//! a few thousand, finds each record's owner ([`Sharder`]) while the chunk is still in its cache, and hands
//! every chunk, shared, to every owner. Each owner then decodes and folds only its own records, chunk after
//! chunk, so that the state of a key sees the same frames in the same order as one thread alone would. What
//! needs every record in order (the capture's span, its largest gap) is folded by the first owner from the
//! chunk's records, also in order. So the decoding, which is most of the work, is spread over every thread,
//! and what is done once for all is cutting the capture into chunks and naming each record's owner.
//!
//! The owners were first found by whichever owner reached a chunk first. That thread read every record of
//! the chunk from the memory of the core that had copied it, and then the other owners read their records
//! again: on two cores, finding owners took a tenth of the CPU time of `stats`. Found by the thread that has
//! just written the chunk, the owner of each record costs a few instructions.
//!
//! Memory stays bounded whatever the thread count: an owner has at most a few chunks waiting, every owner
//! shares the same chunks, and a chunk holds at most [`CHUNK_RECORDS`] records and about [`CHUNK_BYTES`]
//! bytes; a chunk every owner is done with goes back to the reading thread to be filled again.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, bounded};
use roce_capture::{Capture, RecordBatch};

use crate::decode::{Decoder, Frame};
use crate::shard::Sharder;

/// Records per chunk: enough that handing one over costs nothing next to decoding it, few enough that the
/// owners start early.
pub const CHUNK_RECORDS: usize = 4096;
/// Captured bytes per chunk (it closes at the record that passes this), so that a capture of whole 9 KB
/// frames keeps the chunks in flight to a few MiB too.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Chunks an owner may have waiting: the reading thread runs ahead of the slowest owner only this far.
const QUEUE: usize = 3;

/// Records of the capture in order, and each record's owner.
#[derive(Debug, Default)]
struct Chunk {
    batch: RecordBatch,
    owners: Vec<u16>,
}

impl Chunk {
    /// Fills the chunk with the capture's next records and names their owners; `false` at the capture's end.
    fn fill(&mut self, capture: &mut Capture, sharder: &Sharder) -> bool {
        self.batch.clear();
        self.owners.clear();
        if !capture.read_batch(&mut self.batch, CHUNK_RECORDS, CHUNK_BYTES) {
            return false;
        }
        self.owners
            .extend(self.batch.iter().map(|(_, rec)| sharder.shard(&rec) as u16));
        true
    }
}

/// The most owners a [`Sharder`] may have here (each record's owner is kept in 16 bits).
pub const MAX_OWNERS: usize = u16::MAX as usize;

/// What a thread that owns some keys does with its share of a chunk.
pub trait Owner: Send {
    /// What it hands on after each chunk, to the one consumer that needs every frame in order (see
    /// [`run`]'s `tail`); `()` where there is none.
    type Out: Send;
    /// Every record of a chunk, in capture order: called on the first owner only.
    fn whole(&mut self, _batch: &RecordBatch) {}
    /// One of its own frames, the record at `index` in its chunk.
    fn frame(&mut self, index: usize, f: &Frame<'_>);
    /// Done with a chunk: what goes to the tail.
    fn chunk_done(&mut self) -> Self::Out;
}

/// Reads `capture` to its end and hands each decoded frame to the owner of its key (by `sharder`), one
/// thread per state of `states`. After each chunk each owner's [`Owner::chunk_done`] goes to `tail`, when
/// there is one: on a thread of its own it gets, chunk after chunk in capture order, every owner's output
/// in owner order, and merges them as it needs. `between` runs on the reading thread after each chunk is
/// read (for progress, or to look at the capture's taps). Returns the states in owner order.
pub fn run<S: Owner>(
    capture: &mut Capture,
    decoder: Decoder,
    sharder: Sharder,
    states: Vec<S>,
    tail: Option<&mut (dyn FnMut(Vec<S::Out>) + Send)>,
    mut between: impl FnMut(&Capture, &RecordBatch),
) -> Vec<S> {
    let owners = states.len();
    assert!(
        owners == sharder.shards() && owners <= MAX_OWNERS,
        "one state per owner of the sharder"
    );
    let sharder = &sharder;
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(owners + usize::from(tail.is_some()))
        .thread_name(|i| format!("owner-{i}"))
        .build()
    {
        Ok(pool) => pool,
        // No threads to be had: the same work, one owner after the other, on this thread.
        Err(_) => return on_this_thread(capture, decoder, sharder, states, tail, between),
    };
    let mut slots: Vec<Option<S>> = states.into_iter().map(Some).collect();
    pool.in_place_scope(|scope| {
        let (back_tx, back_rx): (Sender<Chunk>, Receiver<Chunk>) = bounded(QUEUE + 2);
        let mut inboxes = Vec::with_capacity(owners);
        let mut outs = Vec::with_capacity(owners);
        let mut tail_ends = Vec::with_capacity(owners);
        for _ in 0..owners {
            let (tx, rx) = bounded::<S::Out>(QUEUE);
            outs.push(tail.is_some().then_some(tx));
            tail_ends.push(rx);
        }
        if let Some(tail) = tail {
            scope.spawn(move |_| {
                // Each owner sends one output per chunk, in chunk order: one from each, in turn, is a chunk.
                'chunks: loop {
                    let mut chunk = Vec::with_capacity(tail_ends.len());
                    for rx in &tail_ends {
                        match rx.recv() {
                            Ok(out) => chunk.push(out),
                            Err(_) => break 'chunks,
                        }
                    }
                    tail(chunk);
                }
            });
        }
        for ((me, slot), out) in slots.iter_mut().enumerate().zip(outs) {
            let (tx, rx) = bounded::<Arc<Chunk>>(QUEUE);
            inboxes.push(tx);
            let back = back_tx.clone();
            scope.spawn(move |_| {
                let Some(mut state) = slot.take() else {
                    return;
                };
                for chunk in rx {
                    fold(&chunk, me, &mut state, decoder);
                    let done = state.chunk_done();
                    if let Some(out) = &out {
                        // A tail that has gone panicked; the scope raises its panic.
                        let _ = out.send(done);
                    }
                    // The last owner done with a chunk sends it back to be filled again; the reading thread
                    // may have stopped taking them, and then it is dropped.
                    if let Some(used) = Arc::into_inner(chunk) {
                        let _ = back.try_send(used);
                    }
                }
                *slot = Some(state);
            });
        }
        drop(back_tx);
        loop {
            let mut chunk = back_rx.try_recv().unwrap_or_default();
            if !chunk.fill(capture, sharder) {
                break;
            }
            between(capture, &chunk.batch);
            let chunk = Arc::new(chunk);
            for inbox in &inboxes {
                // An owner that is gone panicked; the scope raises its panic once every owner has ended.
                let _ = inbox.send(Arc::clone(&chunk));
            }
        }
    });
    slots.into_iter().flatten().collect()
}

/// Owner `me`'s part of one chunk.
fn fold<S: Owner>(chunk: &Chunk, me: usize, state: &mut S, decoder: Decoder) {
    let batch = &chunk.batch;
    if me == 0 {
        state.whole(batch);
    }
    for (i, &owner) in chunk.owners.iter().enumerate() {
        if usize::from(owner) != me {
            continue;
        }
        let Some((number, rec)) = batch.get(i) else {
            continue;
        };
        let mut f = Frame::empty(number, &rec);
        decoder.decode_into(&mut f, rec.link);
        state.frame(i, &f);
    }
}

/// [`run`] without threads: every chunk to every owner in turn, on the calling thread.
fn on_this_thread<S: Owner>(
    capture: &mut Capture,
    decoder: Decoder,
    sharder: &Sharder,
    mut states: Vec<S>,
    mut tail: Option<&mut (dyn FnMut(Vec<S::Out>) + Send)>,
    mut between: impl FnMut(&Capture, &RecordBatch),
) -> Vec<S> {
    let mut chunk = Chunk::default();
    while chunk.fill(capture, sharder) {
        between(capture, &chunk.batch);
        let mut outs = Vec::with_capacity(states.len());
        for (me, state) in states.iter_mut().enumerate() {
            fold(&chunk, me, state, decoder);
            outs.push(state.chunk_done());
        }
        if let Some(tail) = &mut tail {
            tail(outs);
        }
    }
    states
}
