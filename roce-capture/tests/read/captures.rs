//! Differential tests against tshark: the public captures, their pcapng conversions by editcap, and the files our
//! own writers produce must read the same in both tools.

use std::path::{Path, PathBuf};
use std::process::Command;

use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, Format, LinkType};

/// The public captures, or `None` when this clone has none beside it (the test then says so and passes).
fn shared_captures() -> Option<Vec<PathBuf>> {
    let dir = testkit::shared_captures()?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 9,
        "expected the nine shared captures in {}",
        dir.display()
    );
    Some(files)
}

/// Runs a Wireshark tool; a missing tool fails the test with the fix rather than skipping it.
fn run(tool: &str, args: &[&str]) -> std::process::Output {
    Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}): run the README's test command (`cargo xtask test`), which installs tshark")
    })
}

/// stderr without the line tshark always prints when run as root.
fn warnings(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("Running as user \"root\""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// tshark's `fields` of every frame of the file, one tab-separated line per frame.
fn tshark_fields(path: &Path, fields: &[&str]) -> String {
    let p = path.to_str().unwrap();
    let mut args = vec!["-r", p, "-T", "fields"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let out = run("tshark", &args);
    assert!(
        out.status.success(),
        "tshark -r {p} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Per frame: (timestamp in ns, original length, captured length), as tshark sees the file.
fn tshark_frames(path: &Path) -> Vec<(u64, u32, u32)> {
    tshark_fields(path, &["frame.time_epoch", "frame.len", "frame.cap_len"])
        .lines()
        // tshark lists copyable custom blocks as frames with no timestamp; they are not packets.
        .filter(|line| !line.starts_with('\t'))
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 3, "unexpected tshark line {line:?}");
            let num = |s: &str| {
                s.parse::<u32>()
                    .unwrap_or_else(|e| panic!("tshark line {line:?}: {e}"))
            };
            (epoch_ns(f[0]), num(f[1]), num(f[2]))
        })
        .collect()
}

/// "1234.000001000" → nanoseconds, without going through floating point.
fn epoch_ns(s: &str) -> u64 {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut digits = frac.to_owned();
    digits.truncate(9);
    while digits.len() < 9 {
        digits.push('0');
    }
    let bad = |e| panic!("tshark timestamp {s:?}: {e}");
    sec.parse::<u64>().unwrap_or_else(bad) * 1_000_000_000
        + digits.parse::<u64>().unwrap_or_else(bad)
}

/// Per frame (timestamp in ns, original length, captured length), the common ground with tshark.
type Frame = (u64, u32, u32);

fn our_frames(path: &Path) -> (CaptureReader, Vec<Frame>, Vec<Vec<u8>>) {
    let mut frames = Vec::new();
    let mut data = Vec::new();
    let reader = testkit::frames::for_each_frame(path, |r| {
        frames.push((r.ts_ns, r.len, r.caplen));
        data.push(r.data.to_vec());
    });
    (reader, frames, data)
}

/// Compares two frame lists and names the first difference instead of printing both lists.
fn assert_same<T: PartialEq + std::fmt::Debug>(ours: &[T], theirs: &[T], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: record count");
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
        panic!(
            "{what}: record {i} differs: ours {:?}, theirs {:?}",
            ours[i], theirs[i]
        );
    }
}

/// ERF records carry their own header with a finer timestamp; tshark takes the time from it and does not count
/// its 16 bytes in the frame length. Bring tshark's view back to the pcap record's.
fn as_pcap_record_sees_erf(frames: &mut [(u64, u32, u32)]) {
    for f in frames {
        *f = (f.0 / 1000 * 1000, f.1 + 16, f.2 + 16);
    }
}

#[test]
fn every_shared_capture_matches_tshark() {
    let Some(captures) = shared_captures() else {
        return;
    };
    for path in captures {
        let (reader, ours, _) = our_frames(&path);
        let mut theirs = tshark_frames(&path);
        if reader.interfaces()[0].link == LinkType::ERF {
            as_pcap_record_sees_erf(&mut theirs);
        }
        assert!(!ours.is_empty(), "{}: no records", path.display());
        assert_same(&ours, &theirs, &path.display().to_string());
    }
}

#[test]
fn shared_capture_formats_and_link_types() {
    let Some(dir) = testkit::shared_captures() else {
        return;
    };
    let (r, frames, _) = our_frames(&dir.join("ipoib.pcap"));
    assert_eq!(
        r.format(),
        Format::Pcap {
            nanosecond: false,
            big_endian: true
        }
    );
    assert_eq!(r.interfaces()[0].link, LinkType::IPOIB);
    assert!(!frames.is_empty());

    let (r, _, _) = our_frames(&dir.join("infiniband.pcap"));
    assert_eq!(r.interfaces()[0].link, LinkType::ERF);
    assert_eq!(r.interfaces()[0].link.name(), "ERF");

    let (r, frames, _) = our_frames(&dir.join("roce.pcap"));
    assert_eq!(r.interfaces()[0].link, LinkType::ETHERNET);
    assert_eq!(frames.len(), 123, "the README's count");
}

#[test]
fn editcap_pcapng_reads_like_the_original() {
    let Some(captures) = shared_captures() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for path in captures {
        let what = path.display().to_string();
        let out = tmp
            .path()
            .join(path.file_name().unwrap())
            .with_extension("pcapng");
        let status = run(
            "editcap",
            &[
                "-F",
                "pcapng",
                path.to_str().unwrap(),
                out.to_str().unwrap(),
            ],
        );
        assert!(
            status.status.success(),
            "editcap failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let (orig_reader, orig, orig_data) = our_frames(&path);
        let (ng_reader, ng, ng_data) = our_frames(&out);
        assert_eq!(ng_reader.format(), Format::Pcapng);
        assert_eq!(
            ng_reader.interfaces()[0].link,
            orig_reader.interfaces()[0].link,
            "{what}"
        );
        if orig_reader.interfaces()[0].link == LinkType::ERF {
            // editcap moves the ERF header out of the packet into the EPB (and its finer time into the EPB
            // timestamp): only the count and the microseconds survive unchanged.
            let micros = |v: &[(u64, u32, u32)]| v.iter().map(|f| f.0 / 1000).collect::<Vec<_>>();
            assert_same(&micros(&ng), &micros(&orig), &what);
            continue;
        }
        assert_same(&ng, &orig, &what);
        assert_same(&ng_data, &orig_data, &what);
    }
}

#[test]
fn our_pcapng_opens_in_tshark_without_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ours.pcapng");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut w = PcapngWriter::new(file, &SectionInfo::application("rocetrace tests")).unwrap();
    let eth = w
        .add_interface(LinkType::ETHERNET, 0, Some("eth0"), Some("RoCE port"))
        .unwrap();
    let raw = w
        .add_interface(LinkType::RAW, 65535, Some("raw0"), None)
        .unwrap();
    // A minimal IPv4/UDP datagram for the raw interface, an Ethernet frame carrying it for the other.
    let ip: Vec<u8> = [
        0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 0, 0, 1, 10, 0,
        0, 2, //
        0x30, 0x39, 0x12, 0xb7, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4,
    ]
    .to_vec();
    let mut eth_frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    eth_frame.extend(&ip);
    let mut expected = Vec::new();
    for i in 0..20u64 {
        let ts = 1_700_000_000_000_000_000 + i * 1_001;
        if i % 2 == 0 {
            w.write_packet(eth, ts, &eth_frame, eth_frame.len() as u32)
                .unwrap();
            expected.push((ts, eth_frame.len() as u32, eth_frame.len() as u32));
        } else {
            w.write_packet_with_comment(raw, ts, &ip, ip.len() as u32 + 10, "cut")
                .unwrap();
            expected.push((ts, ip.len() as u32 + 10, ip.len() as u32));
        }
        if i == 5 {
            w.write_custom(32473, b"not for wireshark", true).unwrap();
            w.write_custom(32473, b"nor this", false).unwrap();
        }
    }
    w.write_stats(eth, 1_700_000_000_100_000_000, Some(10), Some(1))
        .unwrap();
    w.write_stats(raw, 1_700_000_000_100_000_000, Some(10), None)
        .unwrap();
    w.into_inner().unwrap();

    let p = path.to_str().unwrap();
    let out = run("tshark", &["-r", p]);
    assert!(out.status.success(), "tshark exit status {:?}", out.status);
    assert_eq!(
        warnings(&out.stderr),
        "",
        "tshark complained about our pcapng"
    );
    assert_same(&tshark_frames(&path), &expected, "tshark on our pcapng");
    let (_, ours, _) = our_frames(&path);
    assert_same(&ours, &expected, "our pcapng");
}

#[test]
fn our_pcap_opens_in_tshark_without_warnings() {
    let Some(roce_pcap) = testkit::shared_capture("roce.pcap") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ours.pcap");
    let roce = std::fs::read(&roce_pcap).unwrap();
    let (_, frames, data) = our_frames(&roce_pcap);
    assert!(!roce.is_empty());
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut w = PcapWriter::new(file, LinkType::ETHERNET, 262_144).unwrap();
    for ((ts, len, _), bytes) in frames.iter().zip(&data) {
        w.write_packet(*ts, bytes, *len).unwrap();
    }
    w.into_inner().unwrap();
    let out = run("tshark", &["-r", path.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(warnings(&out.stderr), "");
    assert_same(&tshark_frames(&path), &frames, "tshark on our pcap");
}

/// Wireshark numbers custom blocks among the packets (both kinds, kept or too large to keep), so a packet's
/// number is its place among packets and custom blocks together. A finding that names frame 12 must name
/// the packet Wireshark shows as frame 12.
#[test]
fn packets_are_numbered_as_wireshark_numbers_them() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("custom.pcapng");
    let mut w = PcapngWriter::new(
        std::fs::File::create(&path).unwrap(),
        &SectionInfo::default(),
    )
    .unwrap();
    let eth = w.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    let frame = [0x11u8; 60];
    let ts = |i: u64| 1_700_000_000_000_000_000 + i * 1_000;
    w.write_custom(32473, b"knobs", true).unwrap();
    for i in 0..6 {
        w.write_packet(eth, ts(i), &frame, 60).unwrap();
        match i {
            1 => w.write_custom(32473, b"counters", false).unwrap(),
            // Larger than the reader keeps: skipped by length, still numbered.
            3 => w.write_custom(32473, &vec![0x55; 2 << 20], true).unwrap(),
            _ => {}
        }
    }
    w.into_inner().unwrap();

    let mut capture = roce_capture::Capture::open_file(&path).unwrap();
    let mut ours = Vec::new();
    while let Some((n, _)) = capture.next_record() {
        ours.push(n);
    }
    assert_eq!(ours, [2, 3, 5, 6, 8, 9]);
    // The batches the threaded read cuts (a few records each, so that custom blocks fall between and
    // inside them) carry the same numbers.
    let mut capture = roce_capture::Capture::open_file(&path).unwrap();
    let mut batch = roce_capture::RecordBatch::default();
    let mut batched = Vec::new();
    while capture.read_batch(&mut batch, 4, 1 << 20) {
        batched.extend(batch.iter().map(|(n, _)| n));
        batch.clear();
    }
    assert_eq!(
        batched, ours,
        "read_batch numbers records as next_record does"
    );

    let theirs: Vec<u64> = tshark_fields(&path, &["frame.number", "frame.cb_pen"])
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, pen)| pen.is_empty())
        .map(|(n, _)| n.parse().unwrap())
        .collect();
    assert_eq!(ours, theirs, "our numbers against tshark's frame.number");
}
