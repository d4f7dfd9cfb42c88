//! Framings and JSON keys that the generated corpus never produces but real fabrics do: IPv4 options (router
//! alert), IPv6 hop-by-hop and destination options ahead of UDP 4791, `tcpdump -i any` captures in Linux cooked
//! (SLL v1) form, responders' ACK/NAK syndromes, the RD and XRC transports, and frames cut by the snap length.
//!
//! Every frame goes through a capture file and `roce-analyzer decode --json`, so the reader, the decoder and the
//! printer are covered together. Frames are put together byte by byte here (on top of roce-wire's plain
//! frames) rather than with etherparse, which is what the decoder parses with: a builder and a parser sharing one
//! library could agree on a mistake. Where tshark can run, it must read the same addresses, ECN and BTH fields.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::common::{analyzer_json, tshark_fields, v4_frame, v6_frame};
use roce_capture::LinkType;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_wire::build::emit_mac_control;
use roce_wire::ext::{AethRepr, DethRepr, RdethRepr, RethRepr, XrcEthRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::{Value, json};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const T0: u64 = 1_700_000_000_000_000_000;

fn bth(opcode: Opcode, qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(opcode, qp, psn)
}

/// The ICRC as wire.md spells it out, for IPv4: written again here, independently of roce-wire, so that frames
/// with options carry a value the decoder has to reproduce rather than one computed by the code under test.
fn icrc_v4_by_hand(ip_header: &[u8], udp_to_icrc: &[u8]) -> u32 {
    let mut ip = ip_header.to_vec();
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = 0xff;
    ip[11] = 0xff;
    let mut rest = udp_to_icrc.to_vec();
    rest[6] = 0xff;
    rest[7] = 0xff;
    rest[8 + 4] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    h.update(&ip);
    h.update(&rest);
    h.finalize()
}

/// Puts `options` into an option-less IPv4 RoCE frame: IHL, total length, header checksum and the ICRC (which
/// covers the options) all follow, and the Ethernet padding of a short frame is dropped.
fn with_ipv4_options(frame: &[u8], options: &[u8]) -> Vec<u8> {
    assert!(options.len().is_multiple_of(4) && options.len() <= 40);
    let ip = ETH_LEN;
    let total = usize::from(u16::from_be_bytes([frame[ip + 2], frame[ip + 3]]));
    let mut out = frame[..ip + IPV4_LEN].to_vec();
    out.extend_from_slice(options);
    out.extend_from_slice(&frame[ip + IPV4_LEN..ip + total]);
    let header_len = IPV4_LEN + options.len();
    out[ip] = 0x40 | (header_len / 4) as u8;
    let new_total = u16::try_from(total + options.len()).unwrap();
    out[ip + 2..ip + 4].copy_from_slice(&new_total.to_be_bytes());
    out[ip + 10..ip + 12].fill(0);
    let sum = roce_wire::build::ipv4_checksum(&out[ip..ip + header_len]);
    out[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    let udp = ip + header_len;
    let end = out.len();
    let icrc = icrc_v4_by_hand(&out[ip..udp], &out[udp..end - 4]);
    out[end - 4..].copy_from_slice(&icrc.to_le_bytes());
    out.resize(out.len().max(60), 0);
    out
}

/// IPv6 hop-by-hop options: router alert (MLD) and a 2-byte PadN, 8 bytes in all.
const HOP_BY_HOP: u8 = 0;
/// IPv6 destination options: one 4-byte PadN, 8 bytes in all.
const DEST_OPTS: u8 = 60;

/// Chains IPv6 extension headers (of the types given, in order) between the fixed header and UDP. The ICRC is
/// left as roce-wire computed it without them: the RoCEv2 annex does not say how they would be covered.
fn with_ipv6_ext(frame: &[u8], chain: &[u8]) -> Vec<u8> {
    let ip = ETH_LEN;
    let payload_len = usize::from(u16::from_be_bytes([frame[ip + 4], frame[ip + 5]]));
    let mut out = frame[..ip + IPV6_LEN].to_vec();
    out[ip + 6] = chain[0];
    for (i, &kind) in chain.iter().enumerate() {
        let next = chain.get(i + 1).copied().unwrap_or(17);
        match kind {
            HOP_BY_HOP => out.extend_from_slice(&[next, 0, 5, 2, 0, 0, 1, 0]),
            DEST_OPTS => out.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]),
            other => panic!("no extension header of type {other} here"),
        }
    }
    out.extend_from_slice(&frame[ip + IPV6_LEN..ip + IPV6_LEN + payload_len]);
    let new_len = u16::try_from(payload_len + 8 * chain.len()).unwrap();
    out[ip + 4..ip + 6].copy_from_slice(&new_len.to_be_bytes());
    out
}

/// The Ethernet frame as `tcpdump -i any` stores it: a 16-byte SLL header (packet type, ARPHRD_ETHER, the 6-byte
/// source address padded to 8, the ethertype) in place of the Ethernet header.
fn sll(eth: &[u8], packet_type: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(eth.len() + 2);
    out.extend_from_slice(&packet_type.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&6u16.to_be_bytes());
    out.extend_from_slice(&eth[6..12]);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&eth[12..]);
    out
}

fn write_pcap(path: &Path, link: LinkType, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(file, link, 65535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(T0 + i as u64 * 1000, f, f.len() as u32)
            .unwrap();
    }
    w.into_inner().unwrap();
}

fn write_pcapng(path: &Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapngWriter::new(file, &SectionInfo::application("decode_framings")).unwrap();
    let iface = w
        .add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(iface, T0 + i as u64 * 1000, f, f.len() as u32)
            .unwrap();
    }
    w.into_inner().unwrap();
}

/// Whether tshark can run. When it cannot, the reason goes to the process's stderr directly: libtest swallows
/// `eprintln!` of a passing test, and a comparison that quietly did not happen must not look like one that did.
fn have_tshark() -> bool {
    let why = match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => return true,
        Ok(o) => format!("`tshark --version` exited with {}", o.status),
        Err(e) => format!("tshark cannot be started ({e})"),
    };
    let _ = writeln!(
        std::io::stderr(),
        "decode_framings: NOT comparing with tshark: {why}; `cargo xtask install` installs it"
    );
    false
}

/// What every RoCE frame of these captures must show: addresses, ECN, kind, opcode, QP, PSN, ICRC verdict.
struct Expect {
    src: &'static str,
    dst: &'static str,
    ecn: u64,
    kind: &'static str,
    opcode: u64,
    qp: u64,
    psn: u64,
    icrc_ok: Value,
}

fn check(frames: &[Value], expect: &[Expect]) {
    assert_eq!(frames.len(), expect.len(), "{frames:#?}");
    for (f, e) in frames.iter().zip(expect) {
        let n = &f["frame"];
        assert_eq!(f["kind"], e.kind, "frame {n}: {f}");
        assert_eq!(f["src"], e.src, "frame {n}: {f}");
        assert_eq!(f["dst"], e.dst, "frame {n}: {f}");
        assert_eq!(f["ecn"], e.ecn, "frame {n}: {f}");
        assert_eq!(f["opcode"], e.opcode, "frame {n}: {f}");
        assert_eq!(f["dest_qp"], e.qp, "frame {n}: {f}");
        assert_eq!(f["psn"], e.psn, "frame {n}: {f}");
        assert_eq!(f["icrc_ok"], e.icrc_ok, "frame {n}: {f}");
    }
}

/// tshark's view of the same frames must match ours on the fields of [`Expect`] it knows (it has no ICRC check).
fn tshark_agrees(file: &Path, ours: &[Value]) {
    if !have_tshark() {
        return;
    }
    let fields = [
        "ip.src|ipv6.src",
        "ip.dst|ipv6.dst",
        "ip.dsfield.ecn|ipv6.tclass.ecn",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
    ];
    let names: Vec<&str> = fields.iter().flat_map(|f| f.split('|')).collect();
    let rows = tshark_fields(file, &[], &names);
    assert_eq!(rows.len(), ours.len(), "{}: frame count", file.display());
    for (f, row) in ours.iter().zip(&rows) {
        if !matches!(f["kind"].as_str(), Some("roce" | "cnp")) {
            continue;
        }
        let cell = |field: &str| {
            field
                .split('|')
                .filter_map(|n| names.iter().position(|x| *x == n))
                .filter_map(|i| row.get(i))
                .map(|c| c.trim())
                .find(|c| !c.is_empty())
                .unwrap_or("")
                .to_string()
        };
        let number = |field: &str| {
            let c = cell(field);
            match c.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => c.parse().ok(),
            }
        };
        let n = &f["frame"];
        assert_eq!(cell(fields[0]), f["src"].as_str().unwrap(), "frame {n} src");
        assert_eq!(cell(fields[1]), f["dst"].as_str().unwrap(), "frame {n} dst");
        assert_eq!(number(fields[2]), f["ecn"].as_u64(), "frame {n} ecn");
        assert_eq!(number(fields[3]), f["opcode"].as_u64(), "frame {n} opcode");
        assert_eq!(number(fields[4]), f["dest_qp"].as_u64(), "frame {n} QP");
        assert_eq!(number(fields[5]), f["psn"].as_u64(), "frame {n} PSN");
    }
}

fn reth() -> ExtHeaders {
    ExtHeaders {
        reth: Some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            dma_len: 4096,
        }),
        ..ExtHeaders::default()
    }
}

fn deth(src_qp: u32) -> ExtHeaders {
    ExtHeaders {
        deth: Some(DethRepr {
            qkey: 0x8001_0000,
            src_qp,
        }),
        ..ExtHeaders::default()
    }
}

/// Router alert (RFC 2113), then NOP, NOP, NOP, end of list.
const ROUTER_ALERT: [u8; 8] = [0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00];

#[test]
fn ip_options_and_ipv6_extension_headers_before_udp_4791() {
    let tmp = tempfile::tempdir().unwrap();
    let mut longest = [0x01u8; 40];
    longest[39] = 0;
    let frames = vec![
        with_ipv4_options(
            &v4_frame(
                1,
                2,
                3,
                bth(Opcode::RC_RDMA_WRITE_FIRST, 0x12, 0xfffffe),
                reth(),
                &[7; 256],
            ),
            &ROUTER_ALERT,
        ),
        // IHL 15, the most options there can be.
        with_ipv4_options(
            &v4_frame(
                3,
                4,
                2,
                bth(Opcode::RC_SEND_ONLY, 0x345, 7),
                ExtHeaders::default(),
                &[9; 33],
            ),
            &longest,
        ),
        // The same UD datagram without and with extension headers: only the ICRC verdict may differ.
        v6_frame(
            16,
            32,
            1,
            bth(Opcode::UD_SEND_ONLY, 0xabcdef, 0x123456),
            deth(0x42),
            &[1; 64],
        ),
        with_ipv6_ext(
            &v6_frame(
                16,
                32,
                1,
                bth(Opcode::UD_SEND_ONLY, 0xabcdef, 0x123456),
                deth(0x42),
                &[1; 64],
            ),
            &[HOP_BY_HOP, DEST_OPTS],
        ),
        with_ipv6_ext(
            &v6_frame(
                32,
                16,
                3,
                BthRepr::cnp(0x99),
                ExtHeaders::default(),
                &[0; 16],
            ),
            &[DEST_OPTS],
        ),
    ];
    let file = tmp.path().join("framings.pcapng");
    write_pcapng(&file, &frames);
    let ours = analyzer_json(&file);
    // An IPv6 frame with extension headers has `icrc_ok: null`, as the README's contract table says: roce-wire's
    // `icrc_with` refuses extension headers because the annex does not say how they would be covered, so the
    // ICRC is unknown.
    let expect = [
        Expect {
            src: "10.0.0.1",
            dst: "10.0.0.2",
            ecn: 3,
            kind: "roce",
            opcode: 0x06,
            qp: 0x12,
            psn: 0xfffffe,
            icrc_ok: json!(true),
        },
        Expect {
            src: "10.0.0.3",
            dst: "10.0.0.4",
            ecn: 2,
            kind: "roce",
            opcode: 0x04,
            qp: 0x345,
            psn: 7,
            icrc_ok: json!(true),
        },
        Expect {
            src: "2001:db8::10",
            dst: "2001:db8::20",
            ecn: 1,
            kind: "roce",
            opcode: 0x64,
            qp: 0xabcdef,
            psn: 0x123456,
            icrc_ok: json!(true),
        },
        Expect {
            src: "2001:db8::10",
            dst: "2001:db8::20",
            ecn: 1,
            kind: "roce",
            opcode: 0x64,
            qp: 0xabcdef,
            psn: 0x123456,
            icrc_ok: Value::Null,
        },
        Expect {
            src: "2001:db8::20",
            dst: "2001:db8::10",
            ecn: 3,
            kind: "cnp",
            opcode: 0x81,
            qp: 0x99,
            psn: 0,
            icrc_ok: Value::Null,
        },
    ];
    check(&ours, &expect);
    // The headers after the BTH are found past the options as well.
    assert_eq!(
        ours[0]["reth"],
        json!({"va": 0x7f00_0000_1000u64, "rkey": 0x1234, "len": 4096})
    );
    assert_eq!(ours[0]["payload_len"], 256);
    assert_eq!(ours[1]["payload_len"], 33);
    assert_eq!(ours[1]["pad"], 3);
    for f in &ours[2..4] {
        assert_eq!(f["deth"], json!({"qkey": 0x8001_0000u64, "src_qp": 0x42}));
        assert_eq!(f["payload_len"], 64);
    }
    assert_eq!(ours[4]["payload_len"], 16);
    tshark_agrees(&file, &ours);
}

#[test]
fn linux_cooked_v1_capture() {
    let tmp = tempfile::tempdir().unwrap();
    let pfc = {
        let ctl = MacControlRepr::Pfc(PfcRepr {
            enable: 0x08,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        });
        let mut buf = [0u8; 64];
        let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &ctl, &mut buf).unwrap();
        buf[..n].to_vec()
    };
    let frames = vec![
        // Outgoing (packet type 4) and incoming (0), as `-i any` shows both directions.
        sll(
            &v4_frame(
                5,
                6,
                2,
                bth(Opcode::RC_SEND_FIRST, 0x77, 1),
                ExtHeaders::default(),
                &[3; 1024],
            ),
            4,
        ),
        sll(
            &with_ipv4_options(
                &v4_frame(
                    6,
                    5,
                    0,
                    bth(Opcode::RC_ACKNOWLEDGE, 0x66, 1),
                    ack(0x1f, 5),
                    &[],
                ),
                &ROUTER_ALERT,
            ),
            0,
        ),
        sll(
            &v6_frame(
                16,
                32,
                3,
                bth(Opcode::RC_RDMA_WRITE_ONLY, 0x1000, 0xffffff),
                reth(),
                &[4; 100],
            ),
            4,
        ),
        sll(&pfc, 0),
    ];
    let file = tmp.path().join("any.pcap");
    write_pcap(&file, LinkType::LINUX_SLL, &frames);
    let ours = analyzer_json(&file);
    let expect = [
        Expect {
            src: "10.0.0.5",
            dst: "10.0.0.6",
            ecn: 2,
            kind: "roce",
            opcode: 0x00,
            qp: 0x77,
            psn: 1,
            icrc_ok: json!(true),
        },
        Expect {
            src: "10.0.0.6",
            dst: "10.0.0.5",
            ecn: 0,
            kind: "roce",
            opcode: 0x11,
            qp: 0x66,
            psn: 1,
            icrc_ok: json!(true),
        },
        Expect {
            src: "2001:db8::10",
            dst: "2001:db8::20",
            ecn: 3,
            kind: "roce",
            opcode: 0x0a,
            qp: 0x1000,
            psn: 0xffffff,
            icrc_ok: json!(true),
        },
    ];
    check(&ours[..3], &expect);
    assert_eq!(ours[0]["payload_len"], 1024);
    assert_eq!(ours[1]["aeth"]["msn"], 5);
    assert_eq!(ours[2]["reth"]["len"], 4096);
    let p = &ours[3];
    assert_eq!(p["kind"], "pfc", "{p}");
    // The sender's MAC comes from the SLL address field.
    assert_eq!(p["src_mac"], "02:00:00:00:00:09", "{p}");
    assert_eq!(p["pfc_enable"], 8, "{p}");
    assert_eq!(p["pfc_quanta"], json!([0, 0, 0, 65535, 0, 0, 0, 0]), "{p}");
    tshark_agrees_sll(&file, &ours);
}

/// [`tshark_agrees`], and tshark reading the records as SLL v1 and the PFC frame behind the cooked header.
fn tshark_agrees_sll(file: &Path, ours: &[Value]) {
    if !have_tshark() {
        return;
    }
    let rows = tshark_fields(file, &[], &["sll.pkttype", "macc.opcode", "macc.cbfc.enbv"]);
    let pkttypes: Vec<&str> = rows.iter().map(|r| r[0].trim()).collect();
    assert_eq!(
        pkttypes,
        ["4", "0", "4", "0"],
        "tshark does not see SLL v1 records"
    );
    assert_eq!(rows[3][1].trim(), "0x0101", "{:?}", rows[3]);
    assert_eq!(rows[3][2].trim(), "0x0008", "{:?}", rows[3]);
    tshark_agrees(file, ours);
}

fn ack(syndrome: u8, msn: u32) -> ExtHeaders {
    ExtHeaders {
        aeth: Some(AethRepr { syndrome, msn }),
        ..ExtHeaders::default()
    }
}

/// The keys that only responders, RD, XRC and short snap lengths bring, with the exact values the contract
/// (wire.md's table, and the README's for `rdeth`/`xrceth`) gives them.
#[test]
fn aeth_kinds_rd_xrc_and_truncated_payload_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let f = |b: BthRepr, e: ExtHeaders, p: &[u8]| v4_frame(2, 1, 0, b, e, p);
    let rd = ExtHeaders {
        rdeth: Some(RdethRepr {
            ee_context: 0xabcdef,
        }),
        deth: Some(DethRepr {
            qkey: 0x1111_2222,
            src_qp: 0x000123,
        }),
        ..ExtHeaders::default()
    };
    let xrc = ExtHeaders {
        xrceth: Some(XrcEthRepr { srq: 0x00beef }),
        ..ExtHeaders::default()
    };
    let long = f(bth(Opcode::RC_RDMA_WRITE_ONLY, 0x55, 9), reth(), &[5; 1001]);
    let frames: Vec<(Vec<u8>, u32)> = vec![
        (
            f(
                bth(Opcode::RC_ACKNOWLEDGE, 0x10, 1),
                ack(0x1f, 0x123456),
                &[],
            ),
            0,
        ),
        // RNR NAK, timer code 14.
        (
            f(bth(Opcode::RC_ACKNOWLEDGE, 0x10, 2), ack(0x2e, 7), &[]),
            0,
        ),
        (
            f(bth(Opcode::RC_ACKNOWLEDGE, 0x10, 3), ack(0x60, 8), &[]),
            0,
        ),
        (
            f(bth(Opcode::RC_ACKNOWLEDGE, 0x10, 4), ack(0x62, 9), &[]),
            0,
        ),
        // Top bits 010: no kind the IBTA defines, which the README's contract table names "reserved".
        (
            f(bth(Opcode::RC_ACKNOWLEDGE, 0x10, 5), ack(0x45, 10), &[]),
            0,
        ),
        (f(bth(Opcode::RD_SEND_ONLY, 0x20, 6), rd, &[6; 24]), 0),
        (f(bth(Opcode::XRC_SEND_ONLY, 0x30, 7), xrc, &[7; 20]), 0),
        // Cut inside the payload, then inside the ICRC alone, then 8 bytes into the RETH (Ethernet 14, IPv4
        // 20, UDP 8, BTH 12: the RETH starts at 54).
        (long.clone(), 128),
        (long.clone(), long.len() as u32 - 2),
        (long.clone(), 62),
    ];
    let file = tmp.path().join("keys.pcap");
    let out = std::fs::File::create(&file).unwrap();
    let mut w = PcapWriter::new(out, LinkType::ETHERNET, 65535).unwrap();
    for (i, (bytes, cut)) in frames.iter().enumerate() {
        let caplen = if *cut == 0 {
            bytes.len()
        } else {
            *cut as usize
        };
        w.write_packet(T0 + i as u64, &bytes[..caplen], bytes.len() as u32)
            .unwrap();
    }
    w.into_inner().unwrap();
    let ours = analyzer_json(&file);
    assert_eq!(ours.len(), frames.len());

    let aeth = |i: usize| ours[i]["aeth"].clone();
    assert_eq!(
        aeth(0),
        json!({"syndrome": 31, "msn": 0x123456, "kind": "ack"})
    );
    assert_eq!(
        aeth(1),
        json!({"syndrome": 0x2e, "msn": 7, "kind": "rnr_nak"})
    );
    assert_eq!(
        aeth(2),
        json!({"syndrome": 0x60, "msn": 8, "kind": "nak", "nak_code": 0})
    );
    assert_eq!(
        aeth(3),
        json!({"syndrome": 0x62, "msn": 9, "kind": "nak", "nak_code": 2})
    );
    assert_eq!(
        aeth(4),
        json!({"syndrome": 0x45, "msn": 10, "kind": "reserved"})
    );
    for f in &ours[..5] {
        assert_eq!(f["payload_len"], 0, "{f}");
        assert_eq!(f["icrc_ok"], true, "{f}");
    }

    let rd = &ours[5];
    assert_eq!(rd["opcode_name"], "RD_SEND_ONLY", "{rd}");
    assert_eq!(rd["rdeth"], json!({"ee_context": 0xabcdef}), "{rd}");
    assert_eq!(
        rd["deth"],
        json!({"qkey": 0x1111_2222, "src_qp": 0x123}),
        "{rd}"
    );
    assert_eq!(rd["payload_len"], 24, "{rd}");
    assert_eq!(rd["icrc_ok"], true, "{rd}");
    let x = &ours[6];
    assert_eq!(x["opcode_name"], "XRC_SEND_ONLY", "{x}");
    assert_eq!(x["xrceth"], json!({"srq": 0xbeef}), "{x}");
    assert_eq!(x["payload_len"], 20, "{x}");
    assert_eq!(x.get("deth"), None, "{x}");

    for (f, caplen) in ours[7..].iter().zip([128, long.len() - 2, 62]) {
        assert_eq!(f["caplen"], caplen, "{f}");
        assert_eq!(f["len"], long.len(), "{f}");
        // Counted from the IP/UDP lengths: the bytes that were not captured still count, the 3 pad bytes not;
        // a RETH cut short still has the size its opcode gives it.
        assert_eq!(f["payload_len"], 1001, "{f}");
        assert_eq!(f["pad"], 3, "{f}");
        // Unknown, not bad.
        assert_eq!(f["icrc_ok"], Value::Null, "{f}");
        if caplen != 62 {
            assert_eq!(f["reth"]["len"], 4096, "{f}");
        } else {
            assert_eq!(f.get("reth"), None, "a cut RETH is not shown: {f}");
        }
    }
}
