//! Compressed captures. People keep what they capture compressed, and a saturation test's files are large:
//! gzip, zstd and lz4 (frame format) are recognised by their magic numbers, never by the file name, and are
//! decompressed as a stream, so a compressed capture costs no more memory than a plain one.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A compression format the reader undoes by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip (RFC 1952), one member or several concatenated (as `pigz` and appended logs give).
    Gzip,
    /// Zstandard frames.
    Zstd,
    /// The LZ4 frame format (`lz4` command line tool), not raw LZ4 blocks.
    Lz4,
}

impl Compression {
    /// The format whose magic number starts `head` (at least 4 bytes), if any.
    pub fn detect(head: &[u8]) -> Option<Compression> {
        match head.get(..4)? {
            [0x1f, 0x8b, _, _] => Some(Compression::Gzip),
            [0x28, 0xb5, 0x2f, 0xfd] => Some(Compression::Zstd),
            [0x04, 0x22, 0x4d, 0x18] => Some(Compression::Lz4),
            _ => None,
        }
    }

    /// A stable name for tables and messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
        }
    }

    /// The decompressed stream of `compressed`.
    ///
    /// The decoders see their input through [`Whole`]: how much a decoder returns before it notices damage
    /// depends on the pieces its input arrives in, and a pipe's pieces are chance. With whole pieces a corrupt
    /// stream gives the same records and the same error from a pipe as from the file.
    pub(super) fn decoder(
        self,
        compressed: Box<dyn Read + Send>,
    ) -> io::Result<Box<dyn Read + Send>> {
        let compressed = Whole {
            inner: compressed,
            failed: None,
        };
        Ok(match self {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(compressed)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(compressed)?),
            Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(compressed)),
        })
    }
}

/// Fills every read completely unless the stream ends or fails, so what the reader downstream sees does not
/// depend on how the source happened to deliver its bytes. An error met after some bytes is held back and
/// given on the next read, after those bytes.
struct Whole<R> {
    inner: R,
    failed: Option<io::Error>,
}

impl<R: Read> Read for Whole<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut got = 0;
        while let Some(rest) = buf.get_mut(got..).filter(|r| !r.is_empty()) {
            let room = rest.len();
            match self.inner.read(rest) {
                Ok(0) => break,
                Ok(n) => got += n.min(room),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if got == 0 => return Err(e),
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            }
        }
        Ok(got)
    }
}

/// Counts the bytes read from the file itself, before any decompression: what a progress bar over several
/// files, some compressed, can compare with their sizes on disk.
pub(super) struct Counted<R> {
    pub(super) inner: R,
    pub(super) count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives `left` bytes, at most two per read, then fails.
    struct FailsAfter {
        left: usize,
    }

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::other("disk gone"));
            }
            let n = buf.len().min(2).min(self.left);
            buf[..n].fill(7);
            self.left -= n;
            Ok(n)
        }
    }

    #[test]
    fn whole_fills_each_read_and_hands_an_error_over_after_the_bytes_before_it() {
        let mut w = Whole {
            inner: FailsAfter { left: 5 },
            failed: None,
        };
        let mut buf = [0u8; 4];
        assert_eq!(w.read(&mut buf).unwrap(), 4);
        assert_eq!(
            w.read(&mut buf).unwrap(),
            1,
            "the byte before the error comes first"
        );
        assert_eq!(w.read(&mut buf).unwrap_err().to_string(), "disk gone");
        let mut ends = Whole {
            inner: io::Cursor::new(vec![1u8, 2, 3]),
            failed: None,
        };
        let mut big = [0u8; 8];
        assert_eq!(ends.read(&mut big).unwrap(), 3);
        assert_eq!(ends.read(&mut big).unwrap(), 0);
    }
}
