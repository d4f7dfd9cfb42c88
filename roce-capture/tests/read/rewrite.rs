//! A capture copied block for block with comments on its packets (`roce_capture::rewrite`): what a reader
//! reads back is what it read from the original, every block the copy can keep is there, and what it cannot
//! keep is counted by reason.

use std::path::Path;

use pcap_parser::pcapng::parse_block_le;
use pcap_parser::{Block, PcapNGOption};
use roce_capture::rewrite::{CopySummary, Rewriter};
use roce_capture::{Capture, CaptureReader, CustomBlock};

use super::roundtrip::Ng;

const PEN: u32 = roce_capture::blocks::PEN;

/// What a reader reads from a file: its interfaces, statistics, records and custom blocks.
#[derive(Debug, PartialEq)]
struct Read {
    interfaces: Vec<(u16, Option<String>, String, Option<u64>)>,
    stats: Vec<(Option<u64>, Option<u64>, Option<u64>)>,
    records: Vec<(u32, u64, u32, Vec<u8>)>,
    custom: Vec<CustomBlock>,
}

fn read(path: &Path) -> Read {
    let mut r = CaptureReader::open(path).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        records.push((rec.iface, rec.ts_ns, rec.len, rec.data.to_vec()));
    }
    Read {
        interfaces: r
            .interfaces()
            .iter()
            .map(|i| {
                (
                    i.link.0,
                    i.name.clone(),
                    i.ts_resol_desc.clone(),
                    i.speed_bps,
                )
            })
            .collect(),
        stats: r
            .if_stats()
            .iter()
            .map(|s| (s.received, s.dropped_iface, s.dropped_os))
            .collect(),
        records,
        custom: r.custom_blocks().to_vec(),
    }
}

/// Copies the capture of `inputs`, each packet commented `c<number>`.
fn copy(inputs: &[&Path], out: &Path) -> CopySummary {
    let files = inputs
        .iter()
        .map(|p| roce_capture::Input::file(*p))
        .collect();
    let first = Capture::open(roce_capture::Inputs {
        files,
        ..Default::default()
    })
    .unwrap();
    let mut capture = first.reopen_to_copy().unwrap().unwrap();
    let mut w = Rewriter::new(std::fs::File::create(out).unwrap(), "copied by a test");
    while let Some((number, _)) = capture.next_record() {
        w.write_current(&mut capture, &[format!("c{number}")])
            .unwrap();
    }
    w.finish(&mut capture).unwrap().1
}

/// A custom block's body: the PEN in the section's byte order, then data.
fn custom(ng: &Ng, pen: u32, data: &[u8]) -> Vec<u8> {
    let mut body = ng.u32(pen).to_vec();
    body.extend_from_slice(data);
    body.resize(body.len().next_multiple_of(4), 0);
    body
}

/// A packet block's comments, and its other options (code, value).
type PacketOptions = (Vec<String>, Vec<(u16, Vec<u8>)>);

/// The options of every packet block of a little-endian pcapng file.
fn packet_options(bytes: &[u8]) -> Vec<PacketOptions> {
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (next, block) = parse_block_le(rest).expect("the copy is valid pcapng");
        if let Block::EnhancedPacket(epb) = block {
            let opts: &[PcapNGOption] = &epb.options;
            let comments = opts
                .iter()
                .filter(|o| o.code.0 == 1)
                .map(|o| String::from_utf8(o.as_bytes().unwrap().to_vec()).unwrap())
                .collect();
            let others = opts
                .iter()
                .filter(|o| o.code.0 > 1)
                .map(|o| (o.code.0, o.as_bytes().unwrap().to_vec()))
                .collect();
            out.push((comments, others));
        }
        rest = next;
    }
    out
}

/// The block types of a little-endian pcapng file, in order.
fn block_types(bytes: &[u8]) -> Vec<u32> {
    let mut types = Vec::new();
    let mut at = 0;
    while let Some(h) = bytes.get(at..at + 8) {
        types.push(u32::from_le_bytes(h[..4].try_into().unwrap()));
        at += u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    }
    types
}

#[test]
fn every_block_a_reader_reads_comes_back_with_the_comments() {
    let mut f = Ng {
        out: Vec::new(),
        be: false,
    };
    // A section header with options of its own: the only file's first section keeps them.
    let mut shb = Vec::new();
    shb.extend(f.u32(0x1A2B_3C4D));
    shb.extend(f.u16(1));
    shb.extend(f.u16(0));
    shb.extend((-1i64).to_le_bytes());
    f.opt(&mut shb, 2, b"box");
    f.opt(&mut shb, 1, b"the original capture");
    f.opt(&mut shb, 0, &[]);
    f.block(0x0A0D_0D0A, &shb);
    f.idb(1, None, None); // microseconds
    f.idb_at(1, Some(9), None, Some(25_000_000_000));
    f.idb(101, Some(0x80 | 20), Some(5)); // 2^-20 s, 5 s later
    f.block(0x0000_0004, &[0u8; 8]); // name resolution
    f.block(0x1234_5678, &[9u8; 20]); // a type nobody defined
    let knob = br#"KNOB{"version":1,"ts_ns":1,"knobs":{"eth0/roce_rp/rpg_gd":"10"}}"#;
    let b = custom(&f, PEN, knob);
    f.block(0x0000_0BAD, &b);
    let b = custom(&f, PEN, b"CTRS{}");
    f.block(0x4000_0BAD, &b); // ours, marked not to copy: we know it stands alone
    let b = custom(&f, 99, b"theirs, do not copy");
    f.block(0x4000_0BAD, &b);
    let b = custom(&f, 99, b"theirs, copy");
    f.block(0x0000_0BAD, &b);
    // A packet with options of its own: flags and a comment.
    let mut epb = Vec::new();
    epb.extend(f.u32(0));
    epb.extend(f.u32(0));
    epb.extend(f.u32(1_700_000_001));
    epb.extend(f.u32(4));
    epb.extend(f.u32(60));
    epb.extend([1, 2, 3, 4]);
    let flags = f.u32(0x0000_0001);
    f.opt(&mut epb, 2, &flags);
    f.opt(&mut epb, 1, b"said before");
    f.opt(&mut epb, 0, &[]);
    f.block(6, &epb);
    f.epb(1, 1_700_000_000_000_000_002, &[0xb; 15]);
    f.epb(2, 3 << 20, &[0xc; 16]);
    f.spb(100, &[0xd; 20]);
    f.isb(1, 77, 3);
    // A big-endian section, as when two captures are concatenated.
    let mut g = Ng {
        out: Vec::new(),
        be: true,
    };
    g.shb();
    let mut idb = Vec::new();
    idb.extend(g.u16(276));
    idb.extend(g.u16(0));
    idb.extend(g.u32(0));
    let speed = g.u64(400_000_000_000);
    g.opt(&mut idb, 8, &speed);
    g.opt(&mut idb, 9, &[3]);
    g.opt(&mut idb, 2, b"be0");
    g.opt(&mut idb, 0x7f01, &[1, 2, 3, 4]); // a private option: its numbers cannot be turned around
    g.opt(&mut idb, 0, &[]);
    g.block(1, &idb);
    let mut epb = Vec::new();
    let ticks: u64 = 1_700_000_000_500; // milliseconds
    epb.extend(g.u32(0));
    epb.extend(g.u32((ticks >> 32) as u32));
    epb.extend(g.u32(ticks as u32));
    epb.extend(g.u32(9));
    epb.extend(g.u32(9));
    epb.extend([0xe; 9]);
    epb.resize(epb.len().next_multiple_of(4), 0);
    let flags = g.u32(0x0000_0002);
    g.opt(&mut epb, 2, &flags);
    g.opt(&mut epb, 0, &[]);
    g.block(6, &epb);
    g.isb(0, 5, 1);
    let b = custom(&g, PEN, b"EVNT{}");
    g.block(0x0000_0BAD, &b);
    g.block(0x0000_0004, &[0u8; 8]); // name resolution in big-endian: not turned around
    f.out.extend(g.out);

    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.pcapng"), dir.path().join("out.pcapng"));
    std::fs::write(&input, &f.out).unwrap();
    let summary = copy(&[&input], &output);

    let (before, after) = (read(&input), read(&output));
    assert_eq!(after.records, before.records);
    assert_eq!(after.interfaces, before.interfaces);
    assert_eq!(after.stats, before.stats);
    let kept: Vec<CustomBlock> = before
        .custom
        .iter()
        .filter(|c| !c.data.starts_with(b"theirs, do not copy"))
        .cloned()
        .collect();
    assert_eq!(after.custom, kept);
    assert_eq!(before.custom.len(), kept.len() + 1);

    assert_eq!(
        (summary.packets, summary.comments, summary.interfaces),
        (5, 5, 4)
    );
    let not_kept: Vec<(&str, u64)> = summary.not_kept.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(
        not_kept,
        [
            (
                "block of a big-endian section of a type this copy cannot turn around",
                1
            ),
            ("custom block its owner marked not to be copied", 1),
            (
                "option of a big-endian section this copy cannot turn around, or malformed",
                1
            ),
        ]
    );
    assert_eq!(summary.rounded_timestamps, 0);

    let bytes = std::fs::read(&output).unwrap();
    let types = block_types(&bytes);
    assert_eq!(
        types.iter().filter(|&&t| t == 0x0A0D_0D0A).count(),
        1,
        "one section"
    );
    assert_eq!(types.iter().filter(|&&t| t == 0x0000_0004).count(), 1);
    assert_eq!(types.iter().filter(|&&t| t == 0x1234_5678).count(), 1);
    assert_eq!(types.iter().filter(|&&t| t == 5).count(), 2);
    let packets = packet_options(&bytes);
    let comments: Vec<Vec<String>> = packets.iter().map(|p| p.0.clone()).collect();
    assert_eq!(
        comments,
        [
            // Numbered as Wireshark numbers them: the four custom blocks before take 1 to 4.
            vec!["said before".to_owned(), "c5".to_owned()],
            vec!["c6".to_owned()],
            vec!["c7".to_owned()],
            vec!["c8".to_owned()],
            vec!["c9".to_owned()],
        ]
    );
    assert_eq!(packets[0].1, [(2, 1u32.to_le_bytes().to_vec())]);
    assert_eq!(
        packets[4].1,
        [(2, 2u32.to_le_bytes().to_vec())],
        "a big-endian packet's flags, turned around"
    );
    let text = String::from_utf8_lossy(&bytes[..256]);
    for said in ["box", "the original capture", "copied by a test"] {
        assert!(text.contains(said), "the section header keeps {said:?}");
    }
}

/// A rotated set whose later file counts finer time than its first: the set is one tap described by the
/// first file, so a later timestamp its units cannot hold is written at the tick below and counted, never
/// silently moved.
#[test]
fn a_rotated_set_is_one_interface_and_a_finer_clock_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Ng {
        out: Vec::new(),
        be: false,
    };
    a.shb();
    a.idb(1, Some(6), None);
    a.epb(0, 1_000, &[1; 60]);
    a.epb(0, 2_000, &[2; 60]);
    let mut b = Ng {
        out: Vec::new(),
        be: false,
    };
    b.shb();
    b.idb(1, Some(9), None);
    b.epb(0, 3_000_000, &[3; 60]);
    b.epb(0, 3_000_500, &[4; 60]);
    let (pa, pb, out) = (
        dir.path().join("run.0.pcapng"),
        dir.path().join("run.1.pcapng"),
        dir.path().join("out.pcapng"),
    );
    std::fs::write(&pa, &a.out).unwrap();
    std::fs::write(&pb, &b.out).unwrap();
    let summary = copy(&[&pa, &pb], &out);
    assert_eq!(summary.interfaces, 1);
    assert_eq!(summary.rounded_timestamps, 1);
    let got: Vec<u64> = read(&out).records.iter().map(|r| r.1).collect();
    assert_eq!(got, [1_000_000, 2_000_000, 3_000_000, 3_000_000]);
}
