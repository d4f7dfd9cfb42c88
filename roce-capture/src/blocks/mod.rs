//! What `roce-tracer` stores in pcapng custom blocks, so that counter samples, knobs, probe statistics and
//! kernel events travel inside the capture file beside the packets. The tracer writes them and `roce-core`
//! reads them back through the same typed [`records`]: a field known to one side is known to the other.
//!
//! Each block is a pcapng Custom Block (type 0x00000BAD, copyable) with the Private Enterprise Number
//! [`PEN`], whose data is a 4-byte ASCII record type followed by one UTF-8 JSON object: [`records::Knobs`]
//! (`KNOB`), [`records::Counters`] (`CTRS`), [`records::Probe`] (`PROB`), [`records::Drops`] (`DROP`) and
//! [`records::Events`] (`EVNT`). `docs/blocks.md` describes the format for readers outside Rust.
//!
//! JSON rather than a binary layout because the blocks are rare (one per second at most) and the analyzer,
//! scripts and a human with `tshark -V` can all read it; each record carries a
//! [`version`](records::VERSION), and readers take what they know of any version.

use serde::Serialize;

use crate::read::CustomBlock;

/// IANA's Private Enterprise Number for documentation use (RFC 5612): the project has none of its own, and
/// this one is guaranteed to mean nothing else.
pub const PEN: u32 = 32473;

pub mod records;

pub use records::{Record, VERSION};

/// Record type of the DCQCN knobs ([`records::Knobs`]).
pub const KNOBS: [u8; 4] = *b"KNOB";
/// Record type of a counter sample ([`records::Counters`]).
pub const COUNTERS: [u8; 4] = *b"CTRS";
/// Record type of the probe's own statistics ([`records::Probe`]).
pub const PROBE: [u8; 4] = *b"PROB";
/// Record type of the kernel's packet drops while a file was open ([`records::Drops`]).
pub const DROPS: [u8; 4] = *b"DROP";
/// Record type of the kernel events of one interval ([`records::Events`]).
pub const EVENTS: [u8; 4] = *b"EVNT";

/// Encodes one record of any shape: the type, then the value as JSON. Writers use [`encode_record`]; this
/// is for tests and tools that build a block by hand (an older writer's, a malformed one).
pub fn encode<T: Serialize>(kind: [u8; 4], value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = kind.to_vec();
    serde_json::to_writer(&mut out, value)?;
    Ok(out)
}

/// Encodes a typed record under its own type.
pub fn encode_record<R: Record>(record: &R) -> serde_json::Result<Vec<u8>> {
    encode(R::KIND, record)
}

/// Splits block data into its record type and its JSON text; `None` for data too short to be ours.
pub fn split(data: &[u8]) -> Option<([u8; 4], &[u8])> {
    let kind: [u8; 4] = data.get(..4)?.try_into().ok()?;
    // pcapng pads block data to 4 bytes with zeros.
    let json = data.get(4..)?;
    let end = json.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    Some((kind, json.get(..end)?))
}

/// Reads block data as a record of type `R`; `None` when it is another type or does not parse.
pub fn decode<R: Record>(data: &[u8]) -> Option<R> {
    let (kind, json) = split(data)?;
    if kind != R::KIND {
        return None;
    }
    serde_json::from_slice(json).ok()
}

/// Every record of type `R` among a capture's custom blocks, in file order. Blocks of other enterprises,
/// other types, or that do not parse are passed over.
pub fn read<R: Record>(blocks: &[CustomBlock]) -> impl Iterator<Item = R> + '_ {
    blocks
        .iter()
        .filter(|b| b.pen == PEN)
        .filter_map(|b| decode(&b.data))
}

#[cfg(test)]
mod tests;
