//! CNP ↔ data-flow pairing on real handshakes and traffic, and the timing fallback on crafted frames.

use std::net::IpAddr;
use std::path::Path;

use crate::common::shared_capture;
use roce_capture::{CaptureReader, LinkType, Record};
use roce_core::decode::Decoder;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Method, Pairing, PairingPass};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

fn pair_file(path: &Path) -> Pairing {
    let mut r = CaptureReader::open(path).unwrap();
    let dec = Decoder::default();
    let mut pass = PairingPass::default();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&dec.decode(n, &rec));
    }
    pass.finish()
}

fn key(src: &str, dst: &str, dest_qp: u32) -> FlowKey {
    FlowKey {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        dest_qp,
    }
}

#[test]
fn cm_handshake_pairs_both_directions() {
    // test.pcap: REQ from .25, REP from .24, then RDMA WRITE .25→.24 to QP 0x11 and ACKs back to QP 0x17.
    let Some(cap_test) = shared_capture("test.pcap") else {
        return;
    };
    let p = pair_file(&cap_test);
    let fwd = p
        .of_flow(&key("192.168.2.25", "192.168.2.24", 0x11))
        .expect("paired");
    assert_eq!((fwd.sender_qp, fwd.method), (0x17, Method::CmMad));
    let rev = p
        .of_flow(&key("192.168.2.24", "192.168.2.25", 0x17))
        .expect("paired");
    assert_eq!((rev.sender_qp, rev.method), (0x11, Method::CmMad));
}

#[test]
fn acks_pair_a_connection_without_cm() {
    // roce.pcap has no CM exchange: .6 sends to QP 0x45 on .4, .4 acknowledges to QP 0x48 on .6.
    let Some(cap_roce) = shared_capture("roce.pcap") else {
        return;
    };
    let p = pair_file(&cap_roce);
    let fwd = p
        .of_flow(&key("192.168.70.6", "192.168.70.4", 0x45))
        .expect("paired");
    assert_eq!((fwd.sender_qp, fwd.method), (0x48, Method::ReverseTraffic));
    assert!(fwd.evidence >= 30, "{fwd:?}");
    let cnp_to_sender = key("192.168.70.4", "192.168.70.6", 0x48);
    assert_eq!(p.of_cnp(&cnp_to_sender).map(|x| x.receiver_qp), Some(0x45));
}

fn frame(src: u8, dst: u8, ecn: u8, bth: BthRepr, payload: &[u8]) -> Vec<u8> {
    crate::common::v4_frame(src, dst, ecn, bth, ExtHeaders::default(), payload)
}

fn send(qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(Opcode::UC_SEND_ONLY, qp, psn)
}

#[test]
fn cnps_after_ce_pair_by_timing() {
    // Two UC flows from .1 to .2 (no ACKs to learn from); CE only on QP 0x200, whose sender QP is 0x99.
    let dec = Decoder::default();
    let mut pass = PairingPass::default();
    let mut t = 1_000_000u64;
    let mut n = 0;
    let mut feed = |bytes: Vec<u8>, t: u64, pass: &mut PairingPass| {
        n += 1;
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            ts_ns: t,
            caplen: bytes.len() as u32,
            len: bytes.len() as u32,
            data: &bytes,
            offset: 0,
        };
        pass.frame(&dec.decode(n, &rec));
    };
    for i in 0..50u32 {
        feed(frame(1, 2, 2, send(0x100, i), &[0; 64]), t, &mut pass);
        feed(frame(1, 2, 3, send(0x200, i), &[0; 64]), t + 10, &mut pass);
        // The NP answers the CE mark 3 µs later.
        feed(
            frame(2, 1, 2, BthRepr::cnp(0x99), &[0; 16]),
            t + 3_010,
            &mut pass,
        );
        t += 100_000;
    }
    let p = pass.finish();
    let pair = p
        .of_flow(&key("10.0.0.1", "10.0.0.2", 0x200))
        .expect("paired");
    assert_eq!((pair.sender_qp, pair.method), (0x99, Method::Timing));
    assert_eq!(pair.evidence, 50);
    assert!(p.of_flow(&key("10.0.0.1", "10.0.0.2", 0x100)).is_none());
    let ip: IpAddr = "10.0.0.2".parse().unwrap();
    assert_eq!(
        p.of_cnp(&FlowKey {
            src: ip,
            dst: "10.0.0.1".parse().unwrap(),
            dest_qp: 0x99
        })
        .map(|x| x.receiver_qp),
        Some(0x200)
    );
}
