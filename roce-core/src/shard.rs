//! Which of several threads a record's state belongs to, found from its headers before it is decoded.
//!
//! The passes keep their state per flow (or per host pair, or per PFC source): when several threads share a
//! capture, each owns the state of some keys, and every record must go to the thread that owns its key, in the
//! order the capture holds them, so that each key's state sees exactly what one thread alone would have seen.
//! Finding the key must cost far less than decoding (the thread that reads records finds it for every one of
//! them), so the common shape of a RoCEv2 frame (Ethernet, at most one VLAN tag, IPv4 without fragments, UDP to
//! the RoCEv2 port) is read at fixed places; every other record is decoded by [`Decoder`] to find its key, so
//! that the two ways always agree on a key: the fast way reads the same bytes the decoder would take the
//! addresses and the QP from.

use std::hash::Hasher;
use std::net::IpAddr;

use roce_capture::{LinkType, Record};
use rustc_hash::FxHasher;

use crate::decode::{Decoder, Kind};

/// What records are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// (tap, source, destination, destination QP): what `stats`' tables are keyed by.
    Flow,
    /// The two hosts, whichever sends, at every tap: what the pairing of CNP streams with flows needs together.
    HostPair,
}

/// Assigns records to one of `shards` owners.
#[derive(Debug, Clone, Copy)]
pub struct Sharder {
    shards: usize,
    grouping: Grouping,
    decoder: Decoder,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const UDP: u8 = 17;
const ROCEV2_PORT: u16 = 4791;

/// The addresses and the BTH destination QP of a RoCE frame (of a CNP too), the addresses as plain numbers
/// (an IPv4 address in the low 32 bits), hashed as five words rather than as `IpAddr`s. An IPv4 address and
/// the IPv6 address `::a.b.c.d` look alike here, which only means their flows may share an owner; one flow
/// always finds the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    src: u128,
    dst: u128,
    dest_qp: u32,
}

fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Sharder {
    /// Records over `shards` owners (at least one), grouped by `grouping`; `decoder` decides what RoCE is
    /// (its extra UDP port) for the records the fast way does not read.
    pub fn new(shards: usize, grouping: Grouping, decoder: Decoder) -> Self {
        Sharder {
            shards: shards.clamp(1, u32::MAX as usize),
            grouping,
            // The ICRC says nothing of a key.
            decoder: Decoder {
                check_icrc: false,
                ..decoder
            },
        }
    }

    /// How many owners there are.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The owner of `rec`'s state: the same for every record of one key, and 0 for records without one (PFC,
    /// PAUSE, other traffic), whose passes keep their state in one place.
    pub fn shard(&self, rec: &Record<'_>) -> usize {
        if self.shards == 1 {
            return 0;
        }
        let Some(key) = fast_key(rec, self.decoder.extra_port).or_else(|| self.decoded_key(rec))
        else {
            return 0;
        };
        let (a, b, rest) = match self.grouping {
            Grouping::Flow => (
                key.src,
                key.dst,
                u64::from(rec.iface) << 32 | u64::from(key.dest_qp),
            ),
            Grouping::HostPair => (key.src.min(key.dst), key.src.max(key.dst), 0),
        };
        let mut h = FxHasher::default();
        for w in [a as u64, (a >> 64) as u64, b as u64, (b >> 64) as u64, rest] {
            h.write_u64(w);
        }
        // The high bits of an FxHash are its best mixed; scaled onto the owners by a multiplication, since a
        // division by a count known only at run time costs tens of cycles for every record.
        (((h.finish() >> 32) * self.shards as u64) >> 32) as usize
    }

    fn decoded_key(&self, rec: &Record<'_>) -> Option<Key> {
        let f = self.decoder.decode(0, rec);
        if !matches!(f.kind, Kind::Roce | Kind::Cnp) {
            return None;
        }
        let (ip, bth) = (f.ip?, f.roce.as_ref()?.packet.bth?);
        Some(Key {
            src: number(ip.src),
            dst: number(ip.dst),
            dest_qp: bth.dest_qp,
        })
    }
}

/// The key of an Ethernet frame with at most one VLAN tag, IPv4 unfragmented, UDP to the RoCEv2 port (or
/// `extra_port`), with its BTH's destination QP captured; `None` for anything else.
fn fast_key(rec: &Record<'_>, extra_port: Option<u16>) -> Option<Key> {
    if rec.link != LinkType::ETHERNET {
        return None;
    }
    let d = rec.data;
    let be16 = |at: usize| d.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let ip = match be16(12)? {
        ETHERTYPE_IPV4 => 14,
        ETHERTYPE_VLAN if be16(16)? == ETHERTYPE_IPV4 => 18,
        _ => return None,
    };
    let v = *d.get(ip)?;
    let ihl = usize::from(v & 0x0f) * 4;
    // Fragments: the flags' MF bit or a fragment offset.
    let frag = be16(ip + 6)?;
    if v >> 4 != 4 || ihl < 20 || d.get(ip + 9) != Some(&UDP) || frag & 0x3fff != 0 {
        return None;
    }
    let udp = ip + ihl;
    let dport = be16(udp + 2)?;
    if dport != ROCEV2_PORT && Some(dport) != extra_port {
        return None;
    }
    let bth = udp + 8;
    let qp = d.get(bth + 5..bth + 8)?;
    let addr = |at: usize| -> Option<u128> {
        let b: [u8; 4] = d.get(at..at + 4)?.try_into().ok()?;
        Some(u128::from(u32::from_be_bytes(b)))
    };
    Some(Key {
        src: addr(ip + 12)?,
        dst: addr(ip + 16)?,
        dest_qp: u32::from_be_bytes([0, qp[0], qp[1], qp[2]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{BthRepr, ExtHeaders, Opcode};

    fn record(data: &[u8], iface: u32) -> Record<'_> {
        Record {
            iface,
            link: LinkType::ETHERNET,
            speed_bps: None,
            ts_ns: 0,
            caplen: data.len() as u32,
            len: data.len() as u32,
            data,
            offset: 0,
        }
    }

    /// The fast way reads the key the decoder reads, on every frame of the corpus it takes.
    #[test]
    fn the_fast_key_is_the_decoders_key() {
        let decoder = Decoder::default();
        let s = Sharder::new(7, Grouping::Flow, decoder);
        let mut fast = 0;
        testkit::frames::for_each_frame(
            &testkit::workspace().join("samples/corpus/corpus.pcapng"),
            |rec| {
                if let Some(k) = fast_key(rec, None) {
                    fast += 1;
                    assert_eq!(s.decoded_key(rec), Some(k), "frame at {}", rec.offset);
                }
            },
        );
        assert!(
            fast > 20,
            "the corpus has RoCEv2 frames the fast way reads: {fast}"
        );
    }

    #[test]
    fn one_flow_one_owner_and_records_without_a_key_go_to_the_first() {
        let s = Sharder::new(4, Grouping::Flow, Decoder::default());
        let data = testkit::frames::v4_frame(
            1,
            2,
            2,
            BthRepr::new(Opcode::RC_SEND_ONLY, 0x1234, 9),
            ExtHeaders::default(),
            &[0; 64],
        );
        let owner = s.shard(&record(&data, 0));
        // The same flow's record cut short after its BTH goes to the same owner.
        assert_eq!(s.shard(&record(&data[..14 + 20 + 8 + 12], 0)), owner);
        let owners: std::collections::BTreeSet<usize> = (0..64u32)
            .map(|qp| {
                let d = testkit::frames::v4_frame(
                    1,
                    2,
                    2,
                    BthRepr::new(Opcode::RC_SEND_ONLY, qp, 9),
                    ExtHeaders::default(),
                    &[0; 64],
                );
                s.shard(&record(&d, 0))
            })
            .collect();
        assert_eq!(owners.len(), 4, "64 flows spread over the 4 owners");
        assert_eq!(s.shard(&record(&[0u8; 60], 0)), 0);
        // Both directions of a host pair share an owner when grouped by host pair.
        let hp = Sharder::new(4, Grouping::HostPair, Decoder::default());
        let back = testkit::frames::v4_frame(
            2,
            1,
            2,
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x77, 9),
            ExtHeaders {
                aeth: Some(roce_wire::ext::AethRepr {
                    syndrome: 0x1f,
                    msn: 1,
                }),
                ..ExtHeaders::default()
            },
            &[],
        );
        assert_eq!(hp.shard(&record(&data, 0)), hp.shard(&record(&back, 3)));
    }
}
