//! The read buffer under [`super::CaptureReader`]: a window onto the stream that is refilled in large reads
//! and consumed record by record.
//!
//! pcap-parser's streaming readers own a buffer too, but every look at it and every record consumed went
//! through a dynamic call and a bounds-checked slice, about 50 instructions a record, a quarter of a bare
//! pass over a file. Owning the buffer makes both a field access; pcap-parser still parses the headers and
//! blocks that are not packets.

use std::io::{self, Read};

pub(super) struct StreamBuf {
    /// `bytes[start..end]` is the data not yet consumed; `bytes.len()` is the capacity.
    bytes: Vec<u8>,
    start: usize,
    end: usize,
    inner: Box<dyn Read + Send>,
    /// The last read returned 0 bytes: the stream has ended.
    exhausted: bool,
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
            inner,
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

    pub(super) fn capacity(&self) -> usize {
        self.bytes.len()
    }

    /// Makes room for `capacity` bytes in all (never shrinks).
    pub(super) fn grow(&mut self, capacity: usize) {
        if capacity > self.bytes.len() {
            self.bytes.resize(capacity, 0);
        }
    }

    /// Moves the unconsumed bytes to the front and reads once into the space after them. A read of 0 bytes into
    /// a non-empty space marks the end of the stream; an interrupted read is retried.
    pub(super) fn refill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let Some(space) = self.bytes.get_mut(self.end..).filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        let n = loop {
            match self.inner.read(space) {
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
