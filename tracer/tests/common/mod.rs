//! The tracer's tests: the live-capture harness of `testkit::live` (a namespace with a veth pair, this crate's
//! `roce-tracer` run inside it, the privileged rules), and the analyzer's view of a capture file to compare.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use roce_capture::write::PcapWriter;
use roce_capture::{Capture, CaptureReader, LinkType};
use roce_core::decode::{Decoder, Kind};
use roce_core::frames::Frames;
use roce_core::line::LineRates;
use roce_core::passes::{Stats, StatsReport};
use roce_core::recorded::Recorded;

pub use testkit::live::*;

pub const TRACER: &str = env!("CARGO_BIN_EXE_roce-tracer");

/// A [`Netns`] whose captures run this crate's `roce-tracer`.
pub fn netns(tag: &str) -> Netns {
    Netns::new(tag, Path::new(TRACER))
}

/// One of the teaching captures in `samples/captures/`.
pub fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../samples/captures/{name}.pcapng"))
}

/// The corpus of every header the decoder knows, as classic pcap (Ethernet only, so it can be replayed).
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/corpus/corpus.pcap")
}

/// What a frame means for the comparison: kind, tags, addresses, ECN, BTH and MAC-control fields. Lengths
/// and ICRC are left out because a replayed truncated record goes back on the wire at its captured length.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FrameView {
    pub kind: Kind,
    pub vlan: Option<u16>,
    pub pcp: Option<u8>,
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    pub ecn: Option<u8>,
    pub opcode: Option<u8>,
    pub dest_qp: Option<u32>,
    pub psn: Option<u32>,
    pub mac_control: Option<String>,
}

/// The non-`other` frames of a file, decoded by the analyzer, plus the reader (for its interface list).
pub fn frames(path: &Path) -> (Vec<FrameView>, CaptureReader) {
    let decoder = Decoder::default();
    let mut out = Vec::new();
    let mut n = 0;
    let reader = testkit::frames::for_each_frame(path, |rec| {
        n += 1;
        let f = decoder.decode(n, rec);
        if f.kind == Kind::Other {
            return;
        }
        let bth = f.bth();
        out.push(FrameView {
            kind: f.kind,
            vlan: f.vlan,
            pcp: f.pcp,
            src: f.ip.map(|i| i.src),
            dst: f.ip.map(|i| i.dst),
            ecn: f.ip.map(|i| i.ecn),
            opcode: bth.map(|b| b.opcode.0),
            dest_qp: bth.map(|b| b.dest_qp),
            psn: bth.map(|b| b.psn),
            mac_control: f.mac_control.map(|m| format!("{m:?}")),
        });
    });
    (out, reader)
}

/// The analyzer's `stats` on a file.
pub fn stats(path: &Path) -> StatsReport {
    let mut capture = Capture::open_file(path).expect("open capture");
    let mut stats = Stats::new(LineRates::flag(Some(100_000_000_000)));
    let mut frames = Frames::new(&mut capture, Decoder::default());
    while let Some(f) = frames.next_frame() {
        stats.frame(&f);
    }
    assert_eq!(capture.errors().count(), 0, "{}", path.display());
    stats.finish(&capture, &Recorded::of(&capture))
}

/// `stats` on the `range` of a capture's non-`other` frames (counted from 0, as [`frames`] lists them): a
/// capture of several replays one after another holds each replay's frames as one run, and each run must
/// give its own sample's statistics, not a blend with its neighbours'.
pub fn stats_of(path: &Path, range: std::ops::Range<usize>) -> StatsReport {
    let mut capture = Capture::open_file(path).expect("open capture");
    let mut stats = Stats::new(LineRates::flag(Some(100_000_000_000)));
    let mut kept = 0;
    let mut frames = Frames::new(&mut capture, Decoder::default());
    while let Some(f) = frames.next_frame() {
        if f.kind == Kind::Other {
            continue;
        }
        if range.contains(&kept) {
            stats.frame(&f);
        }
        kept += 1;
    }
    assert_eq!(capture.errors().count(), 0, "{}", path.display());
    stats.finish(&capture, &Recorded::of(&capture))
}

/// The parts of `stats` that a replay must reproduce: per-flow packet, ECN, opcode and PSN accounting, CNP
/// counts, PFC frame counts. Byte counts, ICRC results and times depend on the replay, not the traffic.
pub fn stats_view(r: &StatsReport) -> serde_json::Value {
    let flows: Vec<_> = r
        .flows
        .iter()
        .map(|f| {
            serde_json::json!({
                "src": f.src, "dst": f.dst, "qp": f.dest_qp, "packets": f.packets,
                "opcodes": f.opcodes, "ect": f.ect_packets, "ce": f.ce_packets,
                "psn_gaps": f.psn_gaps, "retransmissions": f.retransmissions,
                "out_of_order": f.out_of_order, "naks": f.naks, "pcp": f.pcp, "dscp": f.dscp,
            })
        })
        .collect();
    let cnps: Vec<_> = r
        .cnps
        .iter()
        .map(|c| serde_json::json!({"src": c.src, "dst": c.dst, "qp": c.dest_qp, "count": c.count}))
        .collect();
    let pfc: Vec<_> = r
        .pfc
        .iter()
        .map(|p| {
            serde_json::json!({"mac": p.src_mac, "kind": p.kind, "priority": p.priority,
                "frames": p.frames, "xoff": p.xoff, "xon": p.xon, "pauses": p.pauses})
        })
        .collect();
    let kinds: BTreeMap<_, _> = r
        .capture
        .frames_by_kind
        .iter()
        .filter(|(k, _)| **k != "other")
        .collect();
    serde_json::json!({"kinds": kinds, "flows": flows, "cnps": cnps, "pfc": pfc})
}

/// Writes the Ethernet records of `src` whose kind is not `other` to a classic pcap for tcpreplay, and
/// returns how many there are.
pub fn replayable(src: &Path, dst: &Path) -> usize {
    let decoder = Decoder::default();
    write_replay(src, dst, false, |i, rec| {
        decoder.decode(i, rec).kind != Kind::Other
    })
}

/// The data of every custom block (after its PEN) with the tracer's PEN, in file order. A minimal pcapng walk:
/// the analyzer's reader skips custom blocks, as it should.
pub fn custom_blocks(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).expect("read capture");
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 12 <= bytes.len() {
        let word = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let (kind, len) = (word(at), word(at + 4) as usize);
        assert!(len >= 12 && at + len <= bytes.len(), "broken block at {at}");
        if (kind == 0x0000_0BAD || kind == 0x4000_0BAD) && word(at + 8) == roce_capture::blocks::PEN
        {
            out.push(bytes[at + 12..at + len - 4].to_vec());
        }
        at += len;
    }
    out
}

/// A custom block's record type and JSON as they are in the file, untyped: the tests check the format as a
/// reader outside Rust sees it, not only through the records that wrote it.
pub fn raw_record(data: &[u8]) -> Option<([u8; 4], serde_json::Value)> {
    let (kind, json) = roce_capture::blocks::split(data)?;
    Some((kind, serde_json::from_slice(json).ok()?))
}

/// How many non-`other` frames each of the first `ifaces` interfaces of a capture holds.
pub fn frames_per_iface(path: &Path, ifaces: usize) -> Vec<u64> {
    let mut reader = CaptureReader::open(path).expect("open capture");
    let decoder = Decoder::default();
    let mut out = vec![0u64; ifaces];
    let mut n = 0;
    while let Some(rec) = reader.next_record().expect("read record") {
        n += 1;
        if decoder.decode(n, &rec).kind != Kind::Other {
            out[rec.iface as usize] += 1;
        }
    }
    out
}

/// Copies the first `n` records of a classic pcap to another.
pub fn first_records(src: &Path, dst: &Path, n: usize) {
    let mut reader = CaptureReader::open(src).expect("open source");
    let file = std::fs::File::create(dst).expect("create");
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535).unwrap();
    for _ in 0..n {
        let rec = reader.next_record().expect("read").expect("enough records");
        w.write_packet(rec.ts_ns, rec.data, rec.len).unwrap();
    }
    w.into_inner().unwrap();
}

/// Every sample capture, by name, found when the test runs: a sample added later is replayed without
/// anyone remembering to list it here.
pub fn sample_captures() -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/captures");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcapng"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    out.sort();
    out
}

/// The promise for one engine: every sample replayed into `vb` comes out of `roce-tracer capture
/// --engine <engine> <extra>` as the same frames with the same `stats`.
///
/// One tracer run takes all samples, replayed one after another, so the test costs one start and stop of
/// the engine rather than one per sample; the capture is then cut back into samples by their frame counts.
/// Each sample is compared on its own so that a failure names the sample, and so that PSN tracking does
/// not run from one sample's flows into the next one's.
pub fn every_sample_comes_back_unchanged(engine: &str, extra: &[&str]) {
    let samples = sample_captures();
    assert!(
        samples.len() >= 5,
        "expected at least 5 sample captures, found {samples:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut parts = Vec::new();
    for (name, path) in &samples {
        let replay = dir.path().join(format!("{name}.pcap"));
        let sent = replayable(path, &replay);
        if sent == 0 {
            // tcpreplay sends Ethernet frames only, and a frame the decoder calls `other` says nothing
            // about RoCE: such a sample has nothing to compare.
            cannot_run_here(&format!(
                "sample {name} has no Ethernet RoCE, CNP, PFC or PAUSE frame to replay"
            ));
            continue;
        }
        let (decoded, reader) = frames(path);
        let taps = reader.interfaces().len();
        if taps == 1 && sent == decoded.len() {
            // The replay file stands for the sample: what the capture is held to is the sample's own `stats`.
            assert_eq!(
                stats_view(&stats(&replay)),
                stats_view(&stats(path)),
                "sample {name}: its replay file does not give its stats"
            );
        } else {
            // One veth is one tap: frames of several taps (or of other link types, which are not sent) cannot
            // come back as the sample had them, so the capture is held to the replay file instead.
            println!(
                "sample {name}: {taps} taps, {sent} of {} frames replayed; compared with its replay file",
                decoded.len()
            );
        }
        parts.push((name.as_str(), replay, sent));
    }
    assert!(
        parts.len() >= 5,
        "only {} samples have frames to replay",
        parts.len()
    );

    let ns = netns(&format!("s{}", &engine[..1]));
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(dir.path(), &out, &[&["--engine", engine], extra].concat());
    let (last, rest) = parts.split_last().unwrap();
    for (_, replay, _) in rest {
        ns.replay(replay, 1);
    }
    ns.replay_and_stop(child, &last.1, 1, 30);

    let (got, reader) = frames(&out);
    let mut start = 0;
    for (name, replay, sent) in &parts {
        let (want, _) = frames(replay);
        assert_eq!(
            want.len(),
            *sent,
            "sample {name}: frames in its replay file"
        );
        let end = (start + sent).min(got.len());
        let slice = &got[start..end];
        for (i, (g, w)) in slice.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "sample {name}: frame {} differs", i + 1);
        }
        assert_eq!(slice.len(), *sent, "sample {name}: frames captured");
        let (got_view, got_pauses) = without_pauses(stats_view(&stats_of(&out, start..end)));
        let (want_view, want_pauses) = without_pauses(stats_view(&stats(replay)));
        assert_eq!(
            got_view, want_view,
            "sample {name}: stats on its part of the capture differ from stats on the sample"
        );
        // A pause ends when its quanta run out, so their count depends on the frames' spacing, which a replay
        // does not keep: tcpreplay -t sending at full speed merges pauses, and a replay descheduled on a loaded
        // machine splits them (seen: 17 captured for 16). The frames, XOFFs and XONs are compared above; here
        // only that a priority paused in the sample is paused in the capture, and only then.
        for (i, (g, w)) in got_pauses.iter().zip(&want_pauses).enumerate() {
            assert!(
                (*g > 0) == (*w > 0),
                "sample {name}: PFC row {i}: {g} pauses captured, {w} in the sample"
            );
        }
        start = end;
    }
    let sent: usize = parts.iter().map(|p| p.2).sum();
    assert_eq!(got.len(), sent, "frames captured after the last sample");
    // Nothing lost on the way, so the comparison above was of everything that was sent.
    let st = reader.if_stats().first().copied().unwrap_or_default();
    assert_eq!(st.received, Some(sent as u64), "{st:?}");
    assert_eq!(
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
        0,
        "{st:?}"
    );
}

/// A [`stats_view`] without the PFC rows' pause counts, and those counts in row order. A pause ends when
/// its time runs out, so how many there were depends on the frames' spacing, which a replay does not keep.
fn without_pauses(mut view: serde_json::Value) -> (serde_json::Value, Vec<u64>) {
    let rows = view["pfc"].as_array_mut().expect("pfc rows");
    let pauses = rows
        .iter_mut()
        .map(|r| {
            r.as_object_mut()
                .and_then(|o| o.remove("pauses"))
                .and_then(|p| p.as_u64())
                .expect("pauses in a pfc row")
        })
        .collect();
    (view, pauses)
}
