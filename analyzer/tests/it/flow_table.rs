//! The flow table's lookup shortcuts (a slot per low 16 bits of the destination QP, then the hash map) must
//! never mix two flows up: flows whose QPs share a slot, and flows to the same QP from different hosts, are
//! interleaved frame by frame here and each must come out with exactly its own packets and PSN story.

use roce_capture::{LinkType, Record};
use roce_core::decode::Decoder;
use roce_core::passes::flows::FlowsPass;
use roce_wire::{BthRepr, ExtHeaders, Opcode};

fn frame(src: u8, qp: u32, psn: u32) -> Vec<u8> {
    let bth = BthRepr::new(Opcode::RC_SEND_ONLY, qp, psn);
    crate::common::v4_frame(src, 9, 2, bth, ExtHeaders::default(), &[0; 64])
}

#[test]
fn flows_sharing_a_qp_slot_or_a_qp_number_stay_apart() {
    // Three QPs with the same low 16 bits, each targeted from two hosts: six flows. Each flow's PSNs run in
    // order, except that flow (src 2, QP 0x020005) skips one PSN and flow (src 1, QP 0x000005) repeats one.
    let qps = [0x00_0005, 0x01_0005, 0x02_0005];
    let srcs = [1u8, 2];
    let dec = Decoder::default();
    let mut pass = FlowsPass::default();
    let mut next_psn = std::collections::HashMap::new();
    let mut n = 0u64;
    for round in 0..50u32 {
        for &qp in &qps {
            for &src in &srcs {
                let psn = next_psn.entry((src, qp)).or_insert(100u32);
                if src == 2 && qp == 0x02_0005 && round == 10 {
                    *psn += 1; // a PSN never seen
                }
                if src == 1 && qp == 0x00_0005 && round == 20 {
                    *psn -= 1; // the previous PSN again
                }
                let bytes = frame(src, qp, *psn);
                *psn += 1;
                n += 1;
                let rec = Record {
                    iface: 0,
                    link: LinkType::ETHERNET,
                    speed_bps: None,
                    ts_ns: n * 1000,
                    caplen: bytes.len() as u32,
                    len: bytes.len() as u32,
                    data: &bytes,
                    offset: 0,
                };
                pass.frame(&dec.decode(n, &rec));
            }
        }
    }
    let rows = pass.finish();
    assert_eq!(rows.len(), 6, "{rows:#?}");
    for row in &rows {
        let src = match row.src {
            std::net::IpAddr::V4(a) => a.octets()[3],
            other => panic!("unexpected source {other}"),
        };
        let gaps = u64::from(src == 2 && row.dest_qp == 0x02_0005);
        let retrans = u64::from(src == 1 && row.dest_qp == 0x00_0005);
        assert_eq!(row.packets, 50, "{row:?}");
        assert_eq!(row.psn_gaps, gaps, "{row:?}");
        assert_eq!(row.retransmissions, retrans, "{row:?}");
        assert_eq!(row.ect_packets, 50, "{row:?}");
    }
}
