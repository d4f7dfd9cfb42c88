//! One record of the probe's rings, read from its bytes: the frame with its timestamp, interface and the
//! VLAN tag the kernel had taken out of it, put back.

use tracer_common::{EVENT_HEADER_LEN, MAX_SNAPLEN, PacketEvent, flag};

/// A ring-buffer record, decoded from its bytes (no pointer casts: the record is plain data in a known
/// layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRecord {
    /// The probe's time stamp (see [`RingRecord::wall_ns`]).
    pub ts_ns: u64,
    /// Length on the wire, without a tag the kernel had removed.
    pub len: u32,
    /// The interface the frame was seen on.
    pub ifindex: u32,
    /// `tracer_common::flag` bits.
    pub flags: u32,
    /// The tag the kernel had removed, when [`flag::VLAN_OFFLOADED`] is set.
    pub vlan_tci: u16,
    /// That tag's TPID.
    pub vlan_proto: u16,
    /// A `tracer_common::kind` value.
    pub kind: u32,
    /// The frame as it was on the wire: a tag the kernel had moved into the skb is put back.
    pub data: Vec<u8>,
    /// Length on the wire including that tag.
    pub wire_len: u32,
}

impl RingRecord {
    /// The record's time in ns since the epoch: the stack's receive stamp as it is, or the probe's monotonic
    /// clock reading plus `mono_to_real` (see [`crate::sys::monotonic_to_realtime_offset`]).
    pub fn wall_ns(&self, mono_to_real: u64) -> u64 {
        if self.flags & flag::TS_REALTIME != 0 {
            self.ts_ns
        } else {
            self.ts_ns.saturating_add(mono_to_real)
        }
    }
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl RingRecord {
    /// Reads a record; `None` for one too short to be ours.
    pub fn parse(b: &[u8]) -> Option<RingRecord> {
        use core::mem::offset_of;
        type Header = PacketEvent<0>;
        let ts_ns = u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?);
        let len = ne_u32(b, offset_of!(Header, len))?;
        let ifindex = ne_u32(b, offset_of!(Header, ifindex))?;
        let caplen = usize::from(ne_u16(b, offset_of!(Header, caplen))?);
        let vlan_tci = ne_u16(b, offset_of!(Header, vlan_tci))?;
        let vlan_proto = ne_u16(b, offset_of!(Header, vlan_proto))?;
        let flags = u32::from(*b.get(offset_of!(Header, flags))?);
        let kind = u32::from(*b.get(offset_of!(Header, kind))?);
        let bytes = b.get(EVENT_HEADER_LEN..EVENT_HEADER_LEN + caplen.min(MAX_SNAPLEN))?;
        let mut data = Vec::with_capacity(bytes.len() + 4);
        let mut wire_len = len;
        if flags & flag::VLAN_OFFLOADED != 0 && bytes.len() >= 12 {
            data.extend_from_slice(bytes.get(..12)?);
            data.extend_from_slice(&vlan_proto.to_be_bytes());
            data.extend_from_slice(&vlan_tci.to_be_bytes());
            data.extend_from_slice(bytes.get(12..)?);
            wire_len = len.saturating_add(4);
        } else {
            data.extend_from_slice(bytes);
        }
        Some(RingRecord {
            ts_ns,
            len,
            ifindex,
            flags,
            vlan_tci,
            vlan_proto,
            kind,
            data,
            wire_len,
        })
    }
}
