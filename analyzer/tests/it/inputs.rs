//! Many inputs, one capture, end to end through the binary: a capture cut into a rotated set of mixed
//! formats (one compressed) gives exactly the one file's `decode`, `stats` and `dcqcn`; a damaged file in
//! the middle costs only itself; `--from`/`--to` select exactly; directories and patterns name the files.

use std::path::{Path, PathBuf};
use std::process::Command;

use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType};
use serde_json::Value;

use crate::common::{analyzer, run, workspace};

fn sample(name: &str) -> PathBuf {
    workspace().join(format!("samples/captures/{name}.pcapng"))
}

/// A sample's interfaces (link type, name, if_speed) and its records (interface, ts_ns, data, orig len).
type Records = Vec<(u32, u64, Vec<u8>, u32)>;
type Interfaces = Vec<(LinkType, Option<String>, Option<u64>)>;

fn records(path: &Path) -> (Interfaces, Records) {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.iface, rec.ts_ns, rec.data.to_vec(), rec.len));
    }
    let ifaces = r
        .interfaces()
        .iter()
        .map(|i| (i.link, i.name.clone(), i.speed_bps))
        .collect();
    (ifaces, out)
}

fn tool(name: &str, args: &[&str]) {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}): `cargo xtask install` installs it"));
    assert!(out.status.success(), "{name} {args:?}");
}

/// The sample cut in three by time, as a rotation would, the second part gzip'd and the third zstd'd. A
/// one-interface sample's first two parts are classic pcap (which records no interface name) and its third
/// pcapng; a sample of several taps is pcapng throughout. Returned in reverse order, so that nothing
/// depends on it.
pub(crate) fn rotated_set(sample_path: &Path, dir: &Path) -> Vec<PathBuf> {
    let (ifaces, recs) = records(sample_path);
    let third = recs.len() / 3;
    let parts = [&recs[..third], &recs[third..2 * third], &recs[2 * third..]];
    let one = ifaces.len() == 1;
    let mut names = Vec::new();
    for (k, part) in parts.iter().enumerate() {
        let ext = if one && k < 2 { "pcap" } else { "pcapng" };
        let path = dir.join(format!("run.{k:05}.{ext}"));
        let file = std::fs::File::create(&path).unwrap();
        if ext == "pcap" {
            let mut w = PcapWriter::new(file, LinkType::ETHERNET, 0).unwrap();
            for (_, t, d, l) in part.iter() {
                w.write_packet(*t, d, *l).unwrap();
            }
            w.into_inner().unwrap();
        } else {
            let mut w = PcapngWriter::new(file, &SectionInfo::application("test")).unwrap();
            for (link, name, speed) in &ifaces {
                w.add_interface_with_speed(*link, 0, name.as_deref(), None, *speed)
                    .unwrap();
            }
            for (i, t, d, l) in part.iter() {
                w.write_packet(*i, *t, d, *l).unwrap();
            }
            w.into_inner().unwrap();
        }
        let packed = match k {
            1 => {
                tool("gzip", &[path.to_str().unwrap()]);
                format!("{}.gz", path.display())
            }
            2 => {
                tool("zstd", &["-q", "--rm", path.to_str().unwrap()]);
                format!("{}.zst", path.display())
            }
            _ => path.display().to_string(),
        };
        names.push(PathBuf::from(packed));
    }
    names.reverse();
    names
}

fn stdout_of(args: &[&str], files: &[PathBuf]) -> String {
    let out = run(analyzer().args(args).args(files));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Removes what names the files and taps: the one thing that differs between one file and its pieces.
pub(crate) fn without_names(mut v: Value) -> Value {
    for table in [
        "flows",
        "cnps",
        "pfc",
        "unpaired_cnps",
        "np_streams",
        "np_ports",
    ] {
        if let Some(rows) = v[table].as_array_mut() {
            for r in rows {
                let r = r.as_object_mut().unwrap();
                r.remove("tap");
                r.remove("cnp_tap");
            }
        }
    }
    if let Some(peak) = v["traffic"]["peak"].as_object_mut() {
        peak.remove("tap");
    }
    v.as_object_mut().unwrap().remove("capture");
    v
}

/// `decode --json` of a sample with the frame numbers its custom block took away: the sample's one custom
/// block (its scenario, first in the file) takes frame number 1, as in Wireshark, and a rotated set made of
/// its packets alone has no such block, so its packets are numbered from 1.
pub(crate) fn decoded_as_packets_alone(files: &[PathBuf]) -> String {
    let mut out = String::new();
    for line in stdout_of(&["decode", "--json"], files).lines() {
        let rest = line
            .strip_prefix("{\"frame\":")
            .expect("decode --json starts with the frame");
        let (n, rest) = rest.split_once(',').unwrap();
        let n: u64 = n.parse().unwrap();
        assert!(n >= 2, "the custom block comes first: {line}");
        out.push_str(&format!("{{\"frame\":{},{rest}\n", n - 1));
    }
    out
}

#[test]
fn a_rotated_set_in_mixed_formats_reads_as_the_one_file() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["incast_dcqcn", "pfc_storm_hol"] {
        let whole = vec![sample(name)];
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let parts = rotated_set(&whole[0], &dir);
        // A set whose first file is a classic pcap cannot record its line rate (the one-interface sample's
        // is): the tap keeps its first file's silence, and the line is given. A set of pcapng files keeps
        // every tap's own.
        let line: &[&str] = if name == "incast_dcqcn" {
            &["--link-speed", "25G"]
        } else {
            &[]
        };

        assert_eq!(
            stdout_of(&["decode", "--json"], &parts),
            decoded_as_packets_alone(&whole),
            "{name}: decode"
        );
        let stats = |files: &[PathBuf]| -> Value {
            serde_json::from_str(&stdout_of(&[&["stats", "--json"], line].concat(), files)).unwrap()
        };
        let (s_parts, s_whole) = (stats(&parts), stats(&whole));
        assert_eq!(
            without_names(s_parts.clone()),
            without_names(s_whole.clone()),
            "{name}: stats"
        );
        let cap = &s_parts["capture"];
        assert_eq!(cap["frames"], s_whole["capture"]["frames"]);
        assert_eq!(
            cap["interfaces"].as_array().unwrap().len(),
            s_whole["capture"]["interfaces"].as_array().unwrap().len(),
            "{name}: a tap per interface, continued over the set"
        );
        let files = cap["files"].as_array().unwrap();
        let compression: Vec<Option<&str>> =
            files.iter().map(|f| f["compression"].as_str()).collect();
        assert_eq!(compression, [Some("zstd"), Some("gzip"), None]);
        let first = parts[2].display().to_string();
        assert!(
            s_parts["flows"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["tap"].as_str().unwrap().starts_with(&format!("{first}:"))),
            "{name}: taps are named after the set's first file"
        );
        // The set's pcap parts cannot carry the sample's recorded `KNOB` block: a knob given on the command
        // line (here a model option at its default) makes both runs take the given knobs rather than the
        // recording, so that only the reading of the frames is compared.
        let dcqcn = |files: &[PathBuf]| -> Value {
            serde_json::from_str(&stdout_of(
                &[
                    &["dcqcn", "--json", "--no-fit", "--set", "release_at_max=1"],
                    line,
                ]
                .concat(),
                files,
            ))
            .unwrap()
        };
        assert_eq!(
            without_names(dcqcn(&parts)),
            without_names(dcqcn(&whole)),
            "{name}: dcqcn"
        );
        // The directory and the pattern name the same files.
        assert_eq!(
            stdout_of(&["decode", "--json"], std::slice::from_ref(&dir)),
            decoded_as_packets_alone(&whole)
        );
        assert_eq!(
            stdout_of(&["decode", "--json"], &[dir.join("run.*")]),
            decoded_as_packets_alone(&whole)
        );
    }
}

/// Three taps' files, the middle one cut short: the first and third files' flows are whole, the middle
/// one's end at its damage, and the warning names that file and the byte where it ends.
#[test]
fn a_damaged_middle_file_keeps_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // Three hosts' captures of one test: the same sample at each, so each file's flows are known.
    let names = ["host-a.pcapng", "host-b.pcapng", "host-c.pcapng"];
    let files: Vec<PathBuf> = names.iter().map(|n| d.join(n)).collect();
    for f in &files {
        std::fs::copy(sample("incast_dcqcn"), f).unwrap();
    }
    let bytes = std::fs::read(&files[1]).unwrap();
    std::fs::write(&files[1], &bytes[..bytes.len() / 2]).unwrap();
    let out = run(analyzer().args(["stats", "--json"]).args(&files));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host-b.pcapng: byte "), "{err}");
    assert!(!err.contains("host-a") && !err.contains("host-c"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let whole: Value =
        serde_json::from_str(&stdout_of(&["stats", "--json"], &[sample("incast_dcqcn")])).unwrap();
    let packets_at = |tap: u64| -> u64 {
        v["flows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["iface"] == tap)
            .map(|f| f["packets"].as_u64().unwrap())
            .sum()
    };
    let all = whole["capture"]["frames_by_kind"]["roce"].as_u64().unwrap();
    assert_eq!(packets_at(0), all);
    assert_eq!(packets_at(2), all);
    assert!(packets_at(1) > 0 && packets_at(1) < all);
    let file_rows = v["capture"]["files"].as_array().unwrap();
    assert!(file_rows[0]["error"].is_null() && file_rows[2]["error"].is_null());
    assert!(
        file_rows[1]["error"]
            .as_str()
            .unwrap()
            .contains("truncated")
    );
}

/// `--from`/`--to` keep exactly the frames in `[from, to)`, given as offsets or epoch seconds; numbers stay
/// those of the whole capture.
#[test]
fn windows_select_exactly_the_frames_inside() {
    let all: Vec<Value> = stdout_of(&["decode", "--json"], &[sample("incast_dcqcn")])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = all[0]["ts_ns"].as_u64().unwrap();
    for (from, to, lo, hi) in [
        ("+1ms", "+2ms", first + 1_000_000, first + 2_000_000),
        ("0.0005", "0.001", 500_000, 1_000_000),
        ("+0", "+31827ns", first, first + 31_827),
    ] {
        let got: Vec<Value> = stdout_of(
            &["decode", "--json", "--from", from, "--to", to],
            &[sample("incast_dcqcn")],
        )
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let want: Vec<&Value> = all
            .iter()
            .filter(|f| (lo..hi).contains(&f["ts_ns"].as_u64().unwrap()))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "{from}..{to}");
    }
    let stats: Value = serde_json::from_str(&stdout_of(
        &["stats", "--json", "--from", "+1ms", "--to", "+2ms"],
        &[sample("incast_dcqcn")],
    ))
    .unwrap();
    assert_eq!(stats["capture"]["window_from_ns"], first + 1_000_000);
    let out = run(analyzer()
        .args(["stats", "--from", "soon"])
        .arg(sample("incast_dcqcn")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("+12.5s"));
}

/// What cannot be read at all is said before anything is read.
#[test]
fn missing_inputs_are_errors_with_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.pcapng");
    let out = run(analyzer()
        .arg("stats")
        .arg(sample("incast_dcqcn"))
        .arg(&missing));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.pcapng: no such file"), "{err}");
    assert!(out.stdout.is_empty());
}

/// A file named more than once (the same path again, an overlapping pattern, another spelling, a symlink)
/// is read once: the numbers are those of the file alone, and each repeat is named on stderr.
#[test]
fn a_file_named_twice_is_read_once_and_said_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::copy(sample("incast_dcqcn"), d.join("run.pcapng")).unwrap();
    std::os::unix::fs::symlink(d.join("run.pcapng"), d.join("link.pcapng")).unwrap();
    let in_dir = |args: &[&str]| run(analyzer().current_dir(d).args(args));
    let once = in_dir(&["stats", "--json", "run.pcapng"]);
    assert!(once.status.success());
    let repeated = in_dir(&[
        "stats",
        "--json",
        "run.pcapng",
        "run.*",
        "./run.pcapng",
        "link.pcapng",
    ]);
    assert!(repeated.status.success());
    assert_eq!(
        String::from_utf8(repeated.stdout).unwrap(),
        String::from_utf8(once.stdout).unwrap()
    );
    assert_eq!(
        String::from_utf8(repeated.stderr).unwrap(),
        "roce-analyzer: note: run.pcapng given twice; read once\n\
         roce-analyzer: note: ./run.pcapng is the same file as run.pcapng; read once\n\
         roce-analyzer: note: link.pcapng is the same file as run.pcapng; read once\n"
    );
    // Standard input can be read only once.
    let out = in_dir(&["stats", "-", "run.pcapng", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("standard input (-) can be read only once")
    );
}

/// A window that takes no frame of the capture is an error of every command, named with the capture's span
/// in the form the window was given; nothing is printed or written. A window that takes frames but no
/// RoCE is no error.
#[test]
fn a_window_outside_the_capture_is_an_error_of_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = sample("incast_dcqcn");
    let report_dir = tmp.path().join("report");
    let frames_dir = tmp.path().join("frames");
    let commands: [Vec<&str>; 6] = [
        vec!["decode"],
        vec!["decode", "--parquet", frames_dir.to_str().unwrap()],
        vec!["stats"],
        vec!["dcqcn"],
        vec!["hops"],
        vec!["report", "-o", report_dir.to_str().unwrap()],
    ];
    for command in &commands {
        for (window, said) in [
            (
                ["--from", "+10s"],
                "the window --from +10s lies outside the capture, which spans +0s to +0.002994439s \
                 (0.000003186 to 0.002997625 since the epoch)",
            ),
            (
                ["--to", "0.000001"],
                "the window --to 0.000001 lies outside the capture, which spans 0.000003186 to \
                 0.002997625 since the epoch (+0s to +0.002994439s)",
            ),
        ] {
            let out = run(analyzer().args(command).args(window).arg(&capture));
            assert_eq!(out.status.code(), Some(2), "{command:?} {window:?}");
            assert_eq!(
                String::from_utf8_lossy(&out.stderr),
                format!("roce-analyzer: error: {said}\n"),
                "{command:?}"
            );
            assert!(out.stdout.is_empty(), "{command:?}");
        }
    }
    assert!(!report_dir.join("index.html").exists());
    // Inside the capture's span but between two frames.
    let out = run(analyzer()
        .args(["stats", "--from", "+1ns", "--to", "+2ns"])
        .arg(&capture));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "no frame of the capture lies in the window --from +0.000000001s --to +0.000000002s"
    ));

    // Frames inside the window, none of them RoCE: an answer, not an error.
    let other = tmp.path().join("arp.pcap");
    let mut w = PcapWriter::new(
        std::fs::File::create(&other).unwrap(),
        LinkType::ETHERNET,
        0,
    )
    .unwrap();
    let mut arp = vec![0xffu8; 12];
    arp.extend([0x08, 0x06]);
    arp.resize(60, 0);
    for t in [1_000, 2_000, 3_000] {
        w.write_packet(t, &arp, 60).unwrap();
    }
    w.into_inner().unwrap();
    let out = run(analyzer()
        .args(["stats", "--json", "--from", "+1us"])
        .arg(&other));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["capture"]["frames"], 2);
    assert_eq!(v["capture"]["frames_by_kind"]["roce"], 0);
}

/// Files found in a directory given by its absolute path are named relative to it in every table (text,
/// JSON, CSV, the report), never by the whole path; the per-QP tables get a tap column only when there are
/// several taps.
#[test]
fn taps_are_named_as_typed_and_shown_when_there_are_several() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run42");
    std::fs::create_dir(&dir).unwrap();
    for name in ["queue_moves", "queue_moves.rx"] {
        std::fs::copy(sample(name), dir.join(format!("{name}.pcapng"))).unwrap();
    }
    let whole = tmp.path().display().to_string();
    let out = tmp.path().join("out");
    let text = stdout_of(
        &["stats", "--csv", out.to_str().unwrap()],
        std::slice::from_ref(&dir),
    );
    let json: Value =
        serde_json::from_str(&stdout_of(&["stats", "--json"], std::slice::from_ref(&dir))).unwrap();
    let csv = std::fs::read_to_string(out.join("flows.csv")).unwrap();
    let report = tmp.path().join("report");
    stdout_of(
        &["report", "--no-fit", "-o", report.to_str().unwrap()],
        std::slice::from_ref(&dir),
    );
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    let qp_table = &page[page.find("id=\"table\"").unwrap()..];
    for (what, shown) in [("text", &text), ("csv", &csv), ("page", &page.to_string())] {
        assert!(!shown.contains(&whole), "{what} shows the whole path");
    }
    let taps: Vec<&str> = json["capture"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["tap"].as_str().unwrap())
        .collect();
    assert_eq!(
        taps,
        [
            "queue_moves.pcapng:s1-sw1",
            "queue_moves.pcapng:uplink",
            "queue_moves.pcapng:s3-sw2",
            "queue_moves.rx.pcapng:sw2-r"
        ]
    );
    // Each flow row names its tap: in the text, the first column; in the CSV and the report, the same names.
    let flows = json["flows"].as_array().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().position(|l| l.starts_with("Flows (")).unwrap();
    assert!(lines[head + 1].starts_with("tap "), "{}", lines[head + 1]);
    for (f, line) in flows.iter().zip(&lines[head + 2..]) {
        let tap = f["tap"].as_str().unwrap();
        assert!(taps.contains(&tap));
        assert!(line.starts_with(&format!("{tap} ")), "{line}");
        assert!(csv.contains(&format!(",{tap},")), "{tap} in flows.csv");
        assert!(
            qp_table.contains(&format!("<td class=\"t\">{tap}</td>")),
            "{tap} in the QP table"
        );
    }
    assert!(qp_table.contains("<th>tap</th>"));

    // One tap: nothing to tell apart, no tap column.
    let one = vec![sample("incast_dcqcn")];
    let text = stdout_of(&["stats"], &one);
    assert!(text.lines().any(|l| l.starts_with("src ")), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("tap ") || l.starts_with("if "))
    );
    let report = tmp.path().join("one");
    stdout_of(
        &["report", "--no-fit", "-o", report.to_str().unwrap()],
        &one,
    );
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(!page[page.find("id=\"table\"").unwrap()..].contains("<th>tap</th>"));
}
