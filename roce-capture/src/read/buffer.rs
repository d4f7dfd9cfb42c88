//! The read buffer under [`super::CaptureReader`]: a window onto the stream that is refilled in large reads
//! and consumed record by record.
//!
//! pcap-parser's streaming readers own a buffer too, but every look at it and every record consumed went
//! through a dynamic call and a bounds-checked slice, about 50 instructions a record, a quarter of a bare
//! pass over a file. Owning the buffer makes both a field access; pcap-parser still parses the headers and
//! blocks that are not packets.

use std::io::{self, Read};

use super::ahead::ReadAhead;

pub(super) struct StreamBuf {
    /// `bytes[start..end]` is the data not yet consumed; `bytes.len()` is the capacity.
    bytes: Vec<u8>,
    start: usize,
    end: usize,
    source: Source,
    /// The last read returned 0 bytes: the stream has ended.
    exhausted: bool,
}

enum Source {
    /// Read on the parser's own thread, into the space after the data.
    Here(Box<dyn Read + Send>),
    /// Read on a thread of its own, a chunk at a time (see [`super::ahead`]).
    Ahead(ReadAhead),
    /// Only while the reader moves from one to the other.
    Moving,
}

impl std::fmt::Debug for StreamBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBuf")
            .field("buffered", &(self.end - self.start))
            .field("read_ahead", &matches!(self.source, Source::Ahead(_)))
            .field("exhausted", &self.exhausted)
            .finish()
    }
}

impl StreamBuf {
    /// A buffer of `capacity` bytes that already holds `prefix` (the bytes read to identify the file).
    pub(super) fn new(prefix: &[u8], inner: Box<dyn Read + Send>, capacity: usize) -> Self {
        let mut bytes = vec![0; capacity.max(prefix.len())];
        if let Some(head) = bytes.get_mut(..prefix.len()) {
            head.copy_from_slice(prefix);
        }
        StreamBuf {
            bytes,
            start: 0,
            end: prefix.len(),
            source: Source::Here(inner),
            exhausted: false,
        }
    }

    /// The bytes buffered and not consumed.
    #[inline]
    pub(super) fn data(&self) -> &[u8] {
        self.bytes.get(self.start..self.end).unwrap_or_default()
    }

    /// Drops `n` bytes from the front (at most what is buffered). Nothing moves until the next refill.
    #[inline]
    pub(super) fn consume(&mut self, n: usize) {
        self.start = self.start.saturating_add(n).min(self.end);
    }

    /// True once a read has returned end of stream.
    pub(super) fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// How many bytes one refill can bring at most; read ahead, a refill always brings a whole chunk, however
    /// long the block being completed.
    pub(super) fn capacity(&self) -> usize {
        match self.source {
            Source::Ahead(_) => usize::MAX,
            _ => self.bytes.len(),
        }
    }

    /// Makes room for `capacity` bytes in all (never shrinks).
    pub(super) fn grow(&mut self, capacity: usize) {
        if capacity > self.bytes.len() && !matches!(self.source, Source::Ahead(_)) {
            self.bytes.resize(capacity, 0);
        }
    }

    /// Whether the stream is read on a thread of its own.
    pub(super) fn reads_ahead(&self) -> bool {
        matches!(self.source, Source::Ahead(_))
    }

    /// Moves the reading of the stream to a thread of its own, with chunks of `chunk` bytes and `headroom`
    /// free bytes before each; returns false (and goes on reading here) when no thread can be started.
    pub(super) fn read_ahead(&mut self, headroom: usize, chunk: usize) -> bool {
        let Source::Here(inner) = std::mem::replace(&mut self.source, Source::Moving) else {
            return self.reads_ahead();
        };
        match ReadAhead::spawn(inner, headroom, chunk) {
            Ok(ahead) => {
                self.source = Source::Ahead(ahead);
                true
            }
            Err(inner) => {
                self.source = Source::Here(inner);
                false
            }
        }
    }

    /// Moves the unconsumed bytes to the front and reads once into the space after them (read ahead: puts
    /// them in front of the next chunk). A read of 0 bytes into a non-empty space marks the end of the
    /// stream; an interrupted read is retried.
    pub(super) fn refill(&mut self) -> io::Result<()> {
        let ahead = match &mut self.source {
            Source::Ahead(ahead) => ahead,
            Source::Here(_) | Source::Moving => return self.refill_here(),
        };
        let Some((mut chunk, len)) = ahead.next()? else {
            self.exhausted = true;
            return Ok(());
        };
        let head = ahead.headroom();
        let rest = self.bytes.get(self.start..self.end).unwrap_or_default();
        let left = rest.len();
        if let Some(front) = chunk
            .get_mut(head.saturating_sub(left)..head)
            .filter(|_| left <= head)
        {
            front.copy_from_slice(rest);
            let parsed = std::mem::replace(&mut self.bytes, chunk);
            ahead.recycle(parsed);
            (self.start, self.end) = (head - left, head + len);
        } else {
            // A block longer than the headroom is still incomplete: join its parts in a buffer of their own.
            let mut joined = Vec::with_capacity(left + len);
            joined.extend_from_slice(rest);
            joined.extend_from_slice(chunk.get(head..head + len).unwrap_or_default());
            ahead.recycle(chunk);
            (self.start, self.end) = (0, joined.len());
            self.bytes = joined;
        }
        Ok(())
    }

    fn refill_here(&mut self) -> io::Result<()> {
        let Source::Here(inner) = &mut self.source else {
            return Ok(());
        };
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let Some(space) = self.bytes.get_mut(self.end..).filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        let n = loop {
            match inner.read(space) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        self.exhausted = n == 0;
        self.end += n.min(space.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out at most `chunk` bytes per read, and fails once with `Interrupted` before each read.
    struct Awkward {
        data: io::Cursor<Vec<u8>>,
        chunk: usize,
        interrupt: bool,
    }

    impl Read for Awkward {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.chunk);
            self.data.read(&mut buf[..n])
        }
    }

    #[test]
    fn serves_the_prefix_then_the_stream_in_order() {
        let inner = Awkward {
            data: io::Cursor::new(b"defghij".to_vec()),
            chunk: 3,
            interrupt: false,
        };
        let mut buf = StreamBuf::new(b"abc", Box::new(inner), 5);
        assert_eq!(buf.data(), b"abc");
        buf.consume(2);
        buf.refill().unwrap();
        assert_eq!(
            buf.data(),
            b"cdef",
            "shifted to the front, then one read of at most 3"
        );
        buf.refill().unwrap();
        assert_eq!(
            buf.data(),
            b"cdefg",
            "full: the space after the data was one byte"
        );
        buf.consume(100);
        assert_eq!(
            buf.data(),
            b"",
            "consuming more than buffered stops at the end"
        );
        buf.refill().unwrap();
        assert_eq!(buf.data(), b"hij");
        assert!(!buf.exhausted());
        buf.consume(3);
        buf.refill().unwrap();
        assert!(buf.exhausted());
        assert_eq!(buf.capacity(), 5);
        buf.grow(8);
        assert_eq!(buf.capacity(), 8);
    }

    /// Consumes `stream` through a buffer in steps of `step` bytes, asking for `want` bytes before each,
    /// reading ahead from the first refill on: what comes out must be the stream, in order, whole.
    fn read_through(stream: &[u8], headroom: usize, chunk: usize, step: usize, want: usize) {
        let inner = Awkward {
            data: io::Cursor::new(stream.to_vec()),
            chunk: 7,
            interrupt: false,
        };
        let mut buf = StreamBuf::new(b"", Box::new(inner), 16);
        assert!(buf.read_ahead(headroom, chunk));
        assert!(buf.reads_ahead());
        let mut out = Vec::new();
        loop {
            while buf.data().len() < want && !buf.exhausted() {
                buf.refill().unwrap();
            }
            let n = step.min(buf.data().len());
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf.data()[..n]);
            buf.consume(n);
        }
        assert_eq!(out.len(), stream.len());
        assert!(out == stream, "bytes changed on their way through");
    }

    #[test]
    fn read_ahead_hands_over_every_byte_across_chunks() {
        let stream: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        // Records that straddle chunks meet in the headroom...
        read_through(&stream, 64, 1000, 37, 50);
        // ...and blocks longer than the headroom are joined by copying.
        read_through(&stream, 8, 1000, 997, 2500);
        // A stream shorter than one chunk.
        read_through(&stream[..500], 64, 1000, 37, 50);
    }

    #[test]
    fn read_ahead_returns_the_error_after_the_data_before_it() {
        struct FailsLater(usize);
        impl Read for FailsLater {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "corrupt deflate stream",
                    ));
                }
                let n = buf.len().min(self.0).min(300);
                buf[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut buf = StreamBuf::new(b"", Box::new(FailsLater(2500)), 16);
        assert!(buf.read_ahead(16, 1000));
        let mut got = 0;
        let e = loop {
            match buf.refill() {
                Ok(()) => {
                    got += buf.data().len();
                    buf.consume(buf.data().len());
                }
                Err(e) => break e,
            }
        };
        assert_eq!(got, 2500, "every byte before the damage arrives first");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(!buf.exhausted());
    }

    #[test]
    fn a_read_error_is_returned_as_it_was() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::PermissionDenied, "no"))
            }
        }
        let mut buf = StreamBuf::new(b"", Box::new(Broken), 4);
        let e = buf.refill().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(e.to_string(), "no");
        assert!(!buf.exhausted());
    }
}
