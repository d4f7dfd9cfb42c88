use std::{fmt, io};

/// Why a capture could not be read, with where: the file and the byte offset of the record or block at fault.
///
/// Everything read before `offset` was already handed out by [`super::CaptureReader::next_record`], so a caller
/// can keep its results up to the damage and report this as a warning.
#[derive(Debug, thiserror::Error)]
#[error("{path}: byte {offset}: {kind}")]
pub struct SourceError {
    /// The path given to `open` (or the name given to `from_reader`).
    pub path: String,
    /// Byte offset in the file of the start of the offending record or block (0 for file-level problems).
    pub offset: u64,
    /// What went wrong.
    pub kind: SourceErrorKind,
}

/// The distinct ways a capture file goes wrong, worded for the person who has to fix the capture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// The path does not exist.
    #[error("no such file")]
    NotFound,
    /// The path names a directory.
    #[error("is a directory, not a capture file")]
    IsDirectory,
    /// The operating system failed a read (permissions, I/O error, a closed pipe...). Said in the message,
    /// not chained as a source: [`SourceError`] is shown with its `Display` (in tables and warnings).
    #[error("read error: {0}")]
    Io(io::Error),
    /// Zero bytes: often a capture whose writer was killed before it flushed.
    #[error("empty file, no capture header")]
    Empty,
    /// The first four bytes are neither a pcap nor a pcapng magic number.
    #[error(
        "not a pcap or pcapng file (it starts with {}){}",
        Hex(magic),
        magic_hint(magic)
    )]
    NotACapture {
        /// The bytes found where the magic number should be.
        magic: [u8; 4],
    },
    /// The file ends inside a header, record or block.
    #[error("truncated {what}: it needs {needed} bytes but the file ends after {have}")]
    Truncated {
        /// The structure that was cut short.
        what: &'static str,
        /// Its full size in bytes.
        needed: u64,
        /// How many of those bytes the file holds.
        have: u64,
    },
    /// A record claims more captured bytes than any real packet has: the length field is corrupt.
    #[error(
        "captured length {caplen} is above the {limit}-byte limit for one packet (corrupt record header?)"
    )]
    CaplenTooLarge {
        /// The captured length in the record.
        caplen: u32,
        /// [`super::MAX_CAPLEN`].
        limit: u32,
    },
    /// A record holds more bytes than the interface's snapshot length allows.
    #[error("captured length {caplen} is above the interface's snapshot length {snaplen}")]
    CaplenAboveSnaplen {
        /// The captured length in the record.
        caplen: u32,
        /// The snapshot length from the file header or IDB.
        snaplen: u32,
    },
    /// A record holds more bytes than the packet had on the wire.
    #[error("captured length {caplen} is above the packet's original length {len}")]
    CaplenAboveLen {
        /// The captured length in the record.
        caplen: u32,
        /// The original (on-the-wire) length in the record.
        len: u32,
    },
    /// A pcapng block length that no valid block can have (too short for its type, not a multiple of 4, or huge).
    #[error("pcapng {} has an impossible length {len}", block_name(*block_type))]
    BadBlockLength {
        /// The block type code.
        block_type: u32,
        /// The length found at the start of the block.
        len: u32,
    },
    /// The length at the end of a pcapng block differs from the one at its start.
    #[error("pcapng {} says length {leading} at its start but {trailing} at its end", block_name(*block_type))]
    BlockLengthMismatch {
        /// The block type code.
        block_type: u32,
        /// The length at the start of the block.
        leading: u32,
        /// The length at the end of the block.
        trailing: u32,
    },
    /// An Enhanced Packet Block whose captured length runs past the end of the block.
    #[error(
        "pcapng enhanced packet block of {block_len} bytes cannot hold its {caplen}-byte packet"
    )]
    PacketBeyondBlock {
        /// The captured length in the block.
        caplen: u32,
        /// The total block length.
        block_len: u32,
    },
    /// A packet refers to an interface the section has not described.
    #[error(
        "packet on interface {id}, which no interface description block in this section declares"
    )]
    UnknownInterface {
        /// The interface id, relative to its section.
        id: u32,
    },
    /// A pcapng section of a major version this reader does not know (only 1.x exists).
    #[error("unsupported pcapng version {major}.{minor}")]
    UnsupportedVersion {
        /// Major version from the section header.
        major: u16,
        /// Minor version from the section header.
        minor: u16,
    },
    /// A block whose fields are inconsistent in a way the other kinds do not describe.
    #[error("malformed {what}")]
    Malformed {
        /// The structure at fault.
        what: &'static str,
    },
}

/// A pcapng block type as a person would name it.
pub(crate) fn block_name(block_type: u32) -> &'static str {
    match block_type {
        0x0A0D_0D0A => "section header block",
        0x0000_0001 => "interface description block",
        0x0000_0003 => "simple packet block",
        0x0000_0004 => "name resolution block",
        0x0000_0005 => "interface statistics block",
        0x0000_0006 => "enhanced packet block",
        0x0000_0BAD | 0x4000_0BAD => "custom block",
        _ => "block",
    }
}

struct Hex<'a>(&'a [u8; 4]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = *self.0;
        write!(f, "{a:02x} {b:02x} {c:02x} {d:02x}")
    }
}

/// Names the common things people feed a capture tool by mistake, so the message says what to do instead.
fn magic_hint(magic: &[u8; 4]) -> &'static str {
    match magic {
        [0x1f, 0x8b, ..] | [0x28, 0xb5, 0x2f, 0xfd] | [0x04, 0x22, 0x4d, 0x18] => {
            ": a compressed file inside a compressed file, decompress the outer one first"
        }
        [b'B', b'Z', b'h', _] => {
            ": bzip2-compressed, decompress it first (gzip, zstd and lz4 are read as they are)"
        }
        [0xfd, b'7', b'z', b'X'] => ": xz-compressed, decompress it first",
        [b'P', b'K', 3, 4] => ": a zip archive, extract it first",
        [0xa1, 0xb2, 0xcd, 0x34] => {
            ": a big-endian modified (Kuznetsov) pcap, convert it with editcap"
        }
        _ => "",
    }
}
