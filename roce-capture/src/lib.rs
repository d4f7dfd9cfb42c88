//! Capture files, the ground every rocetrace program stands on: [`read`] streams pcap and pcapng records
//! from files or pipes, [`write`] produces files that Wireshark opens, [`link`] names the link types, and
//! [`blocks`] is the format of the records `roce-tracer` stores beside the packets.
//!
//! Nothing here knows RoCE: decoding a record is `roce-core`'s job.
pub mod blocks;
pub mod link;
pub mod read;
pub mod write;

pub use link::LinkType;
pub use read::{
    CaptureReader, CustomBlock, Format, IfStats, Interface, Record, SourceError, SourceErrorKind,
};
