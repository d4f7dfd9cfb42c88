//! `decode`'s lines made on several threads and written in the capture's order.
//!
//! Making a frame's line (its numbers through `write!`) costs about four times what decoding the frame does:
//! on one thread `decode --json` ran at a fifth of the speed of `stats`. Each line depends on its frame alone
//! (and, for the text lines, on the first frame's time), so the lines of a chunk of records can be made on
//! any thread: [`roce_core::ordered`] hands each chunk to a worker, which decodes, filters and writes its
//! lines into the chunk's buffer, and this thread writes the buffers in the capture's order. The output is
//! the same bytes as the loop's, memory stays bounded whatever the threads, and a closed output stops the
//! read.

use std::io::{self, Write};

use roce_capture::{Capture, RecordBatch};
use roce_core::decode::{Decoder, Frame};
use roce_core::filter::Filter;
use roce_core::ordered;

use super::frames::{json_line, text_line};

/// Which line a frame gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// One JSON object per line ([`json_line`]).
    Json,
    /// One readable line, its time relative to the first frame's ([`text_line`]).
    Text,
}

/// The lines of the frames of `capture` that `filter` takes, at most `limit` of them, written to `out` in
/// the capture's order. On more than one thread and without a limit they are made by `threads` workers
/// besides this thread and the reading one; else by the one loop, which stops reading at the limit. `Ok`
/// once the capture has ended or the limit is reached; the output's error, when writing failed.
pub fn write(
    capture: &mut Capture,
    decoder: Decoder,
    filter: Option<&Filter>,
    style: Style,
    threads: usize,
    limit: Option<u64>,
    out: &mut impl Write,
) -> io::Result<()> {
    if limit.is_some() || threads <= 1 {
        return write_here(
            capture,
            decoder,
            filter,
            style,
            limit.unwrap_or(u64::MAX),
            out,
        );
    }
    let mut first_ns = None;
    // The text lines' times are from the capture's first frame, which the first chunk holds.
    let note = move |_: &Capture, batch: &RecordBatch| {
        *first_ns.get_or_insert_with(|| batch.get(0).map_or(0, |(_, r)| r.ts_ns))
    };
    let make = |batch: &RecordBatch, first_ns: &u64, lines: &mut Vec<u8>| {
        lines.clear();
        lines_of(batch, *first_ns, decoder, filter, style, lines);
    };
    ordered::run(capture, threads, note, make, |chunk| {
        out.write_all(&chunk.made)
    })
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
    roce_core::frames::for_each_in(batch, decoder, |f| {
        if filter.is_none_or(|flt| flt.matches(f)) {
            // Writing into a Vec cannot fail.
            let _ = line(lines, f, first_ns, style);
        }
    });
}

/// `f`'s line.
#[inline]
fn line(out: &mut impl Write, f: &Frame<'_>, first_ns: u64, style: Style) -> io::Result<()> {
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
        line(out, &f, first, style)?;
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
