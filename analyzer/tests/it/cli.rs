//! The `roce-analyzer` binary end to end: output shapes, filters, tables, and how it meets bad files.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, run, shared_capture, workspace};
use serde_json::Value;

fn corpus_pcap() -> PathBuf {
    workspace().join("samples/corpus/corpus.pcap")
}

fn corpus_pcapng() -> PathBuf {
    workspace().join("samples/corpus/corpus.pcapng")
}

/// Byte offsets of every record header of a little-endian classic pcap.
fn pcap_record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= bytes.len() {
        out.push(at);
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
    }
    out
}

struct Failure {
    stdout: String,
    stderr: String,
}

/// Runs a command that must exit 2 with one clear line on stderr naming the file, and no panic.
fn expect_error(args: &[&str], file: &Path) -> Failure {
    let out = run(analyzer().args(args).arg(file));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit code for {}: {stderr}",
        file.display()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(
        lines[0].contains(&*file.to_string_lossy()),
        "the message names the file: {stderr}"
    );
    Failure {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

#[test]
fn decode_json_has_the_contract_fields() {
    let frames = crate::common::analyzer_json(&corpus_pcapng());
    let cnp = frames
        .iter()
        .find(|f| f["kind"] == "cnp")
        .expect("the corpus has CNPs");
    for key in [
        "frame",
        "ts_ns",
        "caplen",
        "len",
        "src",
        "dst",
        "dscp",
        "ecn",
        "sport",
        "opcode",
        "opcode_name",
        "dest_qp",
        "psn",
        "ack_req",
        "fecn",
        "becn",
        "se",
        "pkey",
        "pad",
        "payload_len",
        "icrc_ok",
    ] {
        assert!(cnp.get(key).is_some(), "CNP lacks {key}: {cnp}");
    }
    assert_eq!(cnp["opcode_name"], "CNP");
    assert_eq!(cnp["becn"], true);
    assert_eq!(cnp["payload_len"], 16);
    assert_eq!(cnp["icrc_ok"], true);
    let pfc = frames
        .iter()
        .find(|f| f["kind"] == "pfc")
        .expect("PFC frames");
    assert!(pfc["src_mac"].as_str().unwrap().contains(':'));
    assert_eq!(pfc["pfc_quanta"].as_array().unwrap().len(), 8);
    // Every complete RoCEv2 frame of the corpus has a good ICRC but the one corrupted on purpose; the
    // truncated ones cannot be checked.
    let bad: Vec<&Value> = frames.iter().filter(|f| f["icrc_ok"] == false).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    let unknown = frames
        .iter()
        .filter(|f| f["kind"] == "roce" && f["icrc_ok"].is_null())
        .count();
    let truncated = frames
        .iter()
        .filter(|f| f["kind"] == "roce" && f["caplen"].as_u64() < f["len"].as_u64())
        .count();
    let v1 = frames.iter().filter(|f| f["roce_version"] == 1).count();
    assert_eq!(unknown, truncated + v1);
    assert!(truncated > 10);
}

#[test]
fn filter_and_count_select_frames() {
    let out = run(analyzer()
        .args(["decode", "--json", "--filter", "cnp and qp >= 0x11a"])
        .arg(corpus_pcapng()));
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "CNPs to QPs 0x11a..0x11d");
    assert!(
        lines
            .iter()
            .all(|f| f["kind"] == "cnp" && f["dest_qp"].as_u64() >= Some(0x11a))
    );
    let out = run(analyzer().args(["decode", "-c", "3"]).arg(corpus_pcapng()));
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let out = run(analyzer()
        .args(["decode", "--filter", "qp == nope"])
        .arg(corpus_pcapng()));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("position 6"));
}

#[test]
fn stats_json_keys_and_tables() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(analyzer()
        .args(["stats", "--json", "--csv"])
        .arg(dir.path().join("csv"))
        .arg("--parquet")
        .arg(dir.path().join("pq"))
        .arg(corpus_pcapng()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["capture", "flows", "cnps", "pfc"] {
        assert!(v.get(key).is_some(), "stats JSON lacks {key}");
    }
    let flow = &v["flows"][0];
    for key in [
        "packets",
        "bytes",
        "first_ns",
        "last_ns",
        "mean_gbps",
        "opcodes",
        "ect_packets",
        "ce_packets",
        "psn_gaps",
        "retransmissions",
        "out_of_order",
        "naks",
        "icrc_failures",
        "truncated",
    ] {
        assert!(flow.get(key).is_some(), "flow lacks {key}");
    }
    assert_eq!(v["cnps"].as_array().unwrap().len(), 6);
    assert_eq!(v["capture"]["interfaces"].as_array().unwrap().len(), 4);
    for t in ["capture", "flows", "cnps", "pfc"] {
        let csv = std::fs::read_to_string(dir.path().join("csv").join(format!("{t}.csv"))).unwrap();
        assert!(csv.lines().count() >= 2, "{t}.csv has rows");
        let pq = std::fs::read(dir.path().join("pq").join(format!("{t}.parquet"))).unwrap();
        assert_eq!(&pq[..4], b"PAR1");
    }
}

#[test]
fn stdin_reads_like_a_file() {
    let file = std::fs::File::open(corpus_pcap()).unwrap();
    let out = analyzer()
        .args(["decode", "--json", "-"])
        .stdin(file)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        crate::common::analyzer_json(&corpus_pcap()).len()
    );
}

#[test]
fn missing_file_directory_empty_and_wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    expect_error(&["stats"], &dir.path().join("nope.pcap"));
    expect_error(&["stats"], dir.path());
    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    expect_error(&["stats"], &empty);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"these are not packets, just words").unwrap();
    let f = expect_error(&["decode"], &text);
    assert!(f.stderr.contains("byte 0"), "{}", f.stderr);
}

#[test]
fn truncated_file_keeps_results_up_to_the_damage() {
    let bytes = std::fs::read(corpus_pcap()).unwrap();
    let offs = pcap_record_offsets(&bytes);
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    // Cut in the middle of the 11th record's data.
    std::fs::write(&cut, &bytes[..offs[10] + 20]).unwrap();
    let f = expect_error(&["decode", "--json"], &cut);
    assert_eq!(
        f.stdout.lines().count(),
        10,
        "the ten whole records are decoded"
    );
    assert!(
        f.stderr.contains(&format!("byte {}", offs[10])),
        "{}",
        f.stderr
    );
    let f = expect_error(&["stats", "--json"], &cut);
    let v: Value = serde_json::from_str(&f.stdout).unwrap();
    assert_eq!(v["capture"]["frames"], 10);
    assert!(v["capture"]["error"].as_str().unwrap().contains("byte"));
}

#[test]
fn caplen_beyond_limits_is_an_error_at_its_record() {
    let bytes = std::fs::read(corpus_pcap()).unwrap();
    let offs = pcap_record_offsets(&bytes);
    let dir = tempfile::tempdir().unwrap();
    // (file, byte position of a little-endian u32 to overwrite, new value)
    let cases = [
        // caplen 4 GB
        ("huge.pcap", offs[3] + 8, 0xFFFF_FFF0u32),
        // caplen above the original length
        ("above-len.pcap", offs[3] + 12, 10),
        // caplen above the snap length (the file's snaplen becomes 40)
        ("above-snaplen.pcap", 16, 40),
    ];
    for (name, at, value) in cases {
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&value.to_le_bytes());
        let p = dir.path().join(name);
        std::fs::write(&p, &b).unwrap();
        let f = expect_error(&["decode", "--json"], &p);
        let first_bad = if name == "above-snaplen.pcap" {
            // The first record longer than 40 bytes.
            offs.iter()
                .position(|&o| u32::from_le_bytes(bytes[o + 8..o + 12].try_into().unwrap()) > 40)
                .unwrap()
        } else {
            3
        };
        assert_eq!(f.stdout.lines().count(), first_bad, "{name}");
        assert!(
            f.stderr.contains(&format!("byte {}", offs[first_bad])),
            "{name}: {}",
            f.stderr
        );
    }
}

#[test]
fn pcapng_block_with_broken_length() {
    let mut bytes = std::fs::read(corpus_pcapng()).unwrap();
    // Walk the blocks: SHB, 4 IDBs, then packets. Break the 3rd packet block's length.
    let mut at = 0usize;
    let mut starts = Vec::new();
    while at + 12 <= bytes.len() {
        starts.push(at);
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += len;
    }
    let victim = starts[5 + 2];
    bytes[victim + 4..victim + 8].copy_from_slice(&7u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.pcapng");
    std::fs::write(&p, &bytes).unwrap();
    let f = expect_error(&["decode", "--json"], &p);
    assert_eq!(f.stdout.lines().count(), 2);
    assert!(f.stderr.contains(&format!("byte {victim}")), "{}", f.stderr);
}

#[test]
fn broken_pipe_is_not_an_error() {
    use std::io::Read;
    use std::process::Stdio;
    // A capture big enough that its text output cannot fit in the pipe before we hang up.
    let bytes = std::fs::read(corpus_pcap()).unwrap();
    let mut big = bytes.clone();
    for _ in 0..300 {
        big.extend_from_slice(&bytes[24..]);
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.pcap");
    std::fs::write(&p, &big).unwrap();
    let mut child = analyzer()
        .args(["decode"])
        .arg(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut b = [0u8; 1];
    stdout.read_exact(&mut b).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
}

/// A sample whose last record's timestamp is 75 years late, as a bit flip in a pcap seconds field makes it.
fn sample_with_a_far_timestamp(dir: &Path) -> PathBuf {
    use roce_capture::write::PcapWriter;
    use roce_capture::{CaptureReader, LinkType};
    let sample = workspace().join("samples/captures/incast_dcqcn.pcapng");
    let mut reader = CaptureReader::open(&sample).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = reader.next_record().unwrap() {
        records.push((rec.ts_ns, rec.data.to_vec(), rec.len));
    }
    let last = records.len() - 1;
    records[last].0 += 75 * 365 * 24 * 3_600 * 1_000_000_000;
    let path = dir.join("far.pcap");
    let file = std::fs::File::create(&path).unwrap();
    let mut out = PcapWriter::new(file, LinkType::ETHERNET, 65535).unwrap();
    for (ts, data, len) in &records {
        out.write_packet(*ts, data, *len).unwrap();
    }
    out.into_inner().unwrap();
    path
}

/// The sample again, as pcapng with the last record stamped at the end of the u64 range (a pcapng timestamp
/// too large for nanoseconds saturates there). The fuzzer found bin edges and chart positions derived from
/// such a timestamp overflowing: a panic in a debug build, wrong values in a release build.
#[test]
fn a_timestamp_at_the_end_of_time_is_survived_by_every_command() {
    use roce_capture::write::{PcapngWriter, SectionInfo};
    use roce_capture::{CaptureReader, LinkType};
    let dir = tempfile::tempdir().unwrap();
    let sample = workspace().join("samples/captures/incast_dcqcn.pcapng");
    let mut reader = CaptureReader::open(&sample).unwrap();
    let path = dir.path().join("end.pcapng");
    let file = std::fs::File::create(&path).unwrap();
    let mut out = PcapngWriter::new(file, &SectionInfo::default()).unwrap();
    out.add_interface(LinkType::ETHERNET, 0, None, None)
        .unwrap();
    let mut records = Vec::new();
    while let Some(rec) = reader.next_record().unwrap() {
        records.push((rec.ts_ns, rec.data.to_vec(), rec.len));
    }
    let last = records.len() - 1;
    records[last].0 = u64::MAX;
    for (ts, data, len) in &records {
        out.write_packet(0, *ts, data, *len).unwrap();
    }
    out.into_inner().unwrap();
    let report = dir.path().join("report");
    let commands: [&[&str]; 4] = [
        &["stats", "--json"],
        &["dcqcn"],
        &["dcqcn", "--bin", "1s"],
        &["report", "-o", report.to_str().unwrap()],
    ];
    for args in commands {
        let out = run(analyzer().args(args).arg(&path));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(report.join("index.html").exists());
}

/// Before the model was event-driven, `dcqcn` ran out of memory on this file (its timers ran to the far
/// record), and with `--bin` it aborted asking for 16 PB of bins. Now the far record costs the model nothing (a
/// released limiter has no timers), and the fixed bins widen out loud.
#[test]
fn a_corrupt_timestamp_years_ahead_is_survived_with_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let far = sample_with_a_far_timestamp(dir.path());
    for args in [&["dcqcn"][..], &["dcqcn", "--bin", "10us"][..]] {
        let out = run(analyzer().args(args).arg(&far));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("CUT SHORT"), "{args:?}: {stderr}");
        if args.len() > 1 {
            assert!(stderr.contains("requested 10000 ns"), "{stderr}");
        }
    }
    let report = dir.path().join("report");
    let out = run(analyzer().args(["report", "-o"]).arg(&report).arg(&far));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    // It also names the frame to look at, and `stats` has the numbers.
    let frames = 1714;
    assert!(html.contains(&format!("Frame {frames} comes")), "{html}");
    let out = run(analyzer().args(["stats", "--json"]).arg(&far));
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["capture"]["frames"], frames);
    assert_eq!(stats["capture"]["largest_gap_frame"], frames);
    let gap = stats["capture"]["largest_gap_ns"].as_u64().unwrap();
    assert!(gap > 70 * 365 * 24 * 3_600 * 1_000_000_000, "{gap}");
    assert_eq!(stats["capture"]["timestamps_backwards"], 0);
}

/// A capture of a link type the decoder does not read (this one is ERF-framed InfiniBand) is all `other`;
/// the commands say why instead of printing such a table silently. An Ethernet capture gets no such line.
#[test]
fn a_link_type_that_is_not_decoded_is_named() {
    for cmd in ["stats", "decode"] {
        let Some(cap_infiniband) = shared_capture("infiniband.pcap") else {
            return;
        };
        let out = run(analyzer().arg(cmd).arg(cap_infiniband));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {err}");
        assert!(
            err.contains("interface 0 has link type ERF (197), which is not decoded"),
            "{cmd}: {err}"
        );
    }
    let Some(cap_roce) = shared_capture("roce.pcap") else {
        return;
    };
    let out = run(analyzer().arg("stats").arg(cap_roce));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("not decoded"), "{err}");
}

/// A directory whose reading writes to stderr first (a file that is no capture, skipped) and last (an
/// interface of a link type that is not decoded), beside a sample.
fn noisy_directory(d: &Path) {
    use roce_capture::LinkType;
    use roce_capture::write::PcapWriter;
    std::fs::copy(
        workspace().join("samples/captures/incast_dcqcn.pcapng"),
        d.join("a.pcapng"),
    )
    .unwrap();
    std::fs::write(d.join("notes.txt"), "not a capture").unwrap();
    let file = std::fs::File::create(d.join("ipoib.pcap")).unwrap();
    let mut w = PcapWriter::new(file, LinkType::IPOIB, 0).unwrap();
    w.write_packet(1_000, &[0u8; 64], 64).unwrap();
    w.into_inner().unwrap();
}

/// Standard error closed by its reader (`2>&1 >/dev/null | true`, `2>&1 | head`) loses the notes and
/// warnings, never the results on standard output, the exit code or a panic; many runs, since when the
/// reader goes away is a race.
#[test]
fn a_closed_stderr_ends_nothing() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("noisy");
    std::fs::create_dir(&dir).unwrap();
    noisy_directory(&dir);
    let whole = run(analyzer().arg("stats").arg(&dir));
    assert!(whole.status.success());
    let said = String::from_utf8_lossy(&whole.stderr);
    assert!(said.starts_with("roce-analyzer: note: ") && said.contains("which is not decoded"));
    let damaged = tmp.path().join("damaged.pcapng");
    let bytes = std::fs::read(dir.join("a.pcapng")).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() / 2]).unwrap();
    let missing = tmp.path().join("missing.pcapng");
    for _ in 0..20 {
        // Standard error's reader gone before the command starts; standard output read to its end.
        for (input, code) in [(&dir, 0), (&damaged, 2), (&missing, 2)] {
            let mut child = analyzer()
                .arg("stats")
                .arg(input)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            drop(child.stderr.take());
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(code), "{}", input.display());
            if input == &dir {
                assert_eq!(out.stdout, whole.stdout);
            }
        }
        // Both into one pipe whose reader stops after twelve lines.
        let (reader, writer) = std::io::pipe().unwrap();
        let mut child = analyzer()
            .arg("stats")
            .arg(&dir)
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(reader);
        for _ in 0..12 {
            let mut line = String::new();
            lines.read_line(&mut line).unwrap();
        }
        drop(lines);
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
}

/// Each error says its cause once: where an output directory should be there is a file (the directory
/// itself, or one above it), the file is named; a failure of the system is quoted once, after the path.
#[test]
fn an_error_says_its_cause_once() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("afile");
    std::fs::write(&file, "mine").unwrap();
    let below = file.join("sub");
    let capture = corpus_pcapng();
    let (f, b) = (file.display(), below.display());
    for (args, said) in [
        (
            vec!["report", "-o", &*file.to_string_lossy()],
            format!("writing the report into {f}: {f} is not a directory"),
        ),
        (
            vec!["report", "--model-table", "-o", &*below.to_string_lossy()],
            format!("{f} is not a directory"),
        ),
        (
            vec!["stats", "--csv", &*below.to_string_lossy()],
            format!("writing tables into {b}: {f} is not a directory"),
        ),
        (
            vec!["decode", "--parquet", &*file.to_string_lossy()],
            format!("{f} is not a directory"),
        ),
    ] {
        let out = run(analyzer().args(&args).arg(&capture));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("roce-analyzer: error: {said}\n"),
            "{args:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // A name too long for the file system: the system's words once.
    let long = tmp.path().join("x".repeat(300));
    let out = run(analyzer().args(["stats", "--csv"]).arg(&long).arg(&capture));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("File name too long").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
