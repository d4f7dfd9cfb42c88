//! The report's headline: each packet counted once however many taps saw it, data as data, a peak no link
//! could exceed, rates in a unit that fits them, the line rate and where it came from, and the same numbers
//! in `summary.json`.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, report_of, run, sample_captures, workspace};
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use analyzer::output::report::charts::Chart;
use analyzer::output::report::flows::aggregate_chart;
use analyzer::output::report::{Headline, ReportInput, TimeAxis, headline};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{Capture, CaptureReader, LinkType};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::Value;

fn sample(name: &str) -> PathBuf {
    workspace().join(format!("samples/captures/{name}.pcapng"))
}

fn analyse(path: &Path) -> Analysis {
    let mut c = Capture::open_file(path).unwrap();
    let mut opts = PipelineOptions::default();
    opts.dcqcn.fit = false;
    let a = pipeline::run(&mut c, &opts, |_| {}).unwrap();
    assert_eq!(c.errors().count(), 0);
    a
}

fn headline_of(a: &Analysis) -> Headline {
    headline(&ReportInput {
        stats: &a.stats,
        dcqcn: &a.dcqcn,
        pauses: &a.pauses,
        findings: &a.findings,
        hops: a.hops.as_ref(),
        fabric: &a.fabric,
    })
}

/// Every record of `from`, written to `to` with each record at each of `taps` interfaces (named `tap0`,
/// `tap1`...), the copies `skew_ns` apart, each interface recording `speed_bps` (or none).
fn copy_to_taps(from: &Path, to: &Path, taps: u32, skew_ns: u64, speed_bps: Option<u64>) {
    let mut r = CaptureReader::open(from).unwrap();
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    for i in 0..taps {
        let name = format!("tap{i}");
        w.add_interface_with_speed(LinkType::ETHERNET, 0, Some(&name), None, speed_bps)
            .unwrap();
    }
    while let Some(rec) = r.next_record().unwrap() {
        for i in 0..taps {
            let ts = rec.ts_ns + u64::from(i) * skew_ns;
            w.write_packet(i, ts, rec.data, rec.len).unwrap();
        }
    }
    std::fs::write(to, w.into_inner().unwrap()).unwrap();
}

/// Data packets (those that carry payload), CE-marked ones and CNPs, counted frame by frame from
/// `decode --json`: a count the headline must match without looking at how the analysis got it.
fn counted_by_decode(path: &Path) -> (u64, u64, u64) {
    let (mut data, mut ce, mut cnps) = (0, 0, 0);
    for f in crate::common::analyzer_json(path) {
        match f["kind"].as_str() {
            Some("roce") if f["payload_len"].as_u64().is_some_and(|n| n > 0) => {
                data += 1;
                ce += u64::from(f["ecn"].as_u64() == Some(3));
            }
            Some("cnp") => cnps += 1,
            _ => {}
        }
    }
    (data, ce, cnps)
}

#[test]
fn summary_json_carries_the_headline_counted_from_the_frames() {
    let path = sample("incast_dcqcn");
    let (stdout, summary, _dir) = report_of(&path, &[]);
    let h = &summary["headline"];
    let mut keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "ce_fraction",
            "cnps",
            "data_packets",
            "line_gbps",
            "line_rate_source",
            "mean_gbps",
            "paused_ns",
            "peak_gbps",
            "span_ns",
            "verdict"
        ]
    );
    let (data, ce, cnps) = counted_by_decode(&path);
    assert_eq!(h["data_packets"].as_u64(), Some(data));
    assert_eq!(h["cnps"].as_u64(), Some(cnps));
    assert_eq!(h["ce_fraction"].as_f64(), Some(ce as f64 / data as f64));
    assert_eq!(h["paused_ns"], 0);
    assert_eq!(
        h["span_ns"], summary["stats"]["capture"]["duration_ns"],
        "the capture's span"
    );
    assert_eq!(
        (&h["line_gbps"], &h["line_rate_source"]),
        (&Value::from(25.0), &Value::from("if_speed"))
    );
    // The verdict and the numbers are the ones printed.
    assert!(
        stdout.starts_with(h["verdict"].as_str().unwrap()),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("of {data} data packets")),
        "{stdout}"
    );
    assert!(stdout.contains("line rate 25 Gb/s (the capture's if_speed)"));
}

/// The incast's tap on its 25 Gb/s link read 26.6 Gb/s (107 %) when whole frames were binned by their
/// timestamps. No sample's peak may exceed the line it was measured on, and a saturated link reads close to it.
#[test]
fn no_peak_above_the_line() {
    for path in sample_captures() {
        let a = analyse(&path);
        let h = headline_of(&a);
        let peak = h.peak_gbps.expect("every sample has data");
        let at = a.dcqcn.traffic.peak.as_ref().unwrap();
        assert_eq!(at.line, h.line, "{}", path.display());
        assert!(
            peak <= h.line.gbps() && peak > 0.0,
            "{}: peak {peak} Gb/s on a {} Gb/s line",
            path.display(),
            h.line.gbps()
        );
    }
    let h = headline_of(&analyse(&sample("incast_dcqcn")));
    let peak = h.peak_gbps.unwrap();
    // Nor any rate a chart or table shows: each flow's bins, the busiest flows' and the aggregate (its flows
    // all cross the one link to the receiver). Whole frames binned by timestamp read 26.6 Gb/s in some.
    let a = analyse(&sample("incast_dcqcn"));
    let line = a.dcqcn.line.gbps() * (1.0 + 1e-9);
    let t = &a.dcqcn.traffic;
    let rates = a
        .dcqcn
        .flows
        .iter()
        .flat_map(|f| f.observed.iter().map(|o| o.gbps))
        .chain(
            t.busiest
                .iter()
                .flat_map(|f| f.observed.iter().map(|o| o.gbps)),
        )
        .chain(t.aggregate.iter().map(|b| b.gbps))
        .chain(a.dcqcn.aggregate.iter().map(|b| b.gbps));
    let top = rates.fold(0.0, f64::max);
    assert!(top <= line && top > 24.0, "{top} Gb/s on a 25 Gb/s line");
    // Back-to-back 4 KiB frames with 24 bytes of preamble, FCS and gap between them: 99.4 % of the line.
    assert!((24.8..=25.0).contains(&peak), "{peak}");
    assert!(
        h.facts[1]
            .1
            .contains("24.9 Gb/s peak on one link (99.5 % of its 25 Gb/s line)"),
        "{:?}",
        h.facts[1]
    );
}

/// Three hosts' captures of one ring see each packet at its sender's tap and its receiver's. The same packets
/// at two taps must read as at one: the data packets, CE share, CNPs and pauses counted once.
#[test]
fn two_taps_that_see_every_packet_count_each_once() {
    let tmp = tempfile::tempdir().unwrap();
    // The second tap sees each packet 700 ns later; for the PFC sample at the same instant, since a later
    // last frame would lengthen the pauses still running when the capture ends.
    for (name, skew) in [("incast_dcqcn", 700), ("pfc_only", 0)] {
        let one = tmp.path().join(format!("{name}.one.pcapng"));
        let two = tmp.path().join(format!("{name}.two.pcapng"));
        copy_to_taps(&sample(name), &one, 1, 0, Some(25_000_000_000));
        copy_to_taps(&sample(name), &two, 2, skew, Some(25_000_000_000));
        let (h1, h2) = (headline_of(&analyse(&one)), headline_of(&analyse(&two)));
        assert!(h1.data_packets > 0, "{name}");
        assert_eq!(h2.data_packets, h1.data_packets, "{name}");
        assert_eq!(h2.ce_fraction, h1.ce_fraction, "{name}");
        assert_eq!(h2.cnps, h1.cnps, "{name}");
        assert_eq!(h2.paused_ns, h1.paused_ns, "{name}");
        assert_eq!(h2.mean_gbps, h1.mean_gbps, "{name}");
        assert!(h2.peak_gbps.unwrap() <= 25.0, "{name}");
    }
}

/// Every packet of the all-to-all sample is seen at its sender's link and at its receiver's, with the same
/// count at both, and its CE marks only at the receiver's: the headline counts each packet once and each
/// mark as the simulator made it, not as the sender's tap (the first on a tie) saw none.
#[test]
fn ce_marks_count_where_the_tap_past_the_switch_saw_them() {
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(
            workspace().join("samples/captures/all_to_all_slow_pair.truth.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let sum = |field: &str| -> u64 {
        truth["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[field].as_u64().unwrap())
            .sum()
    };
    let h = headline_of(&analyse(&sample("all_to_all_slow_pair")));
    assert_eq!(h.data_packets, sum("data_packets_sent"));
    let marked = (h.ce_fraction * h.data_packets as f64).round() as u64;
    assert_eq!(marked, sum("ce_received"));
    assert!(marked > 0);
}

/// A capture that records no line rate, analysed without `--link-speed`: the headline, the `dcqcn` header,
/// `stats` and summary.json all say the 100 Gb/s was assumed.
#[test]
fn an_assumed_line_rate_says_so_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("no_if_speed.pcapng");
    copy_to_taps(&sample("incast_dcqcn"), &path, 1, 0, None);
    let said = "line rate assumed 100 Gb/s (pass --link-speed)";
    let (stdout, summary, _dir) = report_of(&path, &[]);
    assert!(stdout.contains(said), "{stdout}");
    let verdict = summary["headline"]["verdict"].as_str().unwrap();
    assert!(
        verdict.ends_with("; line rate assumed 100 Gb/s (pass --link-speed)."),
        "{verdict}"
    );
    for (what, v) in [
        ("headline", &summary["headline"]),
        ("dcqcn", &summary["dcqcn"]),
    ] {
        assert_eq!(
            (&v["line_gbps"], &v["line_rate_source"]),
            (&Value::from(100.0), &Value::from("assumed")),
            "{what}"
        );
    }
    for cmd in ["dcqcn", "stats"] {
        let out = run(analyzer().arg(cmd).arg(&path));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(said), "{cmd}: {text}");
    }
    let out = run(analyzer().args(["dcqcn", "--json"]).arg(&path));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["line_rate_source"], "assumed");
    // Given, it is the rate used, and says so.
    let (stdout, summary, _dir) = report_of(&path, &["--link-speed", "25"]);
    assert!(
        stdout.contains("line rate 25 Gb/s (--link-speed)"),
        "{stdout}"
    );
    assert_eq!(summary["headline"]["line_rate_source"], "flag");
    assert_eq!(summary["dcqcn"]["line_gbps"], 25.0);
}

/// A trickle (a 1 KiB write every 100 µs, 80 Mb/s on a 100 Gb/s line) reads in Mb/s everywhere, not as
/// 0.0 Gb/s, and its throughput chart scales to it rather than to the line far above.
#[test]
fn a_trickle_reads_in_a_unit_that_fits() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("trickle.pcapng");
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface_with_speed(
        LinkType::ETHERNET,
        0,
        Some("eth0"),
        None,
        Some(100_000_000_000),
    )
    .unwrap();
    for k in 0..200u32 {
        let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, k);
        let ext = ExtHeaders {
            reth: Some(roce_wire::ext::RethRepr {
                va: 0,
                rkey: 1,
                dma_len: 1024,
            }),
            ..ExtHeaders::default()
        };
        let f = testkit::frames::v4_frame(1, 2, 2, bth, ext, &[0; 1024]);
        let ts = 1_700_000_000_000_000_000 + u64::from(k) * 100_000;
        w.write_packet(0, ts, &f, f.len() as u32).unwrap();
    }
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let a = analyse(&path);
    let h = headline_of(&a);
    assert!(h.verdict.starts_with("Clean at 8"), "{}", h.verdict);
    assert!(h.verdict.contains(" Mb/s"), "{}", h.verdict);
    assert!(!format!("{h}").contains("0.0 Gb/s"), "{h}");
    let mean = h.mean_gbps.unwrap();
    assert!((0.08..0.09).contains(&mean), "{mean}");
    let stats = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&stats.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("10.0.0.1 "))
        .expect("the flow's row");
    assert!(row.contains(" Mb/s") && !row.contains("0.000"), "{row}");
    let axis = TimeAxis::new(
        a.stats.capture.first_ns.unwrap(),
        a.stats.capture.duration_ns,
    );
    let Some(Chart::Line(c)) = aggregate_chart(&a.dcqcn, &axis) else {
        panic!("a throughput chart");
    };
    assert!(c.y_label.starts_with("throughput (Mb/s"), "{}", c.y_label);
    assert!(c.y_label.contains("line rate 100 Gb/s"), "{}", c.y_label);
    let top = c.lines[0].points.iter().map(|p| p.1).fold(0.0, f64::max);
    assert!(
        top > 50.0 && c.y_max < 2.0 * top,
        "{top} Mb/s, axis to {}",
        c.y_max
    );
}

/// A capture of atomics and their acknowledgements holds RoCE, none of it with a payload: the verdict says so,
/// rather than that there was no RoCE traffic.
#[test]
fn roce_without_payload_is_named_not_called_absent() {
    let Some(path) = crate::common::shared_capture("softroce_rdma_atomic_bw.pcap") else {
        return;
    };
    let (stdout, summary, _dir) = crate::common::report_of(&path, &[]);
    let verdict = summary["headline"]["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("No RoCE packet with payload in this capture (10 RoCE frames"),
        "{verdict}"
    );
    assert!(stdout.starts_with(verdict), "{stdout}");
}
