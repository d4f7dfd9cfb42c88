//! Chunks of a capture's records made into something on N worker threads, and taken in the capture's order on
//! the calling thread: for work whose every part depends on its chunk alone (a frame's line, a frame's
//! decoded summary), followed by work that needs the capture's order (writing the lines, matching copies).
//!
//! A reading thread cuts the capture into chunks ([`Capture::read_batch`]) and, for each, notes what the
//! capture says at that point (the `note`: the first frame's time, the taps known so far); a worker makes the
//! chunk into its `made` value; the calling thread takes the chunks in order. The chunks circulate: there
//! are [`chunks_in_flight`] of them in all, each with its records' buffer and its `made` value, and the
//! reading thread takes one to fill only once the calling thread is done with it, so a worker that falls
//! behind holds the others back rather than letting finished chunks pile up, and nothing is allocated once
//! every chunk has grown to its size. The chunks are smaller the more workers there are ([`chunk_size`]), so
//! the memory in flight does not grow with the cores.
//!
//! When the calling thread stops with an error (a closed pipe), the workers' hand-offs fail, they stop, and
//! the reading thread after them: the capture is not read to its end for nothing.

use std::collections::BTreeMap;

use crossbeam_channel::{Receiver, Sender, bounded};
use roce_capture::{Capture, RecordBatch};

use crate::fanout::{CHUNK_BYTES, CHUNK_RECORDS};

/// Chunks in the pipeline at once, filled, waiting or taken: two per worker keeps every worker busy while the
/// calling thread waits for the oldest, and two more cover the reading thread and the calling one.
pub fn chunks_in_flight(workers: usize) -> usize {
    2 * workers.max(1) + 2
}

/// The records and captured bytes a chunk holds at most: `stats`' chunk on two workers, smaller on more, so
/// that the chunks in flight hold what two workers' do, up to 512 workers (past which a chunk keeps 16
/// records or 4 KiB).
pub fn chunk_size(workers: usize) -> (usize, usize) {
    let two = chunks_in_flight(2);
    let share = |whole: usize, least: usize| (whole * two / chunks_in_flight(workers)).max(least);
    (
        share(CHUNK_RECORDS, 16).min(CHUNK_RECORDS),
        share(CHUNK_BYTES, 4 << 10).min(CHUNK_BYTES),
    )
}

/// One chunk: its records, what the reading thread noted of the capture after reading them, and what a
/// worker made of them.
#[derive(Debug, Default)]
pub struct Chunk<N, T> {
    /// The records, in the capture's order.
    pub batch: RecordBatch,
    /// What the reading thread noted after reading them.
    pub note: N,
    /// What a worker made of them: the value of an earlier chunk, reused, which the worker clears.
    pub made: T,
}

/// Reads `capture` to its end in chunks; `note` runs on the reading thread after each chunk is read, `make`
/// on one of `workers` threads for each chunk, and `take` on this thread for each chunk in the capture's
/// order. Stops at `take`'s first error and returns it. With no workers, or without threads to be had,
/// everything runs here, chunk after chunk, with the same results.
pub fn run<N, T, E>(
    capture: &mut Capture,
    workers: usize,
    mut note: impl FnMut(&Capture, &RecordBatch) -> N + Send,
    make: impl Fn(&RecordBatch, &N, &mut T) + Sync,
    mut take: impl FnMut(&mut Chunk<N, T>) -> Result<(), E>,
) -> Result<(), E>
where
    N: Default + Send,
    T: Default + Send,
{
    let size = chunk_size(workers.max(1));
    let pool = match workers {
        0 => None,
        _ => rayon::ThreadPoolBuilder::new()
            .num_threads(workers + 1)
            .thread_name(|i| format!("chunks-{i}"))
            .build()
            .ok(),
    };
    let Some(pool) = pool else {
        let mut chunk = Chunk::default();
        while fill(capture, size, &mut chunk, &mut note) {
            make(&chunk.batch, &chunk.note, &mut chunk.made);
            take(&mut chunk)?;
        }
        return Ok(());
    };
    let in_flight = chunks_in_flight(workers);
    let make = &make;
    pool.in_place_scope(|scope| {
        let (free_tx, free_rx) = bounded::<Chunk<N, T>>(in_flight);
        for _ in 0..in_flight {
            let _ = free_tx.send(Chunk::default());
        }
        let (work_tx, work_rx) = bounded::<(u64, Chunk<N, T>)>(in_flight);
        let (done_tx, done_rx) = bounded::<(u64, Chunk<N, T>)>(in_flight);
        scope.spawn(move |_| read_chunks(capture, size, note, &free_rx, &work_tx));
        for _ in 0..workers {
            let (work_rx, done_tx) = (work_rx.clone(), done_tx.clone());
            scope.spawn(move |_| {
                for (seq, mut chunk) in work_rx {
                    make(&chunk.batch, &chunk.note, &mut chunk.made);
                    // This thread has stopped taking: so does this worker.
                    if done_tx.send((seq, chunk)).is_err() {
                        break;
                    }
                }
            });
        }
        drop((work_rx, done_tx));
        take_in_order(&done_rx, &free_tx, take)
    })
}

/// Fills `chunk` with the capture's next records and notes the capture then; false once it has ended.
fn fill<N, T>(
    capture: &mut Capture,
    (records, bytes): (usize, usize),
    chunk: &mut Chunk<N, T>,
    note: &mut impl FnMut(&Capture, &RecordBatch) -> N,
) -> bool {
    chunk.batch.clear();
    if !capture.read_batch(&mut chunk.batch, records, bytes) {
        return false;
    }
    chunk.note = note(capture, &chunk.batch);
    true
}

/// The reading thread: fills free chunks until the capture ends or nobody takes them any more.
fn read_chunks<N, T>(
    capture: &mut Capture,
    size: (usize, usize),
    mut note: impl FnMut(&Capture, &RecordBatch) -> N,
    free: &Receiver<Chunk<N, T>>,
    work: &Sender<(u64, Chunk<N, T>)>,
) {
    for seq in 0u64.. {
        let Ok(mut chunk) = free.recv() else {
            return;
        };
        if !fill(capture, size, &mut chunk, &mut note) || work.send((seq, chunk)).is_err() {
            return;
        }
    }
}

/// This thread: each chunk once every chunk before it was taken; then the chunk back to the reading thread.
fn take_in_order<N, T, E>(
    done: &Receiver<(u64, Chunk<N, T>)>,
    free: &Sender<Chunk<N, T>>,
    mut take: impl FnMut(&mut Chunk<N, T>) -> Result<(), E>,
) -> Result<(), E> {
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    for (seq, chunk) in done {
        waiting.insert(seq, chunk);
        while let Some(mut chunk) = waiting.remove(&next) {
            take(&mut chunk)?;
            next += 1;
            // The reading thread may have finished and gone.
            let _ = free.try_send(chunk);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunks_in_flight_hold_no_more_on_many_workers_than_on_two() {
        let whole = |n: usize| {
            let (records, bytes) = chunk_size(n);
            (records * chunks_in_flight(n), bytes * chunks_in_flight(n))
        };
        assert_eq!(chunk_size(2), (CHUNK_RECORDS, CHUNK_BYTES));
        for n in [3, 8, 64, 512] {
            assert!(
                whole(n).0 <= whole(2).0 && whole(n).1 <= whole(2).1,
                "{n} workers"
            );
        }
        assert!(
            whole(64).0 * 10 > whole(2).0 * 9,
            "64 workers use the budget"
        );
    }
}
