//! Packets from real captures, as literal bytes, decoded and checked against what tshark shows for them; and,
//! when the public captures are beside the repository, the ICRC of every RoCE frame in them.

mod common;

use common::{captures_dir, hex, read_pcap, split_roce_v2};
use roce_wire::*;

/// Parses a RoCEv2 frame strictly and checks its ICRC; returns the UDP payload for further checks.
fn decode(frame: &[u8]) -> (Vec<u8>, bool) {
    let s = split_roce_v2(frame).expect("a RoCEv2 frame");
    let ok = icrc_matches(s.ip, s.udp).unwrap();
    (s.udp[8..].to_vec(), ok)
}

#[test]
fn roce_pcap_send_only_with_immediate() {
    // roce.pcap frame 15 (hardware NIC): pad 3, ImmDt 1, 161-byte HTTP request as payload.
    let f = hex(
        "183d5ebf5192183d5ebf43710800450200c00000400040112cd0c0a84604c0a84606004512b700ac00000570ffff100000488000000000000001474554202f20485454502f312e310d0a557365722d4167656e743a20576765742f312e31392e3520286c696e75782d676e75290d0a4163636570743a202a2f2a0d0a4163636570742d456e636f64696e673a206964656e746974790d0a486f73743a206c6f63616c686f73743a383538350d0a436f6e6e656374696f6e3a204b6565702d416c6976650d0a0d0a00000072c340a7",
    );
    let (udp_payload, icrc_ok) = decode(&f);
    assert!(icrc_ok);
    let p = RocePacket::parse(&udp_payload).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(p.bth.opcode.name(), "RC_SEND_ONLY_WITH_IMMEDIATE");
    assert_eq!(
        (p.bth.se, p.bth.migreq, p.bth.pad_count, p.bth.tver),
        (false, true, 3, 0)
    );
    assert_eq!(p.bth.dest_qp, 0x48);
    assert_eq!(p.bth.psn, 0);
    assert!(p.bth.ack_req);
    assert_eq!(
        p.ext,
        ExtHeaders {
            imm: Some(1),
            ..ExtHeaders::default()
        }
    );
    assert_eq!(p.header_len, 16);
    assert!(p.payload.starts_with(b"GET / HTTP/1.1\r\n"));
    assert!(p.payload.ends_with(b"\r\n\r\n"));
    assert_eq!(p.payload.len(), 0xac - 8 - 16 - 3 - 4);
    assert_eq!(p.pad, &[0, 0, 0]);
    // tshark shows the ICRC as 0x72c340a7, reading the wire bytes big-endian; ours is least significant first.
    assert_eq!(p.icrc, 0xa740_c372);
}

#[test]
fn roce_pcap_acks() {
    // roce.pcap frames 16 and 26: ACKs with credit codes 6 and 5, MSN 1 and 3.
    for (f, qp, psn, credits, msn) in [
        (
            "183d5ebf4371183d5ebf51920800450200300000400040112d60c0a84606c0a84604004812b7001c00001140ffff000000450000000006000001259cc216",
            0x45,
            0,
            6,
            1,
        ),
        (
            "183d5ebf5192183d5ebf43710800450200300000400040112d60c0a84604c0a84606004512b7001c00001140ffff000000480000000505000003b4a6291e",
            0x48,
            5,
            5,
            3,
        ),
    ] {
        let (udp_payload, icrc_ok) = decode(&hex(f));
        assert!(icrc_ok);
        let p = RocePacket::parse(&udp_payload).unwrap();
        assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
        assert!(p.bth.opcode.is_ack());
        assert_eq!((p.bth.dest_qp, p.bth.psn), (qp, psn));
        let aeth = p.ext.aeth.unwrap();
        assert_eq!(aeth.kind(), AethKind::Ack { credits });
        assert_eq!(aeth.msn, msn);
        assert!(p.payload.is_empty());
    }
}

#[test]
fn soft_roce_write_ack_read() {
    // test.pcap frames 4 (RDMA WRITE ONLY, 18 bytes + pad 2), 5 (ACK) and 6 (READ REQUEST), from Soft-RoCE.
    let write = hex(
        "5254008b2d12525400daf92d08004500005035c7400040117f54c0a80219c0a80218f24112b7003c00000a20ffff0000001180c232980000aaab26b580000000022000000012636c69656e742d77726f74652d74686973000000403964ee",
    );
    let (b, ok) = decode(&write);
    assert!(ok);
    let p = RocePacket::parse(&b).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(
        (p.bth.dest_qp, p.bth.psn, p.bth.pad_count),
        (0x11, 0xc23298, 2)
    );
    assert_eq!(
        p.ext.reth,
        Some(RethRepr {
            va: 0xaaab_26b5_8000,
            rkey: 0x220,
            dma_len: 18
        })
    );
    assert_eq!(p.payload, b"client-wrote-this\0");

    let ack = hex(
        "525400daf92d5254008b2d12080045000030dfcf40004011d56bc0a80218c0a80219df9412b7001c00001100ffff0000001700c232981f000001884e6b4a",
    );
    let (b, ok) = decode(&ack);
    assert!(ok);
    let p = RocePacket::parse(&b).unwrap();
    assert_eq!(
        (p.bth.opcode, p.bth.dest_qp, p.bth.psn),
        (Opcode::RC_ACKNOWLEDGE, 0x17, 0xc23298)
    );
    assert_eq!(p.ext.aeth.unwrap().kind(), AethKind::Ack { credits: 31 });

    let read = hex(
        "5254008b2d12525400daf92d08004500003c35c8400040117f67c0a80219c0a80218f24112b7002800000c00ffff0000001180c232990000aaab26b58000000002200000100022c3bf71",
    );
    let (b, ok) = decode(&read);
    assert!(ok);
    let p = RocePacket::parse(&b).unwrap();
    assert!(p.bth.opcode.is_read_request());
    assert_eq!(p.ext.reth.unwrap().dma_len, 0x1000);

    // One flipped payload bit is caught.
    let mut bad = write.clone();
    bad[70] ^= 0x20;
    assert!(!decode(&bad).1);
}

#[test]
fn hardware_cnp_and_pcpp_read_request() {
    let cnp = hex(
        "e41d2dab2bc27cfe90643b3208004 5c2003c718c400040119161 0a0011010a001201000012b700280000 8100ffff4000011800000000 00000000000000000000000000000000 82fd002a",
    );
    let s = split_roce_v2(&cnp).unwrap();
    assert_eq!(s.ip[1] >> 2, 48, "DSCP 48");
    assert_eq!(s.ip[1] & 3, 2, "ECT(0)");
    assert!(icrc_matches(s.ip, s.udp).unwrap());
    let p = RocePacket::parse(&s.udp[8..]).unwrap();
    assert_eq!(p.bth, BthRepr::cnp(0x118));
    assert_eq!(p.bth.opcode.name(), "CNP");
    assert_eq!(p.payload, &[0u8; 16]);

    let rr = hex(
        "000c29ae1ca4000c2989a2e508004500003cbe1040004011 8a4bc0a83881c0a83883df9412b70028 00000c00ffff000000118054cb6300007fee260fb000000002b80001000008c6154a",
    );
    let s = split_roce_v2(&rr).unwrap();
    assert!(icrc_matches(s.ip, s.udp).unwrap());
    let p = RocePacket::parse(&s.udp[8..]).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!((p.bth.dest_qp, p.bth.psn), (0x11, 0x54cb63));
    assert_eq!(
        p.ext.reth,
        Some(RethRepr {
            va: 0x7fee_260f_b000,
            rkey: 0x2b8,
            dma_len: 65536
        })
    );
}

#[test]
fn truncated_capture_is_unknown_not_bad() {
    // roce.pcap frame 15 cut by a 96-byte snap length.
    let f = hex(
        "183d5ebf5192183d5ebf43710800450200c00000400040112cd0c0a84604c0a84606004512b700ac00000570ffff100000488000000000000001474554202f20485454502f312e310d0a557365722d4167656e743a20576765742f312e31392e3520286c696e75782d676e75290d0a4163636570743a202a2f2a0d0a4163636570742d456e636f64696e673a206964656e746974790d0a486f73743a206c6f63616c686f73743a383538350d0a436f6e6e656374696f6e3a204b6565702d416c6976650d0a0d0a00000072c340a7",
    );
    let cut = &f[..96];
    let s = split_roce_v2(cut).unwrap();
    let udp_len = usize::from(u16::from_be_bytes([s.captured_udp[4], s.captured_udp[5]]));
    let lax = RocePacket::parse_lax(&s.captured_udp[8..], udp_len - 8);
    assert_eq!(lax.bth.unwrap().opcode, Opcode::RC_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(lax.ext.imm, Some(1));
    assert_eq!(lax.header_len, 16);
    assert_eq!(lax.payload_len, Some(141));
    assert_eq!(lax.payload.len(), 96 - 42 - 16);
    assert_eq!(lax.icrc, None);
    assert_eq!(
        lax.stop,
        Some(Error::Len(LenError {
            required_len: 141,
            len: 38,
            layer: Layer::Payload,
            layer_start_offset: 16
        }))
    );
}

#[test]
fn pause_frames_from_the_wireshark_sample() {
    let frames = [
        "0180c2000001000f5d30415088080001000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
        "0180c2000001000f5d3041508808 0001ffff0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    ];
    for (f, quanta) in frames.iter().zip([0u16, 0xffff]) {
        let f = hex(f);
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), ETHERTYPE_MAC_CONTROL);
        assert_eq!(
            MacControlRepr::parse(&f[14..]),
            Ok(MacControlRepr::Pause { quanta })
        );
    }
}

/// Every RoCEv2 frame in the public captures has a good ICRC and parses strictly; every PAUSE frame parses.
#[test]
fn every_frame_of_the_public_captures() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let expect = [
        ("roce.pcap", 105usize),
        ("test.pcap", 12),
        ("scapy_roce_uts_cx4lx_cnp.pcap", 1),
        ("pcpp_pr1603_InfiniBandPacket.pcap", 1),
        ("tcp-ecn-sample.pcap", 0),
    ];
    for (name, count) in expect {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let mut n = 0;
        let mut cm = 0;
        for (frame, orig) in read_pcap(&bytes) {
            assert_eq!(
                frame.len(),
                orig,
                "{name}: these captures are not truncated"
            );
            let Some(s) = split_roce_v2(&frame) else {
                continue;
            };
            n += 1;
            assert!(
                icrc_matches(s.ip, s.udp).unwrap(),
                "{name}: frame {n} has a bad ICRC"
            );
            let p = RocePacket::parse(&s.udp[8..]).unwrap_or_else(|e| panic!("{name}: {e}"));
            let lax = RocePacket::parse_lax(&s.udp[8..], s.udp.len() - 8);
            assert!(lax.is_complete());
            assert_eq!(lax.payload, p.payload);
            assert_eq!(lax.icrc, Some(p.icrc));
            if p.bth.opcode == Opcode::UD_SEND_ONLY && p.bth.dest_qp == 1 {
                if let Ok(Some(_)) = parse_cm(p.payload) {
                    cm += 1;
                }
            }
        }
        assert_eq!(n, count, "{name}");
        if name == "test.pcap" {
            assert_eq!(cm, 5, "REQ, REP, RTU, DREQ, DREP");
        }
    }
    let bytes = std::fs::read(dir.join("Ethernet_Pause_Frame.pcap")).unwrap();
    let quanta: Vec<_> = read_pcap(&bytes)
        .iter()
        .map(|(f, _)| match MacControlRepr::parse(&f[14..]).unwrap() {
            MacControlRepr::Pause { quanta } => quanta,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(quanta, [0, 0xffff]);
}
