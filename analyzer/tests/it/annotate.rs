//! `annotate`: the capture written back with the analysis in its packet comments, read by tshark and
//! capinfos. Each comment is held against what the other commands say (`dcqcn --json`, `stats --json`,
//! `report`'s summary, `decode --json`), worked out here on their own terms; the copy must read exactly as
//! the original (frames, timestamps, bytes, statistics, the tracer's blocks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType};
use serde_json::Value;

use crate::common::{analyzer, analyzer_json, report_of, require_tshark, run, workspace};
use crate::inputs::{decoded_as_packets_alone, rotated_set, without_names};

fn sample(name: &str) -> PathBuf {
    workspace().join(format!("samples/captures/{name}.pcapng"))
}

/// `annotate INPUTS -o OUT ARGS`, which must succeed; what it printed.
fn annotate(inputs: &[PathBuf], out: &Path, args: &[&str]) -> String {
    let o = run(analyzer()
        .arg("annotate")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .args(args));
    assert!(
        o.status.success(),
        "annotate {inputs:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(args: &[&str], files: &[PathBuf]) -> Value {
    let o = run(analyzer().args(args).args(files));
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `decode --json` of the files: what it printed, also for a damaged file (exit code 2 after the frames
/// before the damage).
fn decode(files: &[PathBuf]) -> String {
    let o = run(analyzer().args(["decode", "--json"]).args(files));
    assert!(
        matches!(o.status.code(), Some(0 | 2)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// What a tool said on standard error, but for the line Wireshark's tools print when run as root.
fn complaints(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| !l.starts_with("Running as user"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every comment of every packet, as tshark reads them: tshark's frame number → comments. roce-analyzer
/// numbers frames as Wireshark does (custom blocks included), so these keys are its frame numbers too.
fn comments(file: &Path) -> BTreeMap<u64, Vec<String>> {
    require_tshark();
    let o = run(Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-e", "frame.number", "-e", "frame.cb_pen"])
        .args(["-e", "frame.comment"])
        .args(["-E", "occurrence=a", "-E"])
        .arg("aggregator=\u{1e}"));
    assert!(
        o.status.success() && complaints(&o).is_empty(),
        "tshark reads {}: {}",
        file.display(),
        complaints(&o)
    );
    let mut out = BTreeMap::new();
    for l in String::from_utf8(o.stdout).unwrap().lines() {
        let mut cells = l.splitn(3, '\t');
        let (number, pen, c) = (
            cells.next().unwrap(),
            cells.next().unwrap(),
            cells.next().unwrap(),
        );
        if !pen.is_empty() {
            continue;
        }
        let number: u64 = number.parse().unwrap();
        if !c.is_empty() {
            out.insert(number, c.split('\u{1e}').map(str::to_owned).collect());
        }
    }
    out
}

/// capinfos reads the file whole and without a warning; its report.
fn capinfos(file: &Path) -> String {
    // capinfos comes with tshark (Debian's wireshark-common).
    require_tshark();
    let o = run(Command::new("capinfos").arg(file));
    assert!(
        o.status.success() && complaints(&o).is_empty(),
        "capinfos {}: {}",
        file.display(),
        complaints(&o)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `stats --json` without what names the files: the file table, and the file part of tap names.
fn stats_unnamed(files: &[PathBuf], args: &[&str]) -> Value {
    let mut v = json(&[&["stats", "--json"], args].concat(), files);
    let cap = v["capture"].as_object_mut().unwrap();
    // What the files were: their names, their format (a pcap comes back as pcapng).
    for k in ["file", "files", "format"] {
        cap.remove(k);
    }
    for i in cap["interfaces"].as_array_mut().unwrap() {
        let i = i.as_object_mut().unwrap();
        for k in ["file", "interface", "tap"] {
            i.remove(k);
        }
    }
    let capture = v["capture"].clone();
    let mut v = without_names(v);
    v["capture"] = capture;
    v
}

fn custom_blocks(file: &Path) -> Vec<roce_capture::CustomBlock> {
    let mut r = CaptureReader::open(file).unwrap();
    while r.next_record().unwrap().is_some() {}
    r.custom_blocks().to_vec()
}

fn gbps(v: &Value) -> String {
    format!("{:.2} Gb/s", v.as_f64().unwrap())
}

fn flow_of(v: &Value) -> (String, String, u64) {
    (
        v["src"].as_str().unwrap().to_owned(),
        v["dst"].as_str().unwrap().to_owned(),
        v["dest_qp"].as_u64().unwrap(),
    )
}

#[test]
fn every_cnp_of_incast_dcqcn_says_its_flow_and_the_model_rate_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (input, out) = (vec![sample("incast_dcqcn")], dir.path().join("out.pcapng"));
    annotate(&input, &out, &[]);
    let info = capinfos(&out);
    assert!(
        info.contains("pcapng") && info.contains("Number of packets:   1714"),
        "{info}"
    );
    assert_eq!(
        decode(std::slice::from_ref(&out)),
        decode(&input),
        "frames, times and bytes unchanged"
    );
    assert_eq!(
        stats_unnamed(std::slice::from_ref(&out), &[]),
        stats_unnamed(&input, &[])
    );
    let dcqcn = |f: &[PathBuf]| without_names(json(&["dcqcn", "--json", "--no-fit"], f));
    assert_eq!(
        dcqcn(std::slice::from_ref(&out)),
        dcqcn(&input),
        "the recorded knobs are read back"
    );
    assert_eq!(custom_blocks(&out), custom_blocks(&input[0]));
    assert!(!custom_blocks(&input[0]).is_empty());

    let said = comments(&out);
    let frames = analyzer_json(&input[0]);
    let report = json(&["dcqcn", "--json", "--no-fit"], &input);
    let mut per_flow: BTreeMap<u64, u64> = BTreeMap::new();
    let mut cnps = 0;
    for f in frames.iter().filter(|f| f["kind"] == "cnp") {
        cnps += 1;
        let n = f["frame"].as_u64().unwrap();
        let ts = f["ts_ns"].as_u64().unwrap();
        let qp = f["dest_qp"].as_u64().unwrap();
        let c: Vec<&String> = said
            .get(&n)
            .into_iter()
            .flatten()
            .filter(|c| c.starts_with(&format!("rocetrace: CNP to QP 0x{qp:06x} ")))
            .collect();
        assert_eq!(
            c.len(),
            1,
            "frame {n}, a CNP, has its comment: {:?}",
            said.get(&n)
        );
        // The flow whose sender the CNP goes to, and the first cut the model made at or after it.
        let flow = report["flows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["sender_qp"] == qp && x["sender"] == f["dst"] && x["receiver"] == f["src"])
            .unwrap_or_else(|| panic!("frame {n}: no flow paired with its stream"));
        let cut = flow["cuts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["t_ns"].as_u64().unwrap() >= ts)
            .unwrap_or_else(|| panic!("frame {n}: no cut after it"));
        let want = [
            format!(
                "throttles {} → {} QP 0x{:06x} (paired by {})",
                flow["sender"].as_str().unwrap(),
                flow["receiver"].as_str().unwrap(),
                flow["receiver_qp"].as_u64().unwrap(),
                flow["pairing"].as_str().unwrap()
            ),
            format!("model Rc after it {}", gbps(&cut["rc_after_gbps"])),
            format!("from {})", gbps(&cut["rc_before_gbps"])),
        ];
        for w in want {
            assert!(c[0].contains(&w), "frame {n}: {:?} lacks {w:?}", c[0]);
        }
        *per_flow.entry(qp).or_default() += 1;
    }
    assert_eq!(cnps, 227);
    for flow in report["flows"].as_array().unwrap() {
        if let Some(qp) = flow["sender_qp"].as_u64() {
            assert_eq!(per_flow.get(&qp).copied(), flow["cnps"].as_u64(), "{flow}");
        }
    }

    // The first packet of each flow carries the flow's row of the table, and no other packet does.
    let stats = json(&["stats", "--json"], &input);
    let rows = stats["flows"].as_array().unwrap();
    let firsts = said
        .values()
        .flatten()
        .filter(|c| c.contains(", first packet: "))
        .count();
    assert_eq!(firsts, rows.len());
    for r in rows {
        let first = frames
            .iter()
            .find(|f| f["kind"] == "roce" && flow_of(f) == flow_of(r))
            .unwrap();
        let want = format!(
            "rocetrace: flow {} → {} QP 0x{:06x}, first packet: {} packets, {} bytes",
            r["src"].as_str().unwrap(),
            r["dst"].as_str().unwrap(),
            r["dest_qp"].as_u64().unwrap(),
            r["packets"],
            r["bytes"]
        );
        // The mean rate in the unit stats writes it: the ACK flows of this sample run at a few Mb/s, which two
        // decimals of Gb/s would show as 0.00.
        let want = format!(
            "{want}, {} mean, CE {},",
            roce_core::units::fmt_rate(r["mean_gbps"].as_f64().unwrap() * 1e9),
            r["ce_packets"]
        );
        let n = first["frame"].as_u64().unwrap();
        assert!(
            said.get(&n)
                .into_iter()
                .flatten()
                .any(|c| c.starts_with(&want)),
            "frame {n} starts {want:?}: {:?}",
            said.get(&n)
        );
    }
    assert!(
        said.values().flatten().any(|c| c.contains(" Mb/s mean,")),
        "a slow flow's rate in Mb/s"
    );
}

/// The frames commented with `code`, as decode reads them.
fn commented<'a>(
    said: &BTreeMap<u64, Vec<String>>,
    frames: &'a [Value],
    code: &str,
) -> Vec<&'a Value> {
    let tag = format!("rocetrace: {code}: ");
    frames
        .iter()
        .filter(|f| {
            said.get(&f["frame"].as_u64().unwrap())
                .is_some_and(|c| c.iter().any(|c| c.starts_with(&tag)))
        })
        .collect()
}

fn sum(stats: &Value, column: &str) -> usize {
    stats["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[column].as_u64().unwrap() as usize)
        .sum()
}

/// Each packet sent again carried a PSN an earlier packet of its flow carried.
fn sent_before(frames: &[Value], again: &[&Value]) {
    for f in again {
        let n = f["frame"].as_u64().unwrap();
        let earlier = frames
            .iter()
            .take_while(|e| e["frame"].as_u64().unwrap() < n)
            .any(|e| e["kind"] == "roce" && flow_of(e) == flow_of(f) && e["psn"] == f["psn"]);
        assert!(
            earlier,
            "frame {n} is commented as sent again, but its PSN is new"
        );
    }
}

#[test]
fn findings_point_at_the_packets_they_name() {
    let dir = tempfile::tempdir().unwrap();

    let input = vec![sample("lossy_gbn")];
    let out = dir.path().join("lossy.pcapng");
    annotate(&input, &out, &[]);
    capinfos(&out);
    let (said, frames, stats) = (
        comments(&out),
        analyzer_json(&input[0]),
        json(&["stats", "--json"], &input),
    );
    let again = commented(&said, &frames, "go_back_n_loss");
    assert!(!again.is_empty());
    assert_eq!(
        again.len() + commented(&said, &frames, "timeout_retransmission").len(),
        sum(&stats, "retransmissions")
    );
    sent_before(&frames, &again);
    assert_eq!(
        commented(&said, &frames, "network_loss").len(),
        sum(&stats, "out_of_order")
    );
    assert!(sum(&stats, "out_of_order") > 0);

    let input = vec![sample("pfc_storm_hol")];
    let out = dir.path().join("storm.pcapng");
    annotate(&input, &out, &[]);
    capinfos(&out);
    let (said, frames) = (comments(&out), analyzer_json(&input[0]));
    let (_, summary, _report) = report_of(&input[0], &[]);
    let storms = summary["pauses"]["storms"].as_array().unwrap();
    assert!(!storms.is_empty());
    let paused = commented(&said, &frames, "pfc_storm");
    for f in &paused {
        let ts = f["ts_ns"].as_u64().unwrap();
        let inside = storms.iter().any(|s| {
            let p = s["priority"].as_u64().unwrap() as usize;
            f["kind"] == "pfc"
                && f["src_mac"] == s["src_mac"]
                && f["pfc_quanta"][p].as_u64().unwrap() > 0
                && (s["start_ns"].as_u64().unwrap()..s["end_ns"].as_u64().unwrap()).contains(&ts)
        });
        assert!(
            inside,
            "frame {} is no pause frame of a storm: {f}",
            f["frame"]
        );
    }
    for s in storms {
        let start = s["start_ns"].as_u64().unwrap();
        assert!(
            paused
                .iter()
                .any(|f| f["ts_ns"] == start && f["src_mac"] == s["src_mac"]),
            "the frame that began the storm {s} is commented"
        );
    }
    let stats = json(&["stats", "--json"], &input);
    let again = commented(&said, &frames, "timeout_retransmission");
    assert_eq!(again.len(), sum(&stats, "retransmissions"));
    sent_before(&frames, &again);

    let input = vec![sample("ce_no_cnp")];
    let out = dir.path().join("ce.pcapng");
    annotate(&input, &out, &[]);
    let (said, frames) = (comments(&out), analyzer_json(&input[0]));
    let dcqcn = json(&["dcqcn", "--json", "--no-fit"], &input);
    let unanswered = dcqcn["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["cnps"] == 0 && f["ce_packets"].as_u64().unwrap() > 0)
        .count();
    let first_ce = commented(&said, &frames, "ce_without_cnps");
    assert_eq!(first_ce.len(), unanswered);
    assert!(unanswered > 0);
    for f in first_ce {
        let first = frames
            .iter()
            .find(|e| e["kind"] == "roce" && e["ecn"] == 3 && flow_of(e) == flow_of(f))
            .unwrap();
        assert_eq!(
            first["frame"], f["frame"],
            "the flow's first CE-marked packet"
        );
    }
}

/// CNP streams no flow could be tied to say so, with the reason the analysis gives (`unpaired_cnps`).
#[test]
fn an_unpaired_cnp_says_why() {
    let dir = tempfile::tempdir().unwrap();
    for (name, frames) in [
        ("ambiguous", crate::pairing::two_marked_flows()),
        ("too-few", crate::pairing::one_cnp_among_many_flows()),
    ] {
        let input = dir.path().join(format!("{name}.pcap"));
        let mut w = PcapWriter::new(
            std::fs::File::create(&input).unwrap(),
            LinkType::ETHERNET,
            0,
        )
        .unwrap();
        for (t, f) in &frames {
            w.write_packet(*t, f, f.len() as u32).unwrap();
        }
        w.into_inner().unwrap();
        let out = dir.path().join(format!("{name}.pcapng"));
        annotate(std::slice::from_ref(&input), &out, &[]);
        let unpaired = json(
            &["dcqcn", "--json", "--no-fit"],
            std::slice::from_ref(&input),
        )["unpaired_cnps"]
            .clone();
        let unpaired = unpaired.as_array().unwrap();
        assert!(!unpaired.is_empty(), "{name}");
        let (said, frames) = (comments(&out), analyzer_json(&input));
        let mut n = 0;
        for f in frames.iter().filter(|f| f["kind"] == "cnp") {
            let u = unpaired
                .iter()
                .find(|u| u["dest_qp"] == f["dest_qp"] && u["src"] == f["src"])
                .unwrap();
            let reason = u["reason"].as_str().unwrap();
            let want = match u["cnps_needed"].as_u64() {
                Some(needed) if reason == "too_few_cnps" => {
                    format!(
                        "unpaired: too_few_cnps ({} of {needed} CNPs needed)",
                        u["cnps"]
                    )
                }
                _ => format!("unpaired: {reason} (by {}", u["basis"].as_str().unwrap()),
            };
            let c = &said[&f["frame"].as_u64().unwrap()];
            assert!(
                c.iter().any(|c| c.contains(&want)),
                "{name}: {c:?} lacks {want:?}"
            );
            n += 1;
        }
        assert!(n > 0);
    }
}

#[test]
fn several_inputs_become_one_file_read_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    // A rotated set of a classic pcap, a gzip'd pcap and a zstd'd pcapng: one tap, as the merge reads it.
    let set_dir = dir.path().join("set");
    std::fs::create_dir(&set_dir).unwrap();
    let whole = vec![sample("incast_dcqcn")];
    let parts = rotated_set(&whole[0], &set_dir);
    let out = dir.path().join("set.pcapng");
    annotate(
        std::slice::from_ref(&set_dir),
        &out,
        &["--link-speed", "25G"],
    );
    capinfos(&out);
    assert_eq!(
        decode(std::slice::from_ref(&out)),
        decoded_as_packets_alone(&whole)
    );
    let line = ["--link-speed", "25G"];
    assert_eq!(
        stats_unnamed(std::slice::from_ref(&out), &line),
        stats_unnamed(&parts, &line)
    );
    let cnps = analyzer_json(&whole[0])
        .iter()
        .filter(|f| f["kind"] == "cnp")
        .count();
    let said = comments(&out);
    let cnp_comments = said
        .values()
        .flatten()
        .filter(|c| c.starts_with("rocetrace: CNP to QP"))
        .count();
    assert_eq!(cnp_comments, cnps);

    // Two files of two taps each, merged by time: four interfaces, every CNP commented, the copies of a
    // stream at the tap the model did not take its CNPs from saying which one it did.
    let taps = vec![sample("queue_moves"), sample("queue_moves.rx")];
    let out = dir.path().join("taps.pcapng");
    let printed = annotate(&taps, &out, &[]);
    assert!(printed.contains(", 4 interface(s), "), "{printed}");
    assert!(capinfos(&out).contains("Number of interfaces in file: 4"));
    assert_eq!(decode(std::slice::from_ref(&out)), decode(&taps));
    assert_eq!(
        stats_unnamed(std::slice::from_ref(&out), &[]),
        stats_unnamed(&taps, &[])
    );
    let frames = analyzer_json(&out);
    let said = comments(&out);
    let mut elsewhere = 0;
    for f in frames.iter().filter(|f| f["kind"] == "cnp") {
        let c = &said[&f["frame"].as_u64().unwrap()];
        assert!(
            c.iter().any(|c| c.starts_with("rocetrace: CNP to QP")),
            "{f}"
        );
        elsewhere += c
            .iter()
            .filter(|c| c.contains("the model takes this stream's CNPs at "))
            .count();
    }
    assert!(elsewhere > 0, "a CNP seen at two taps is modelled at one");
}

#[test]
fn a_pcap_becomes_pcapng_and_a_damaged_input_is_annotated_up_to_its_damage() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample("incast_dcqcn");
    let mut r = CaptureReader::open(&input).unwrap();
    let pcap = dir.path().join("in.pcap");
    let mut w =
        PcapWriter::new(std::fs::File::create(&pcap).unwrap(), LinkType::ETHERNET, 0).unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        w.write_packet(rec.ts_ns, rec.data, rec.len).unwrap();
    }
    w.into_inner().unwrap();
    let out = dir.path().join("from-pcap.pcapng");
    annotate(std::slice::from_ref(&pcap), &out, &["--link-speed", "25G"]);
    assert!(capinfos(&out).contains("Wireshark/... - pcapng"));
    assert_eq!(decode(std::slice::from_ref(&out)), decode(&[pcap]));
    let cnps = comments(&out)
        .values()
        .flatten()
        .filter(|c| c.starts_with("rocetrace: CNP to QP"))
        .count();
    assert_eq!(cnps, 227);

    // Cut inside a record: the frames before it are annotated, and the warning names the byte.
    let bytes = std::fs::read(&input).unwrap();
    let cut = dir.path().join("cut.pcapng");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3 + 1]).unwrap();
    let out = dir.path().join("from-cut.pcapng");
    let o = run(analyzer().arg("annotate").arg(&cut).arg("-o").arg(&out));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("warning: ") && stderr.contains("byte "),
        "{stderr}"
    );
    capinfos(&out);
    assert_eq!(decode(&[out]), decode(&[cut]));
}

#[test]
fn inputs_it_cannot_copy_or_must_not_overwrite_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcapng");
    std::fs::copy(sample("incast_dcqcn"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let o = run(analyzer().arg("annotate").arg(&input).arg("-o").arg(&input));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is one of the inputs"));
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is left as it was"
    );

    let o = run(analyzer()
        .args(["annotate", "-", "-o"])
        .arg(dir.path().join("out.pcapng"))
        .stdin(std::fs::File::open(&input).unwrap()));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("standard input can be read only once"));
    assert!(!dir.path().join("out.pcapng").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "no scratch file is left behind");
}

/// The writer used by the tests above is the one the tracer uses: a capture it writes with `if_speed` keeps
/// it through the copy (the line rate every analysis of the copy starts from).
#[test]
fn interface_options_survive_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcapng");
    let mut w = PcapngWriter::new(
        std::fs::File::create(&input).unwrap(),
        &SectionInfo::application("a test"),
    )
    .unwrap();
    let eth = w
        .add_interface_with_speed(
            LinkType::ETHERNET,
            256,
            Some("eth7"),
            Some("a port"),
            Some(40_000_000_000),
        )
        .unwrap();
    w.write_packet(eth, 1_700_000_000_000_000_001, &[0; 60], 60)
        .unwrap();
    w.write_stats(eth, 1_700_000_000_000_000_002, Some(10), Some(2))
        .unwrap();
    w.into_inner().unwrap();
    let out = dir.path().join("out.pcapng");
    annotate(std::slice::from_ref(&input), &out, &[]);
    let info = capinfos(&out);
    for want in [
        "Name = eth7",
        "Description = a port",
        "Speed = 40000000000",
        "Capture length = 256",
    ] {
        assert!(info.contains(want), "{want}: {info}");
    }
    assert_eq!(stats_unnamed(&[out], &[]), stats_unnamed(&[input], &[]));
}
