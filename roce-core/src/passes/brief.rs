//! A frame in brief: what the pairing, rates and hosts passes read of a decoded frame, owned.
//!
//! A [`Frame`] borrows its record's bytes, which the reader reuses for the next record, so a frame cannot
//! travel to another thread. The report runs those three passes on a thread beside the loop that decodes;
//! before this type they were sent copies of the records and decoded each one again (a fifth of that
//! thread's time). They read a handful of fields, all fixed in size but for a CM MAD's payload, which the
//! pairing needs only from the rare datagrams to QP1: the message is parsed here, once, and travels parsed.
//! So the frame is decoded once, and what crosses the thread is these few fields rather than the record.
//!
//! Every caller of the three passes goes through [`Brief::of`], on one thread or two, so the passes see the
//! same fields whichever way they run.

use roce_wire::BthRepr;
use roce_wire::mad::{CmMessage, QP1, parse_cm};

use crate::decode::{Frame, IpInfo, Kind};

/// The fields of a frame the pairing, rates and hosts passes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Brief {
    /// The capture's timestamp in ns since the epoch.
    pub ts_ns: u64,
    /// The tap's recorded `if_speed`, bit/s, which gives its line rate.
    pub speed_bps: Option<u64>,
    /// The tap's index over the capture.
    pub iface: u32,
    /// Bytes the frame had on the wire.
    pub len: u32,
    /// What the frame is.
    pub kind: Kind,
    /// The outer VLAN tag's priority code point.
    pub pcp: Option<u8>,
    /// The Ethernet source.
    pub src_mac: Option<[u8; 6]>,
    /// The IP layer (or a RoCEv1 GRH).
    pub ip: Option<IpInfo>,
    /// The transport headers, when the frame is RoCE and its BTH was captured.
    pub roce: Option<BriefRoce>,
}

/// The transport headers of a RoCE frame, as far as the passes read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BriefRoce {
    /// The BTH.
    pub bth: BthRepr,
    /// The DETH's source QP, when the frame is a datagram and its DETH was captured.
    pub src_qp: Option<u32>,
    /// The RETH's DMA length, when the frame has a RETH and it was captured.
    pub dma_len: Option<u32>,
    /// The payload's length on the wire (see `LaxRocePacket::payload_len`); `u32::MAX` stands for any length
    /// beyond it, which no frame of a `u32` length reaches.
    pub payload_len: Option<u32>,
    /// The CM message of a datagram to QP1 (the GSI), when its MAD was captured and is one.
    pub cm: Option<CmMessage>,
}

impl Brief {
    /// The brief of a decoded frame. Inlined: it runs for every frame on the thread that decodes, in another
    /// crate than this one, and as a call it cost that thread about 30 instructions a frame more.
    #[inline]
    pub fn of(f: &Frame<'_>) -> Brief {
        let roce = f.roce.as_ref().and_then(|r| {
            let bth = r.packet.bth?;
            let src_qp = r.packet.ext.deth.map(|d| d.src_qp);
            let cm = if src_qp.is_some() && bth.dest_qp == QP1 {
                f.data
                    .get(r.payload_offset..)
                    .and_then(|mad| parse_cm(mad).ok().flatten())
            } else {
                None
            };
            Some(BriefRoce {
                bth,
                src_qp,
                dma_len: r.packet.ext.reth.map(|reth| reth.dma_len),
                payload_len: r
                    .packet
                    .payload_len
                    .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
                cm,
            })
        });
        Brief {
            ts_ns: f.ts_ns,
            speed_bps: f.speed_bps,
            iface: f.iface,
            len: f.len,
            kind: f.kind,
            pcp: f.pcp,
            src_mac: f.src_mac,
            ip: f.ip,
            roce,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use roce_capture::{LinkType, Record};
    use roce_wire::ext::{DethRepr, RethRepr};
    use roce_wire::mad::CmMadRepr;
    use roce_wire::{ExtHeaders, Opcode};
    use testkit::frames::v4_frame;

    fn brief(frame: &[u8]) -> Brief {
        let rec = Record {
            iface: 2,
            link: LinkType::ETHERNET,
            speed_bps: Some(25_000_000_000),
            ts_ns: 7,
            caplen: frame.len() as u32,
            len: frame.len() as u32,
            data: frame,
            offset: 0,
        };
        Brief::of(&Decoder::default().decode(1, &rec))
    }

    /// A WRITE request keeps its BTH, its RETH's length and its payload's, and the frame's own facts.
    #[test]
    fn a_write_keeps_what_the_passes_read() {
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 9,
                dma_len: 8192,
            }),
            ..ExtHeaders::default()
        };
        let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_FIRST, 0x12, 5);
        let b = brief(&v4_frame(1, 2, 3, bth, ext, &[0; 256]));
        assert_eq!(
            (b.ts_ns, b.iface, b.kind, b.speed_bps),
            (7, 2, Kind::Roce, Some(25_000_000_000))
        );
        assert_eq!(b.ip.map(|ip| (ip.dscp, ip.ecn)), Some((26, 3)));
        assert_eq!(b.src_mac, Some([2, 0, 0, 0, 0, 1]));
        let r = b.roce.unwrap();
        assert_eq!(
            (r.bth, r.dma_len, r.payload_len),
            (bth, Some(8192), Some(256))
        );
        assert_eq!((r.src_qp, r.cm), (None, None));
    }

    /// A datagram to QP1 carries its CM message parsed; one to another QP only its source QP.
    #[test]
    fn a_cm_mad_travels_parsed() {
        let req = CmMessage::Req {
            local_comm_id: 0x1234,
            local_qpn: 0x01bab0,
            starting_psn: 77,
        };
        let mut mad = vec![0; CmMadRepr::LEN];
        CmMadRepr::new(1, req).emit(&mut mad).unwrap();
        let ud = |dest_qp| {
            let ext = ExtHeaders {
                deth: Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..ExtHeaders::default()
            };
            let bth = BthRepr::new(Opcode::UD_SEND_ONLY, dest_qp, 0);
            brief(&v4_frame(1, 2, 0, bth, ext, &mad)).roce.unwrap()
        };
        let to_gsi = ud(QP1);
        assert_eq!((to_gsi.src_qp, to_gsi.cm), (Some(1), Some(req)));
        let elsewhere = ud(0x40);
        assert_eq!((elsewhere.src_qp, elsewhere.cm), (Some(1), None));
    }
}
