//! `decode`'s lines made on several threads and written in the capture's order.
//!
//! Making a frame's line (its numbers through `write!`) costs about four times what decoding the frame does:
//! on one thread `decode --json` ran at a fifth of the speed of `stats`. Each line depends on its frame alone
//! (and, for the text lines, on the first frame's time), so the lines of a run of records can be made
//! anywhere. A reading thread cuts the capture into chunks ([`Capture::read_batch`], as `stats` does); each
//! chunk goes whole to one of the workers, which decodes, filters and writes its lines into a buffer; the
//! calling thread writes the buffers in chunk order. The output is the same bytes as the loop's.
//!
//! Memory stays bounded: there are [`chunks_in_flight`] chunks in all, smaller the more workers there are
//! ([`chunk_size`]), and the reading thread takes one to fill only once its lines have been written out, so a worker that falls behind holds the others back rather
//! than letting finished buffers pile up. When the output fails (a closed pipe), this thread stops; the
//! workers' hand-offs then fail, they stop, and the reading thread after them: the capture is not read to
//! its end for nothing.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crossbeam_channel::{Receiver, Sender, bounded};
use roce_capture::{Capture, RecordBatch};
use roce_core::decode::{Decoder, Frame};
use roce_core::fanout::{CHUNK_BYTES, CHUNK_RECORDS};
use roce_core::filter::Filter;

use super::frames::{json_line, text_line};

/// Which line a frame gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// One JSON object per line ([`json_line`]).
    Json,
    /// One readable line, its time relative to the first frame's ([`text_line`]).
    Text,
}

/// A chunk of records and the buffer for their lines: the pipeline's unit, filled, made into lines,
/// written, and filled again, so that nothing is allocated once every chunk has grown to its size.
#[derive(Default)]
struct Chunk {
    batch: RecordBatch,
    lines: Vec<u8>,
}

/// A chunk on its way: its place in the capture, and the capture's first frame's time.
struct Work {
    seq: u64,
    first_ns: u64,
    chunk: Chunk,
}

/// Chunks in the pipeline at once, filled, waiting or written: two per worker keeps every worker busy
/// while the writer waits for the oldest, and two more cover the reading thread and the writer.
fn chunks_in_flight(workers: usize) -> usize {
    2 * workers + 2
}

/// The records and captured bytes a chunk holds at most: `stats`'s chunk on two workers, smaller on more,
/// so that the chunks in flight hold what two workers' do (about 21 MiB for `--json` on 128-byte records)
/// rather than growing with the cores: up to 512 workers, past which a chunk keeps 16 records or 4 KiB.
fn chunk_size(workers: usize) -> (usize, usize) {
    let two = chunks_in_flight(2);
    let share = |whole: usize, least: usize| (whole * two / chunks_in_flight(workers)).max(least);
    (
        share(CHUNK_RECORDS, 16).min(CHUNK_RECORDS),
        share(CHUNK_BYTES, 4 << 10).min(CHUNK_BYTES),
    )
}

/// The lines of the frames of `capture` that `filter` takes, at most `limit` of them, written to `out` in
/// the capture's order. On more than one thread and without a limit they are made by `threads` workers
/// besides this thread and the reading one ([`write_on_threads`]); else by the one loop, which stops reading
/// at the limit. `Ok` once the capture has ended or the limit is reached; the output's error, when writing
/// failed.
pub fn write(
    capture: &mut Capture,
    decoder: Decoder,
    filter: Option<&Filter>,
    style: Style,
    threads: usize,
    limit: Option<u64>,
    out: &mut impl Write,
) -> io::Result<()> {
    match limit {
        None if threads > 1 => write_on_threads(capture, decoder, filter, style, threads, out),
        _ => write_here(
            capture,
            decoder,
            filter,
            style,
            limit.unwrap_or(u64::MAX),
            out,
        ),
    }
}

/// [`write`] on `workers` threads besides this one and the reading thread.
fn write_on_threads(
    capture: &mut Capture,
    decoder: Decoder,
    filter: Option<&Filter>,
    style: Style,
    workers: usize,
    out: &mut impl Write,
) -> io::Result<()> {
    let workers = workers.max(1);
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(workers + 1)
        .thread_name(|i| format!("lines-{i}"))
        .build()
    {
        Ok(pool) => pool,
        // No threads to be had: the same lines from the one loop.
        Err(_) => return write_here(capture, decoder, filter, style, u64::MAX, out),
    };
    let in_flight = chunks_in_flight(workers);
    pool.in_place_scope(|scope| {
        let (free_tx, free_rx) = bounded::<Chunk>(in_flight);
        for _ in 0..in_flight {
            let _ = free_tx.send(Chunk::default());
        }
        let (work_tx, work_rx) = bounded::<Work>(in_flight);
        let (done_tx, done_rx) = bounded::<Work>(in_flight);
        let size = chunk_size(workers);
        scope.spawn(move |_| read_chunks(capture, size, &free_rx, &work_tx));
        for _ in 0..workers {
            let (work_rx, done_tx) = (work_rx.clone(), done_tx.clone());
            scope.spawn(move |_| {
                for mut w in work_rx {
                    let Chunk { batch, lines } = &mut w.chunk;
                    lines.clear();
                    lines_of(batch, w.first_ns, decoder, filter, style, lines);
                    // The writer has stopped: so does this worker.
                    if done_tx.send(w).is_err() {
                        break;
                    }
                }
            });
        }
        drop((work_rx, done_tx));
        write_in_order(&done_rx, &free_tx, out)
    })
}

/// The reading thread: fills free chunks until the capture ends or nobody takes them any more.
fn read_chunks(
    capture: &mut Capture,
    (records, bytes): (usize, usize),
    free: &Receiver<Chunk>,
    work: &Sender<Work>,
) {
    let mut first_ns = None;
    for seq in 0u64.. {
        let Ok(mut chunk) = free.recv() else {
            return;
        };
        chunk.batch.clear();
        if !capture.read_batch(&mut chunk.batch, records, bytes) {
            return;
        }
        let first = chunk.batch.get(0).map_or(0, |(_, r)| r.ts_ns);
        let first_ns = *first_ns.get_or_insert(first);
        if work
            .send(Work {
                seq,
                first_ns,
                chunk,
            })
            .is_err()
        {
            return;
        }
    }
}

/// This thread: each chunk's lines once every chunk before it is written; the chunk back to the reader.
fn write_in_order(
    done: &Receiver<Work>,
    free: &Sender<Chunk>,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    for w in done {
        waiting.insert(w.seq, w.chunk);
        while let Some(chunk) = waiting.remove(&next) {
            out.write_all(&chunk.lines)?;
            next += 1;
            // The reader may have finished and gone.
            let _ = free.try_send(chunk);
        }
    }
    Ok(())
}

/// The lines of one chunk's frames that `filter` takes.
fn lines_of(
    batch: &RecordBatch,
    first_ns: u64,
    decoder: Decoder,
    filter: Option<&Filter>,
    style: Style,
    lines: &mut Vec<u8>,
) {
    for (number, rec) in batch.iter() {
        let mut f = Frame::empty(number, &rec);
        decoder.decode_into(&mut f, rec.link);
        // Writing into a Vec cannot fail.
        let _ = line(lines, &f, first_ns, filter, style);
    }
}

/// `f`'s line, when `filter` takes it.
#[inline]
fn line(
    out: &mut impl Write,
    f: &Frame<'_>,
    first_ns: u64,
    filter: Option<&Filter>,
    style: Style,
) -> io::Result<()> {
    if filter.is_some_and(|flt| !flt.matches(f)) {
        return Ok(());
    }
    match style {
        Style::Json => json_line(out, f),
        Style::Text => text_line(out, f, first_ns),
    }
}

/// [`write`] on this thread alone: at most `limit` lines, and no frame read after the last of them.
fn write_here(
    capture: &mut Capture,
    decoder: Decoder,
    filter: Option<&Filter>,
    style: Style,
    limit: u64,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut frames = roce_core::frames::Frames::new(capture, decoder);
    let mut first_ns = None;
    let mut printed = 0u64;
    while printed < limit {
        let Some(f) = frames.next_frame() else {
            break;
        };
        let first = *first_ns.get_or_insert(f.ts_ns);
        if filter.is_some_and(|flt| !flt.matches(&f)) {
            continue;
        }
        printed += 1;
        line(out, &f, first, None, style)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_capture::write::PcapWriter;

    /// A capture of `records` frames over many chunks: RoCE writes of a few QPs, some CE-marked, and every
    /// third frame a PFC pause (which the filter takes).
    fn capture(records: u32) -> Capture {
        use testkit::frames::{bth, pfc_frame, v4_frame};
        let mut w = PcapWriter::new(Vec::new(), roce_capture::LinkType::ETHERNET, 65535)
            .expect("a pcap header");
        for i in 0..records {
            let frame = if i % 3 == 0 {
                pfc_frame([2, 0, 0, 0, 0, 1], 3, (i % 65_536) as u16)
            } else {
                let op = roce_wire::Opcode::RC_RDMA_WRITE_MIDDLE;
                let ext = Default::default();
                v4_frame(
                    1,
                    2,
                    (i % 4) as u8,
                    bth(op, 0x100 + i % 5, i),
                    ext,
                    &[7; 64],
                )
            };
            let at = u64::from(i) * 997 + 1_000_000_000;
            w.write_packet(at, &frame, frame.len() as u32)
                .expect("a record");
        }
        let bytes = w.into_inner().expect("the pcap bytes");
        Capture::from_reader("t.pcap", Box::new(std::io::Cursor::new(bytes))).expect("a capture")
    }

    fn lines(threads: usize, style: Style, filter: Option<&Filter>, limit: Option<u64>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = capture(20_000);
        write(
            &mut c,
            Decoder::default(),
            filter,
            style,
            threads,
            limit,
            &mut out,
        )
        .expect("written");
        out
    }

    #[test]
    fn the_lines_are_those_of_one_thread_in_order() {
        let filter: Filter = "kind == pfc".parse().expect("a filter");
        for style in [Style::Text, Style::Json] {
            for f in [None, Some(&filter)] {
                let one = lines(1, style, f, None);
                let count = one.iter().filter(|&&b| b == b'\n').count();
                assert_eq!(
                    count,
                    if f.is_some() { 6_667 } else { 20_000 },
                    "{style:?} {f:?}"
                );
                for n in [2, 3, 5] {
                    assert!(
                        lines(n, style, f, None) == one,
                        "{style:?} {f:?} on {n} threads"
                    );
                }
            }
        }
        let limited = lines(3, Style::Json, None, Some(7));
        assert_eq!(limited.iter().filter(|&&b| b == b'\n').count(), 7);
    }

    /// A sink that takes `room` bytes and then fails, as a closed pipe does.
    struct Closes {
        room: usize,
    }

    impl Write for Closes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

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

    #[test]
    fn a_closed_output_stops_the_read_with_its_error() {
        let mut c = capture(200_000);
        let mut out = Closes { room: 10_000 };
        let e = write(
            &mut c,
            Decoder::default(),
            None,
            Style::Json,
            2,
            None,
            &mut out,
        )
        .expect_err("the output closed");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        // The reader stopped a few chunks after the failure, far from the capture's end.
        let mut left = 0;
        while c.next_record().is_some() {
            left += 1;
        }
        assert!(left > 100_000, "only {left} records were left unread");
    }
}
