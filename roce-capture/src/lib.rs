//! Capture files, the ground every rocetrace program stands on: [`read`] streams pcap and pcapng records
//! (plain or compressed) from files or pipes, [`inputs`] turns a command line's paths, directories and
//! patterns into files, [`merge`] reads many files as one capture in time order with each interface a tap,
//! [`write`] produces files that Wireshark opens, [`rewrite`] writes a capture back with comments on its
//! packets, [`link`] names the link types, and [`blocks`] is the format of the records `roce-tracer` stores
//! beside the packets.
//!
//! Nothing here knows RoCE: decoding a record is `roce-core`'s job.
#![warn(missing_docs)]
pub mod blocks;
pub mod inputs;
/// Link types by their pcap numbers, and which of them the decoder reads.
pub mod link;
pub mod merge;
pub mod read;
pub mod rewrite;
pub mod write;

pub use inputs::{Input, InputError, Inputs, Repeat};
pub use link::LinkType;
pub use merge::{Bound, Capture, FileSummary, KeptBlock, RecordBatch, Tap, WindowError};
pub use read::{
    CaptureReader, Compression, CustomBlock, Format, IfStats, Interface, PacketBlock, RawBlock,
    Record, SourceError, SourceErrorKind,
};
