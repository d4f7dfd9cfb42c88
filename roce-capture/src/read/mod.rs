//! Capture files in: pcap and pcapng, streamed from a file or stdin, one [`Record`] at a time.
//!
//! The bytes stream through a buffer of a fixed few MiB ([`buffer`]), refilled as records are consumed, so memory
//! does not grow with the file. Packet records are read here at their fixed offsets; pcap-parser parses the file
//! header and every other pcapng block. Before a block reaches pcap-parser, this module checks its length fields
//! against the data actually buffered and against sane limits: a record that claims 4 GB would otherwise have
//! the reader wait for bytes that never come. Those checks are also what lets every error name the byte offset
//! of the record at fault.
//!
//! Timestamps leave this module as nanoseconds since the epoch, whatever the file's resolution, because DCQCN
//! timing is about microseconds and one unit everywhere removes a class of bugs downstream.

mod ahead;
mod buffer;
mod compress;
mod error;
mod kept;
mod pcap;
mod pcapng;

use std::fs::File;
use std::io::{self, Cursor, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pcap_parser::SHB_MAGIC;

use buffer::StreamBuf;
use compress::Counted;
use pcap::{PcapLayout, buffered_pcap_record};
use pcapng::{Clock, Scale};

pub use crate::link::LinkType;
pub use compress::Compression;
pub use error::{SourceError, SourceErrorKind};
pub use kept::{PacketBlock, RawBlock};

/// The largest captured length accepted for one packet (the usual libpcap maximum snapshot length).
///
/// Anything above is a corrupt length field, reported as [`SourceErrorKind::CaplenTooLarge`] before any byte of
/// it is buffered.
pub const MAX_CAPLEN: u32 = 256 * 1024;

/// Size of the streaming buffer: large enough that refills are rare, small enough to never matter for memory.
const BUFFER_SIZE: usize = 4 << 20;

/// The buffer a reader starts with; it grows to [`BUFFER_SIZE`] once the stream proves longer. Most test and
/// sample captures are tiny, and zeroing 4 MiB per open would dominate reading them.
const INITIAL_BUFFER: usize = 64 << 10;

/// The largest pcapng block we hand to pcap-parser (packet, interface, statistics and section blocks).
///
/// Other block types are skipped by length however long they are, so they need no limit.
const MAX_PARSED_BLOCK: u32 = 1 << 20;
/// pcapng Custom Block types (copyable, not to be copied).
const CUSTOM_COPY: u32 = 0x0000_0BAD;
const CUSTOM_NOCOPY: u32 = 0x4000_0BAD;
/// Custom block data kept per file; beyond this they are skipped (one tracer counter sample per second stays
/// far below it).
const MAX_CUSTOM_BYTES: usize = 64 << 20;

/// A pcapng Custom Block: the Private Enterprise Number that defines it and its data (padding included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomBlock {
    /// Whose format the data is in: rocetrace's own blocks carry the project's PEN.
    pub pen: u32,
    /// The block's body as stored.
    pub data: Vec<u8>,
}

const BOM_LE: u32 = 0x1A2B_3C4D;
const BOM_BE: u32 = 0x4D3C_2B1A;

/// Which kind of file is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap: one link type, microsecond or nanosecond timestamps.
    Pcap {
        /// The nanosecond magic number (`a1b23c4d`) rather than the microsecond one.
        nanosecond: bool,
        /// Written by a big-endian host; every header field is swapped.
        big_endian: bool,
    },
    /// pcapng: sections, interfaces with their own link types and resolutions, statistics blocks.
    Pcapng,
}

impl Format {
    /// A stable name for tables and JSON: `pcapng`, or `pcap-` with the timestamp unit and byte order
    /// (`pcap-us-le`, `pcap-ns-be`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Format::Pcapng => "pcapng",
            Format::Pcap {
                nanosecond: false,
                big_endian: false,
            } => "pcap-us-le",
            Format::Pcap {
                nanosecond: false,
                big_endian: true,
            } => "pcap-us-be",
            Format::Pcap {
                nanosecond: true,
                big_endian: false,
            } => "pcap-ns-le",
            Format::Pcap {
                nanosecond: true,
                big_endian: true,
            } => "pcap-ns-be",
        }
    }
}

/// One capture interface (the single implicit one of a pcap file, or an IDB of a pcapng file).
#[derive(Debug, Clone)]
pub struct Interface {
    /// How the packets of this interface are framed.
    pub link: LinkType,
    /// Snapshot length; 0 means unlimited.
    pub snaplen: u32,
    /// `if_name`, when the writer recorded one.
    pub name: Option<String>,
    /// Timestamp resolution as written in the file, for display: `"ns"`, `"µs"`, `"2^-20 s"`...
    pub ts_resol_desc: String,
    /// `if_speed`: the line rate in bit/s, when the writer recorded one (dumpcap, `roce-tracer` and `roce-sim`
    /// do; a classic pcap file cannot). A recorded 0 says nothing and reads as `None`.
    pub speed_bps: Option<u64>,
}

/// Drop counters from the last Interface Statistics Block seen for an interface.
///
/// They say whether a gap in sequence numbers is loss on the wire or loss in the capture.
#[derive(Debug, Clone, Copy, Default)]
pub struct IfStats {
    /// `isb_ifrecv`: packets the interface received.
    pub received: Option<u64>,
    /// `isb_ifdrop`: packets the interface dropped (no buffer space, for instance).
    pub dropped_iface: Option<u64>,
    /// `isb_osdrop`: packets the operating system dropped.
    pub dropped_os: Option<u64>,
}

/// One captured packet, borrowed from the reader's buffer until the next call.
#[derive(Debug)]
pub struct Record<'a> {
    /// Index into [`CaptureReader::interfaces`] (over all sections, not relative to the packet's section).
    pub iface: u32,
    /// The interface's link type, repeated here because every consumer needs it.
    pub link: LinkType,
    /// The interface's `if_speed` ([`Interface::speed_bps`]), repeated here for the passes that turn a
    /// frame's bytes into time on its link (pause quanta, serialization) while the capture is being read.
    pub speed_bps: Option<u64>,
    /// Nanoseconds since the Unix epoch (saturating at both ends); 0 for a pcapng Simple Packet Block, which
    /// carries no timestamp.
    pub ts_ns: u64,
    /// Bytes captured, `data.len()`.
    pub caplen: u32,
    /// Bytes the packet had on the wire.
    pub len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// Byte offset of the record's header in the file, so a finding can point at the exact frame.
    pub offset: u64,
}

/// Streaming reader over a pcap or pcapng file.
///
/// After an error, every later call of [`CaptureReader::next_record`] returns `Ok(None)`: the error is reported
/// once, and the records before it have already been returned.
pub struct CaptureReader {
    /// What errors call the stream: the path, marked as decompressed for a compressed file (their offsets
    /// count decompressed bytes).
    label: String,
    /// The path or name as given.
    name: String,
    compression: Option<Compression>,
    /// Bytes taken from the file or pipe itself, before decompression.
    source_read: Arc<AtomicU64>,
    buf: StreamBuf,
    format: Format,
    /// Record header length and byte order of a pcap file (unused for pcapng).
    pcap: PcapLayout,
    interfaces: Vec<Interface>,
    stats: Vec<IfStats>,
    /// Parallel to `interfaces`: how to turn each one's timestamps into nanoseconds.
    clocks: Vec<Clock>,
    /// Index in `interfaces` of the current pcapng section's interface 0.
    section_base: usize,
    /// Byte order of the current pcapng section.
    big_endian: bool,
    /// File offset of the first byte of the buffered data.
    pos: u64,
    /// Length of the record last returned; consumed at the next call, since the record borrows the buffer.
    pending: usize,
    /// Bytes of a skipped block still to be dropped, and where that block started.
    skip: Option<(u64, u64, u32)>,
    /// The packet `advance` found, as places in the buffer, valid until the next `advance`.
    current: Option<Found>,
    done: bool,
    /// Custom blocks read so far, and their total size (bounded by [`MAX_CUSTOM_BYTES`]).
    custom: Vec<CustomBlock>,
    custom_bytes: usize,
    /// Blocks read so far that Wireshark lists as records of their own: custom blocks of both kinds,
    /// kept or skipped (Wireshark 4.0 numbers them among the packets).
    listed: u64,
    /// Every block as stored, for a copy of the file ([`CaptureReader::keep_blocks`]); `None` when reading
    /// for an analysis.
    kept: Option<Box<kept::Kept>>,
}

impl std::fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.label)
            .field("format", &self.format)
            .field("compression", &self.compression)
            .field("interfaces", &self.interfaces)
            .field("pos", &self.pos)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// What the format-specific step found: a packet, described by positions in the buffer.
#[derive(Debug, Clone, Copy)]
struct Found {
    iface: u32,
    link: LinkType,
    speed_bps: Option<u64>,
    ts_ns: u64,
    caplen: u32,
    len: u32,
    data_start: usize,
    total: usize,
    /// Where the parts of a pcapng packet block are, for a copy ([`CaptureReader::current_block`]).
    block: Option<kept::BlockPlace>,
}

impl CaptureReader {
    /// Opens a capture file; the path `-` reads standard input.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        if path.as_os_str() == "-" {
            return Self::from_reader("-", Box::new(io::stdin()));
        }
        let name = path.display().to_string();
        let fail = |kind| SourceError {
            path: name.clone(),
            offset: 0,
            kind,
        };
        let file = File::open(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => fail(SourceErrorKind::NotFound),
            io::ErrorKind::IsADirectory => fail(SourceErrorKind::IsDirectory),
            _ => fail(SourceErrorKind::Io(e)),
        })?;
        // Opening a directory succeeds on Linux; only the first read would fail, with a less helpful message.
        match file.metadata() {
            Ok(meta) if meta.is_dir() => return Err(fail(SourceErrorKind::IsDirectory)),
            Ok(_) => {}
            Err(e) => return Err(fail(SourceErrorKind::Io(e))),
        }
        Self::from_reader(&name, Box::new(file))
    }

    /// Reads a capture from any byte stream, decompressing gzip, zstd and lz4 by itself; `name` labels
    /// errors and tables.
    pub fn from_reader(name: &str, r: Box<dyn Read + Send>) -> Result<Self, SourceError> {
        let source_read = Arc::new(AtomicU64::new(0));
        let counted = Counted {
            inner: r,
            count: Arc::clone(&source_read),
        };
        Self::start(name, Box::new(counted), source_read, None)
    }

    fn start(
        path: &str,
        mut r: Box<dyn Read + Send>,
        source_read: Arc<AtomicU64>,
        compression: Option<Compression>,
    ) -> Result<Self, SourceError> {
        let name = match compression {
            Some(c) => format!("{path} (decompressed {})", c.name()),
            None => path.to_owned(),
        };
        let name = name.as_str();
        let fail = |offset, kind| SourceError {
            path: name.to_owned(),
            offset,
            kind,
        };
        let mut head = vec![0u8; 4];
        let got = read_up_to(&mut *r, &mut head).map_err(|e| fail(0, SourceErrorKind::Io(e)))?;
        if got == 0 {
            return Err(fail(0, SourceErrorKind::Empty));
        }
        if got < 4 {
            let kind = SourceErrorKind::Truncated {
                what: "file magic number",
                needed: 4,
                have: got as u64,
            };
            return Err(fail(0, kind));
        }
        let magic = [head[0], head[1], head[2], head[3]];
        if compression.is_none()
            && let Some(c) = Compression::detect(&magic)
        {
            let decoded = c
                .decoder(Box::new(Cursor::new(head).chain(r)))
                .map_err(|e| fail(0, SourceErrorKind::Io(e)))?;
            return Self::start(path, decoded, source_read, Some(c));
        }
        let pcap_magic = match u32::from_le_bytes(magic) {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0xa1b2_cd34 => true,
            0x0A0D_0D0A => false,
            _ => return Err(fail(0, SourceErrorKind::NotACapture { magic })),
        };
        // Read the whole first header before anything parses it: a pipe may deliver it in pieces.
        let header_len = if pcap_magic {
            24
        } else {
            head.resize(12, 0);
            let got = 4 + read_up_to(&mut *r, head.get_mut(4..).unwrap_or_default())
                .map_err(|e| fail(0, SourceErrorKind::Io(e)))?;
            if got < 12 {
                let kind = SourceErrorKind::Truncated {
                    what: "section header block",
                    needed: 28,
                    have: got as u64,
                };
                return Err(fail(0, kind));
            }
            let big_endian = match u32_at(&head, 8, false) {
                BOM_LE => false,
                BOM_BE => true,
                _ => {
                    return Err(fail(
                        0,
                        SourceErrorKind::Malformed {
                            what: "section header byte-order magic",
                        },
                    ));
                }
            };
            let len = u32_at(&head, 4, big_endian);
            if len < 28 || !len.is_multiple_of(4) || len > MAX_PARSED_BLOCK {
                return Err(fail(
                    0,
                    SourceErrorKind::BadBlockLength {
                        block_type: SHB_MAGIC,
                        len,
                    },
                ));
            }
            len as usize
        };
        let have = head.len();
        head.resize(header_len, 0);
        let got = have
            + read_up_to(&mut *r, head.get_mut(have..).unwrap_or_default())
                .map_err(|e| fail(0, SourceErrorKind::Io(e)))?;
        if got < header_len {
            let what = if pcap_magic {
                "pcap file header"
            } else {
                "section header block"
            };
            let kind = SourceErrorKind::Truncated {
                what,
                needed: header_len as u64,
                have: got as u64,
            };
            return Err(fail(0, kind));
        }

        let mut reader = CaptureReader {
            label: name.to_owned(),
            name: path.to_owned(),
            compression,
            source_read,
            // The header stays in the buffer: pcap's is parsed from there, pcapng's section header is handled
            // by `next_record` like any later one.
            buf: StreamBuf::new(&head, r, INITIAL_BUFFER.max(header_len)),
            format: Format::Pcapng,
            pcap: PcapLayout {
                header_len: 16,
                big_endian: false,
                frac_ns: 1000,
                snaplen: 0,
                link: LinkType::ETHERNET,
            },
            interfaces: Vec::new(),
            stats: Vec::new(),
            clocks: Vec::new(),
            section_base: 0,
            big_endian: false,
            pos: 0,
            pending: 0,
            skip: None,
            current: None,
            custom: Vec::new(),
            custom_bytes: 0,
            listed: 0,
            kept: None,
            done: false,
        };
        if pcap_magic {
            reader.start_pcap()?;
        }
        Ok(reader)
    }

    /// The next packet, `Ok(None)` at a clean end of file (and after an error, see [`CaptureReader`]).
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, SourceError> {
        Ok(if self.advance()? {
            self.current()
        } else {
            None
        })
    }

    /// Moves to the next packet, which [`CaptureReader::current`] then returns: `Ok(false)` at a clean end
    /// of file (and after an error). Merging several files needs this split, because each file's next packet
    /// must wait, still borrowed from its buffer, until its turn comes.
    pub fn advance(&mut self) -> Result<bool, SourceError> {
        if self.advance_buffered() {
            return Ok(true);
        }
        self.current = None;
        if self.done {
            return Ok(false);
        }
        if self.pending > 0 {
            self.consume(self.pending);
            self.pending = 0;
        }
        let step = match self.format {
            Format::Pcap { .. } => self.step_pcap(),
            Format::Pcapng => self.step_pcapng(),
        };
        let found = match step {
            Ok(Some(found)) => found,
            Ok(None) => {
                self.done = true;
                return Ok(false);
            }
            Err((offset, kind)) => {
                self.done = true;
                return Err(SourceError {
                    path: self.label.clone(),
                    offset,
                    kind,
                });
            }
        };
        let end = found.data_start + found.caplen as usize;
        let buffered = self.buf.data().len();
        if end > buffered || found.total > buffered {
            self.done = true;
            let kind = SourceErrorKind::Malformed {
                what: "packet record",
            };
            return Err(SourceError {
                path: self.label.clone(),
                offset: self.pos,
                kind,
            });
        }
        self.pending = found.total;
        self.current = Some(found);
        Ok(true)
    }

    /// [`CaptureReader::advance`] for the common case only: the next record is wholly buffered and plainly
    /// a packet (a pcap record, or an Enhanced Packet Block whose lengths agree and whose interface is
    /// known), read at its fixed offsets without the general path's refill and block checks. Both paths
    /// read a record through the same functions, so it means the same whichever found it. `false` leaves
    /// the reader as it was, for `advance` to find the record, or the error, the general way: the merge
    /// of many files calls this alone for the run of records one file has to itself.
    #[inline]
    pub(crate) fn advance_buffered(&mut self) -> bool {
        if self.done {
            return false;
        }
        let data = self.buf.data().get(self.pending..).unwrap_or_default();
        let found = match self.format {
            Format::Pcap { .. } => buffered_pcap_record(&self.pcap, data),
            Format::Pcapng if self.skip.is_none() && !self.keeping() => self.buffered_epb(data),
            Format::Pcapng => None,
        };
        let Some(found) = found else {
            return false;
        };
        if self.pending > 0 {
            self.consume(self.pending);
        }
        self.pending = found.total;
        self.current = Some(found);
        true
    }

    /// The packet the last [`CaptureReader::advance`] moved to, if it found one.
    #[inline]
    pub fn current(&self) -> Option<Record<'_>> {
        let found = self.current.as_ref()?;
        let data = self
            .buf
            .data()
            .get(found.data_start..found.data_start + found.caplen as usize)
            .unwrap_or_default();
        Some(Record {
            iface: found.iface,
            link: found.link,
            speed_bps: found.speed_bps,
            ts_ns: found.ts_ns,
            caplen: found.caplen,
            len: found.len,
            data,
            offset: self.pos,
        })
    }

    /// pcap or pcapng, and for pcap the magic number's flavour.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Every interface seen so far, over all sections (a pcap file has exactly one).
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Per interface (same indexes as [`CaptureReader::interfaces`]), the counters of the last statistics block.
    pub fn if_stats(&self) -> &[IfStats] {
        &self.stats
    }

    /// The path as given, or `-` for stdin.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the file was compressed, if it was.
    pub fn compression(&self) -> Option<Compression> {
        self.compression
    }

    /// Bytes taken from the file or pipe itself so far, compressed or not (read ahead of the records): what
    /// to compare with the file's size for progress.
    pub fn source_bytes_read(&self) -> u64 {
        self.source_read.load(Ordering::Relaxed)
    }

    /// Blocks read so far that Wireshark numbers as if they were packets (custom blocks), so that the merge
    /// can number the packets as Wireshark does.
    pub fn listed_blocks(&self) -> u64 {
        self.listed
    }

    /// The pcapng Custom Blocks read so far (the tracer's knobs and counter samples travel in them).
    pub fn custom_blocks(&self) -> &[CustomBlock] {
        &self.custom
    }

    /// Bytes of the (decompressed) stream consumed so far, including the last record returned.
    pub fn bytes_read(&self) -> u64 {
        self.pos + self.pending as u64
    }

    fn consume(&mut self, n: usize) {
        // No shift here: the buffer is compacted only when refilled, once per few MiB instead of per record.
        self.buf.consume(n);
        self.pos += n as u64;
    }

    /// Reads more of the file into the buffer, for a block of `needed` bytes (at most [`MAX_PARSED_BLOCK`]).
    fn refill(&mut self, needed: usize) -> Result<(), (u64, SourceErrorKind)> {
        let before = self.buf.data().len();
        let streamed = self.pos + before as u64;
        let capacity = self.buf.capacity();
        // Past its first buffer a file is read on a thread of its own (see `ahead`); a file that is only
        // peeked at, or too short to need more, never starts one.
        let ahead =
            streamed >= capacity as u64 && self.buf.read_ahead(ahead::HEADROOM, ahead::CHUNK);
        if !ahead && capacity < BUFFER_SIZE && (needed > capacity || streamed >= capacity as u64) {
            self.buf.grow(BUFFER_SIZE.max(needed));
        }
        if let Err(e) = self.buf.refill() {
            return Err((self.pos, SourceErrorKind::Io(e)));
        }
        if self.buf.data().len() == before && !self.buf.exhausted() {
            // Cannot happen with the length checks done before each refill; refuse rather than spin.
            return Err((
                self.pos,
                SourceErrorKind::Malformed {
                    what: "block larger than the read buffer",
                },
            ));
        }
        Ok(())
    }
}

fn truncated(what: &'static str, needed: usize, have: usize) -> SourceErrorKind {
    SourceErrorKind::Truncated {
        what,
        needed: needed as u64,
        have: have as u64,
    }
}

fn check_caplen(caplen: u32, len: u32, snaplen: u32) -> Result<(), SourceErrorKind> {
    if caplen > MAX_CAPLEN {
        Err(SourceErrorKind::CaplenTooLarge {
            caplen,
            limit: MAX_CAPLEN,
        })
    } else if snaplen > 0 && caplen > snaplen {
        Err(SourceErrorKind::CaplenAboveSnaplen { caplen, snaplen })
    } else if caplen > len {
        Err(SourceErrorKind::CaplenAboveLen { caplen, len })
    } else {
        Ok(())
    }
}

/// A 32-bit field at `at`; the callers have checked the length, and a short slice reads as 0 rather than panic.
fn u32_at(data: &[u8], at: usize, big_endian: bool) -> u32 {
    let Some(&[a, b, c, d]) = data.get(at..at.saturating_add(4)) else {
        return 0;
    };
    if big_endian {
        u32::from_be_bytes([a, b, c, d])
    } else {
        u32::from_le_bytes([a, b, c, d])
    }
}

/// Reads until `buf` is full or the stream ends; a pipe hands out data in whatever pieces it likes.
fn read_up_to(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(buf.get_mut(got..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_are_the_documented_ones() {
        let pcap = |nanosecond, big_endian| Format::Pcap {
            nanosecond,
            big_endian,
        };
        let names: Vec<&str> = [
            pcap(false, false),
            pcap(false, true),
            pcap(true, false),
            pcap(true, true),
            Format::Pcapng,
        ]
        .iter()
        .map(|f| f.name())
        .collect();
        assert_eq!(
            names,
            [
                "pcap-us-le",
                "pcap-us-be",
                "pcap-ns-le",
                "pcap-ns-be",
                "pcapng"
            ]
        );
    }
}
