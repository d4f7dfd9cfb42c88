//! `report`: the directory it writes, the page's self-containment and escaping, what the charts show (read
//! back from their SVG and held against the analysis, and two of them against snapshots), and the page as a
//! real browser shows it (headless Chromium).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::workspace;
use crate::svg::{self, Svg};
use analyzer::analysis::dcqcn::Options;
use analyzer::analysis::findings::{Finding, Severity};
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use analyzer::output::report::charts::{self, Chart};
use analyzer::output::report::{ReportInput, TimeAxis, write_report};
use polars::prelude::{ParquetReader, SerReader};
use roce_capture::Capture;
use roce_core::line::LineRates;

fn sample(name: &str) -> PathBuf {
    workspace()
        .join("samples/captures")
        .join(format!("{name}.pcapng"))
}

/// Runs every analysis over a bundled sample, as the CLI does, with the sample's link speed.
fn inputs(name: &str, link_gbps: u64) -> Analysis {
    let mut r = Capture::open_file(&sample(name)).unwrap();
    let opts = PipelineOptions {
        dcqcn: Options {
            lines: LineRates::flag(Some(link_gbps * 1_000_000_000)),
            fit: false,
            ..Options::default()
        },
        ..PipelineOptions::default()
    };
    let analysis = pipeline::run(&mut r, &opts, |_| {}).unwrap();
    assert_eq!(r.errors().count(), 0);
    analysis
}

fn hostile_findings() -> Vec<Finding> {
    vec![
        Finding {
            code: "pfc_storm",
            severity: Severity::Problem,
            title: "PFC storm <script>alert(1)</script>".into(),
            detail: "Priority 3 was paused for a long time & \"nothing\" moved.".into(),
            evidence: vec!["<img src=x onerror=alert(2)>".into(), "QP 0x11".into()],
        },
        Finding {
            code: "ce_without_cnp",
            severity: Severity::Warning,
            title: "CE marks without CNPs".into(),
            detail: "The notification point may be off.".into(),
            evidence: vec![],
        },
    ]
}

fn report(name: &str, link_gbps: u64, findings: &[Finding]) -> (tempfile::TempDir, Analysis) {
    let inputs = inputs(name, link_gbps);
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        stats: &inputs.stats,
        dcqcn: &inputs.dcqcn,
        pauses: &inputs.pauses,
        findings,
        hops: inputs.hops.as_ref(),
        fabric: &inputs.fabric,
    };
    write_report(dir.path(), &input).unwrap();
    (dir, inputs)
}

#[test]
fn writes_every_file_self_contained_and_escaped() {
    let findings = hostile_findings();
    let (dir, inputs) = report("incast_dcqcn", 25, &findings);
    let d = dir.path();
    assert!(
        !inputs.dcqcn.flows.is_empty(),
        "the sample has congested flows"
    );
    let mut expected: Vec<String> = vec![
        "index.html".into(),
        "summary.json".into(),
        "aggregate.png".into(),
        "cnp_rate.png".into(),
        "alpha.png".into(),
        "fabric_rate.png".into(),
        "fabric_ce.png".into(),
    ];
    let charted = inputs
        .dcqcn
        .flows
        .len()
        .min(analyzer::output::report::MAX_FLOW_CHARTS);
    expected.extend((1..=charted).map(|i| format!("flow_{i:02}.png")));
    for t in [
        "flows",
        "cnps",
        "dcqcn_flows",
        "findings",
        "fabric_pairs",
        "fabric_hosts",
    ] {
        expected.push(format!("{t}.csv"));
        expected.push(format!("{t}.parquet"));
    }
    // A row per model event: Parquet only.
    for t in ["cuts", "model"] {
        expected.push(format!("{t}.parquet"));
        assert!(!d.join(format!("{t}.csv")).exists(), "{t}.csv written");
    }
    for f in &expected {
        let p = d.join(f);
        assert!(
            p.is_file() && std::fs::metadata(&p).unwrap().len() > 0,
            "{f} missing or empty"
        );
    }
    for png in std::fs::read_dir(d).unwrap() {
        let p = png.unwrap().path();
        if p.extension().is_some_and(|e| e == "png") {
            assert_eq!(&std::fs::read(&p).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
        }
    }

    let html = std::fs::read_to_string(d.join("index.html")).unwrap();
    let lower = html.to_ascii_lowercase();
    assert!(
        !lower.contains("http://"),
        "external reference in index.html"
    );
    assert!(
        !lower.contains("https://"),
        "external reference in index.html"
    );
    assert!(!lower.contains("<script"), "a script element got through");
    assert!(!lower.contains("<img"), "an img element got through");
    assert!(html.contains("PFC storm &lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert!(html.contains("&amp; &quot;nothing&quot;"));
    // Findings come first, the worst severity leading.
    let f = html.find("id=\"findings\"").unwrap();
    let fabric = html.find("id=\"fabric\"").unwrap();
    let flows = html.find("id=\"flows\"").unwrap();
    let table = html.find("id=\"table\"").unwrap();
    assert!(f < fabric && fabric < flows && flows < table);
    assert!(html.find("PFC storm").unwrap() < html.find("CE marks without CNPs").unwrap());
    // One inline SVG per chart: the flows', the aggregate, CNP rate and alpha, the fabric's two heatmaps.
    assert_eq!(html.matches("<svg").count(), charted + 5);

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["dcqcn"]["flows"].as_array().unwrap().len(),
        inputs.dcqcn.flows.len()
    );
    let first = &summary["dcqcn"]["flows"][0];
    assert_eq!(
        first["cnps"].as_u64().unwrap(),
        inputs.dcqcn.flows[0].summary.cnps
    );
    assert!(first.get("cnp_ts_ns").is_none() && first.get("observed").is_none());
    assert_eq!(summary["findings"][0]["severity"], "problem");
    assert_eq!(
        summary["stats"]["capture"]["frames"].as_u64().unwrap(),
        inputs.stats.capture.frames
    );
    let cuts: usize = inputs.dcqcn.flows.iter().map(|f| f.cuts.len()).sum();
    let file = std::fs::File::open(d.join("cuts.parquet")).unwrap();
    let table = ParquetReader::new(file).finish().unwrap();
    assert_eq!(table.height(), cuts);
}

#[test]
fn output_is_deterministic() {
    let (a, _) = report("pfc_storm_hol", 25, &[]);
    let (b, _) = report("pfc_storm_hol", 25, &[]);
    for f in [
        "index.html",
        "summary.json",
        "pfc_timeline.png",
        ".roce-report",
    ] {
        assert_eq!(
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
            "{f} differs between two runs"
        );
    }
}

#[test]
fn many_flows_chart_the_worst_and_table_the_rest() {
    // Sixty copies of the busiest flow with distinct QPs and falling CNP counts: only the top eight are drawn.
    let mut inputs = inputs("incast_dcqcn", 25);
    let base = inputs.dcqcn.flows[0].clone();
    let base_row = inputs
        .stats
        .flows
        .iter()
        .find(|r| r.dest_qp == base.summary.receiver_qp && r.src == base.summary.sender)
        .unwrap()
        .clone();
    inputs.dcqcn.flows.clear();
    for i in 0..60u32 {
        let mut f = base.clone();
        f.summary.receiver_qp = 0x1000 + i;
        f.summary.cnps = 100 + u64::from(i);
        inputs.dcqcn.flows.push(f);
        let mut r = base_row.clone();
        r.dest_qp = 0x1000 + i;
        inputs.stats.flows.push(r);
    }
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        stats: &inputs.stats,
        dcqcn: &inputs.dcqcn,
        pauses: &inputs.pauses,
        findings: &[],
        hops: inputs.hops.as_ref(),
        fabric: &inputs.fabric,
    };
    let files = write_report(dir.path(), &input).unwrap();
    let flow_charts = files
        .charts
        .iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("flow_")
        })
        .count();
    assert_eq!(flow_charts, analyzer::output::report::MAX_FLOW_CHARTS);
    let html = std::fs::read_to_string(&files.index).unwrap();
    // The worst flow (most CNPs: QP 0x103b) leads; the least bad is left to the table.
    assert!(html.contains("Flow 1: "));
    let first = html.find("Flow 1: ").unwrap();
    assert!(html[first..first + 200].contains("QP 0x103b"));
    assert!(!html.contains("<figcaption>Flow 9"));
    assert!(html.contains("more flows"), "the table summarizes the rest");
}

/// Two pixels: plotters rounds every coordinate to a whole pixel, and the tick labels it is read back
/// through are rounded too.
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 2.0
}

/// The page's time axis for an analysed capture.
fn axis_of(a: &Analysis) -> TimeAxis {
    let cap = &a.stats.capture;
    TimeAxis::new(cap.first_ns.unwrap(), cap.duration_ns)
}

/// The CNP-rate chart of incast_dcqcn, as SVG. Nothing in it depends on time or paths, so nothing needs
/// redacting; a change here is a change in what the chart shows. Before the snapshot, what it must show is
/// read back from the drawing: each charted flow's line, summed over its bins, holds that flow's CNPs.
#[test]
fn cnp_rate_chart_snapshot() {
    let inputs = inputs("incast_dcqcn", 25);
    let axis = axis_of(&inputs);
    let shown: Vec<_> = inputs.dcqcn.flows.iter().take(8).collect();
    let chart = analyzer::output::report::cnp_rate_chart(&inputs.dcqcn, &shown, &axis).unwrap();
    let svg = charts::to_svg(&chart).unwrap();
    assert!(svg.starts_with("<svg"));
    let drawn = Svg::parse(&svg);
    let (x, y) = (drawn.x_scale(), drawn.y_scale());
    // The x axis counts in the axis's unit, the y axis in CNPs per millisecond.
    let origin = inputs.stats.capture.first_ns.unwrap();
    let units_per_ms = axis.x(origin + 1_000_000) - axis.x(origin);
    assert!(shown.len() > 1, "a chart of several flows");
    for (i, f) in shown.iter().enumerate() {
        let line = drawn.line(&format!("flow {}", i + 1));
        let (first, last) = (line[0].0, line[line.len() - 1].0);
        let bin_ms = (x.value(last) - x.value(first)) / (line.len() - 1) as f64 / units_per_ms;
        let cnps: f64 = line.iter().map(|p| (y.value(p.1) * bin_ms).round()).sum();
        assert_eq!(
            cnps as usize,
            f.cnp_ts_ns.len(),
            "flow {}: the CNPs its line holds",
            i + 1
        );
    }
    let all = format!("all {} flows", inputs.dcqcn.flows.len());
    assert!(drawn.texts().contains(&all.as_str()), "{:?}", drawn.texts());
    insta::assert_snapshot!("cnp_rate_incast_dcqcn", svg);
}

/// The page's per-flow charts of incast_dcqcn, read back from the SVG inlined in index.html: one tick at
/// the time of every CNP the flow received, the count in the legend, the model's Rc line through every
/// point of the model (starting at the line rate), and the observed line through every busy bin.
#[test]
fn flow_charts_show_every_cnp_and_the_model_where_it_is() {
    let (dir, analysis) = report("incast_dcqcn", 25, &[]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let axis = axis_of(&analysis);
    let d = &analysis.dcqcn;
    let flow_charts: Vec<(String, String)> = svg::figures(&html)
        .into_iter()
        .filter(|(caption, _)| caption.starts_with("Flow "))
        .collect();
    assert_eq!(
        flow_charts.len(),
        d.flows.len().min(analyzer::output::report::MAX_FLOW_CHARTS)
    );
    for (caption, chart) in &flow_charts {
        let f = d
            .flows
            .iter()
            .find(|f| {
                let s = &f.summary;
                caption.contains(&format!(
                    "{} → {} QP {:#x}",
                    s.sender, s.receiver, s.receiver_qp
                ))
            })
            .unwrap_or_else(|| panic!("no flow for the chart {caption:?}"));
        let drawn = Svg::parse(chart);
        let (x, y) = (drawn.x_scale(), drawn.y_scale());

        let cnps = f.cnp_ts_ns.to_vec();
        assert!(!cnps.is_empty(), "{caption}: a charted flow has CNPs");
        let legend = format!("CNP ({})", f.summary.cnps);
        let mut ticks: Vec<f64> = drawn
            .shapes(&legend, "polyline")
            .iter()
            .map(|t| t.points()[0].0)
            .collect();
        assert_eq!(ticks.len(), cnps.len(), "{caption}: one tick per CNP");
        assert_eq!(f.summary.cnps, cnps.len() as u64, "{caption}");
        ticks.sort_by(f64::total_cmp);
        for (tick, t) in ticks.iter().zip(&cnps) {
            let want = x.pixel(axis.x(*t));
            assert!(
                near(*tick, want),
                "{caption}: a CNP at {want} drawn at {tick}"
            );
        }

        let rc = drawn.line("model Rc");
        assert!(
            near(rc[0].1, y.pixel(d.line.gbps())),
            "{caption}: Rc starts at the line rate"
        );
        assert!(!f.model.is_empty(), "{caption}: the model acted");
        for m in &f.model {
            let want = (x.pixel(axis.x(m.t_ns)), y.pixel(m.rc_gbps));
            assert!(
                rc.iter().any(|p| near(p.0, want.0) && near(p.1, want.1)),
                "{caption}: the model's Rc {} Gb/s at {} ns is not on the line",
                m.rc_gbps,
                m.t_ns
            );
        }

        let observed_label = drawn
            .texts()
            .into_iter()
            .find(|t| t.starts_with("observed ("))
            .unwrap_or_else(|| panic!("{caption}: no observed line in the legend"))
            .to_string();
        let observed = drawn.line(&observed_label);
        assert_eq!(
            observed.len(),
            f.observed.len(),
            "{caption}: one point per busy bin"
        );
        for (p, o) in observed.iter().zip(&f.observed) {
            let want = (x.pixel(axis.x(o.t_ns + d.bin_ns / 2)), y.pixel(o.gbps));
            assert!(
                near(p.0, want.0) && near(p.1, want.1),
                "{caption}: the bin at {} ns ({} Gb/s) drawn at {p:?}, not {want:?}",
                o.t_ns,
                o.gbps
            );
        }
    }
}

/// The pause timeline of pfc_storm_hol, against a snapshot, after what it must show is read back from
/// the drawing: a lane per pausing source and priority, a box per pause interval from its start to its
/// end in its source's lane, and an outline per storm.
#[test]
fn pause_timeline_snapshot() {
    let inputs = inputs("pfc_storm_hol", 25);
    let axis = axis_of(&inputs);
    let (chart, _) = analyzer::output::report::pause_timeline(&inputs.pauses, &axis);
    let chart = chart.expect("the sample pauses");
    assert!(matches!(chart, Chart::Timeline(_)));
    let svg = charts::to_svg(&chart).unwrap();
    let drawn = Svg::parse(&svg);
    let x = drawn.x_scale();
    let p = &inputs.pauses;
    // (start, end, source MAC, priority) of each interval and each storm.
    let intervals: Vec<_> = (p.intervals.iter())
        .map(|i| (i.start_ns, i.end_ns, i.src_mac.as_str(), i.priority))
        .collect();
    let storms: Vec<_> = (p.storms.iter())
        .map(|s| (s.start_ns, s.end_ns, s.src_mac.as_str(), s.priority))
        .collect();
    for (legend, wanted) in [("paused", intervals), ("storm", storms)] {
        let shapes = drawn.shapes(legend, "rect");
        assert!(!wanted.is_empty(), "the sample has {legend} spans");
        assert_eq!(shapes.len(), wanted.len(), "one {legend} shape each");
        for &(start, end, mac, prio) in &wanted {
            // Its lane: the label naming its source and priority, whose row the shape must cross.
            let prio = prio.map_or("PAUSE".to_string(), |p| format!("prio {p}"));
            let row = drawn
                .named("text")
                .find(|t| t.text.contains(mac) && t.text.contains(&prio))
                .unwrap_or_else(|| panic!("no lane for {mac} {prio}: {:?}", drawn.texts()))
                .num("y");
            let (from, to) = (x.pixel(axis.x(start)), x.pixel(axis.x(end)));
            assert!(
                shapes.iter().any(|b| {
                    let (a, z) = b.x_extent();
                    near(a, from) && near(z, to) && b.spans_row(row)
                }),
                "no {legend} shape from {from} to {to} in the lane of {mac} {prio}"
            );
        }
    }
    insta::assert_snapshot!("pfc_timeline_pfc_storm_hol", svg);
}

fn require_chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(out) = Command::new("which").arg(name).output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!("chromium is not installed: run `cargo xtask test`, which installs chromium");
}

/// Opens the page in headless Chromium with networking cut off and logging on, and takes a screenshot.
fn screenshot(index: &Path, out: &Path) -> String {
    let chromium = require_chromium();
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", out.display()))
        .arg(format!("file://{}", index.display()))
        .output()
        .expect("chromium starts");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "chromium failed: {}\n{stderr}",
        output.status
    );
    stderr
}

#[test]
fn opens_in_headless_chromium_with_rendered_charts() {
    let findings = hostile_findings();
    for (name, gbps) in [("incast_dcqcn", 25), ("pfc_storm_hol", 25)] {
        let (dir, _) = report(name, gbps, &findings);
        let shot = dir.path().join("screenshot.png");
        let log = screenshot(&dir.path().join("index.html"), &shot);
        let console: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
            .collect();
        assert!(console.is_empty(), "{name}: console output: {console:#?}");

        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&shot).expect("chromium wrote the screenshot"),
        ));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (1400, 3000));
        let px = info.color_type.samples();
        let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
        let non_white = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
        let mut colours: Vec<[u8; 3]> = pixels.iter().map(|p| [p[0], p[1], p[2]]).collect();
        colours.sort_unstable();
        colours.dedup();
        // Text alone is grey on white; charts bring the palette's colours and a lot more ink.
        assert!(
            non_white > pixels.len() / 50,
            "{name}: only {non_white} non-white pixels"
        );
        assert!(
            colours.len() > 50,
            "{name}: only {} colours: charts not rendered",
            colours.len()
        );
        let has = |c: [u8; 3]| colours.binary_search(&c).is_ok();
        assert!(
            has([0, 114, 178]),
            "{name}: the chart colour of the first series is not on screen"
        );
        if std::env::var_os("REPORT_KEEP_SCREENSHOT").is_some() {
            std::fs::copy(&shot, format!("/tmp/report_{name}.png")).unwrap();
        }
    }
}

/// A saturation test that ran clean still shows its traffic: the throughput chart, and a headline that says
/// it was clean and how fast.
#[test]
fn a_clean_capture_shows_its_throughput_and_says_it_was_clean() {
    let (dir, inputs) = report("clean_line_rate", 100, &[]);
    let d = dir.path();
    assert!(inputs.dcqcn.flows.is_empty(), "nothing congested here");
    assert!(d.join("aggregate.png").is_file(), "the throughput chart");
    let html = std::fs::read_to_string(d.join("index.html")).unwrap();
    assert!(html.matches("<svg").count() >= 1, "a chart on the page");
    let headline = html.find("class=\"headline\"").expect("a headline");
    assert!(
        headline < html.find("id=\"findings\"").unwrap(),
        "the headline leads"
    );
    let h = analyzer::output::report::headline(&ReportInput {
        stats: &inputs.stats,
        dcqcn: &inputs.dcqcn,
        pauses: &inputs.pauses,
        findings: &[],
        hops: None,
        fabric: &inputs.fabric,
    });
    assert!(h.verdict.starts_with("Clean at 99."), "{}", h.verdict);
    assert!(html.contains(&h.verdict));
    let facts: Vec<&str> = h.facts.iter().map(|f| f.0).collect();
    assert_eq!(
        facts,
        ["span", "throughput", "line rate", "CE", "CNPs", "PFC pause"]
    );
    assert_eq!(h.facts[2].1, "100 Gb/s (--link-speed)");
    assert_eq!(h.facts[4].1, "0");
    assert_eq!(h.facts[5].1, "none");
}

/// The incast's headline names it and its receiver, and says when DCQCN settled it.
#[test]
fn an_incast_headline_names_the_incast() {
    let (dir, inputs) = report("incast_dcqcn", 25, &[]);
    let h = analyzer::output::report::headline(&ReportInput {
        stats: &inputs.stats,
        dcqcn: &inputs.dcqcn,
        pauses: &inputs.pauses,
        findings: &[],
        hops: None,
        fabric: &inputs.fabric,
    });
    assert!(
        h.verdict
            .starts_with("4:1 incast at 10.0.0.5, DCQCN converged in "),
        "{}",
        h.verdict
    );
    // One tap: every CNP is seen once.
    let cnps: u64 = inputs.stats.cnps.iter().map(|c| c.count).sum();
    assert_eq!(h.facts[4].1, cnps.to_string());
    assert_eq!(h.cnps, cnps);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("4:1 incast at 10.0.0.5"));
    // The throughput chart has every flow, the busiest on their own lines.
    let t = &inputs.dcqcn.traffic;
    assert!(t.flows >= 4, "{} flows", t.flows);
    assert_eq!(t.busiest.len(), t.flows.min(8));
    assert!(t.busiest.windows(2).all(|w| w[0].bytes >= w[1].bytes));
}

/// `report … | head`: the reader is gone before the headline is written, and the command ends quietly.
#[test]
fn report_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = crate::common::analyzer()
        .args(["report", "--link-speed", "25G", "-o"])
        .arg(dir.path())
        .arg(sample("incast_dcqcn"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(dir.path().join("index.html").is_file());
}

/// The files in a report's directory, the manifest's lines and the directory's entries, sorted.
fn listed_and_present(dir: &Path) -> (Vec<String>, Vec<String>) {
    let manifest = std::fs::read_to_string(dir.join(".roce-report")).unwrap();
    let listed: Vec<String> = manifest
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect();
    let mut present: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".roce-report")
        .collect();
    present.sort();
    (listed, present)
}

/// A report written where another was replaces it whole: the charts and tables the new capture does not
/// make are gone, the files the user put there stay, and the manifest names exactly the report's files.
#[test]
fn a_report_into_a_used_directory_leaves_nothing_of_the_last_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let run_report = |name: &str, extra: &[&str]| {
        let o = crate::common::run(
            crate::common::analyzer()
                .args(["report", "--no-fit", "-o"])
                .arg(&out)
                .args(extra)
                .arg(sample(name)),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run_report("incast_dcqcn", &["--model-table"]);
    let (listed, first) = listed_and_present(&out);
    assert_eq!(listed, first, "every file of the report is listed");
    assert!(
        first.contains(&"flow_04.png".to_string())
            && first.contains(&"model_events.parquet".into())
    );
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    std::fs::write(out.join("my_chart.png"), "mine").unwrap();

    // A capture without congestion: no flow, CNP or alpha chart, no model table.
    run_report("clean_line_rate", &[]);
    let (listed, present) = listed_and_present(&out);
    let mine = ["my_chart.png".to_string(), "notes.txt".to_string()];
    let reports: Vec<String> = present
        .iter()
        .filter(|n| !mine.contains(n))
        .cloned()
        .collect();
    assert_eq!(listed, reports);
    assert!(mine.iter().all(|n| present.contains(n)));
    for stale in [
        "flow_01.png",
        "cnp_rate.png",
        "alpha.png",
        "model_events.parquet",
    ] {
        assert!(
            first.contains(&stale.to_string()),
            "{stale} was written first"
        );
        assert!(!present.contains(&stale.to_string()), "{stale} stayed");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
}
