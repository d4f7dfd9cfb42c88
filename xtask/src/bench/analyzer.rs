//! `cargo xtask bench`: the analyzer's throughput and memory against the file-reading floor and tshark.
//!
//! Everything runs with a warm page cache, timed as `bench::measure` times every bench, on every core (a
//! capture is read on a thread of its own beside the one that decodes) or, with `--one-core`, on core 0;
//! each measurement is the median of three runs, and the floor/`stats` ratio is also taken over
//! alternating pairs of runs. tshark is measured on a slice of the same file, because dissecting millions
//! of frames with it takes many minutes; frames/s is what compares.

use std::process::Command;

use anyhow::Result;
use samples::bulk::BulkSpec;

use super::benchmarks_md;
use super::inputs::{build_release_analyzer, bulk_capture, release_analyzer};
use super::machine::{cores_of_cpu, kernel};
use super::measure::{cores_note, measure, path, time_once, wrapper_overhead};
use crate::install;
use crate::shell::sh;
use crate::workspace::target_dir;

const TSHARK_SLICE: u64 = 200_000;

struct Measured {
    what: String,
    command: String,
    frames: u64,
    seconds: f64,
    peak_rss_mb: f64,
    /// Size of the whole file the command reads, for MB/s (`None` for the slice).
    file_mb: Option<f64>,
}

/// Alternating runs of the floor and `stats`, for their ratio. This VM's speed drifts by tens of percent
/// over minutes whatever runs on it, so three floor runs followed by three `stats` runs can land in
/// different phases; a floor and a `stats` run side by side see the same machine.
const PAIRS: usize = 7;

struct Paired {
    /// (floor s, stats s) per pair.
    runs: Vec<(f64, f64)>,
}

impl Paired {
    fn ratios(&self) -> Vec<f64> {
        let mut r: Vec<f64> = self.runs.iter().map(|(f, s)| s / f).collect();
        r.sort_by(f64::total_cmp);
        r
    }

    /// The fastest run of each: other work and slow phases only ever add time.
    fn best(&self) -> (f64, f64) {
        let f = self.runs.iter().map(|r| r.0).fold(f64::MAX, f64::min);
        let s = self.runs.iter().map(|r| r.1).fold(f64::MAX, f64::min);
        (f, s)
    }
}

pub fn run(frames: u64) -> Result<()> {
    let spec = BulkSpec {
        frames,
        ..BulkSpec::default()
    };
    install::ensure_apt(&["tshark", "time"])?;
    build_release_analyzer(&["--example", "bare_pass"])?;
    let analyzer = release_analyzer();
    let bare = target_dir().join("release/examples/bare_pass");
    let dir = target_dir().join("bench");
    let file = bulk_capture(&spec)?;
    let size_mb = std::fs::metadata(&file)?.len() as f64 / 1e6;
    let slice = dir.join(format!("slice-{TSHARK_SLICE}.pcap"));
    sh(Command::new("editcap")
        .args(["-r"])
        .arg(&file)
        .arg(&slice)
        .arg(format!("1-{TSHARK_SLICE}")))?;
    let f = path(&file);
    let s = path(&slice);
    let a = path(&analyzer);
    // Warm the page cache so the first measurement is not a disk read.
    measure(&[path(&bare).as_str(), f.as_str()], 0.0)?;
    let overhead = wrapper_overhead()?;
    let mut rows = Vec::new();
    let file_mb = Some(size_mb);
    let mut add = |what: &str, frames: u64, file_mb: Option<f64>, argv: &[&str]| -> Result<()> {
        eprintln!("xtask: measuring {what}");
        let (seconds, peak_rss_mb) = measure(argv, overhead)?;
        rows.push(Measured {
            what: what.into(),
            command: argv
                .iter()
                .map(|x| x.replace(&*target_dir().to_string_lossy(), "$TARGET"))
                .collect::<Vec<_>>()
                .join(" "),
            frames,
            seconds,
            peak_rss_mb,
            file_mb,
        });
        Ok(())
    };
    let n = spec.frames;
    add(
        "bare pass over the records (floor)",
        n,
        file_mb,
        &[&path(&bare), &f],
    )?;
    add("roce-analyzer stats", n, file_mb, &[&a, "stats", &f])?;
    add(
        "roce-analyzer stats --json",
        n,
        file_mb,
        &[&a, "stats", "--json", &f],
    )?;
    add(
        "roce-analyzer decode --json",
        n,
        file_mb,
        &[&a, "decode", "--json", &f],
    )?;
    // The per-frame dataset for Spark (docs/spark.md); each run starts from an empty directory, since the
    // writer refuses to add to a dataset.
    let dataset = path(&dir.join("dataset"));
    let write = format!("rm -rf '{dataset}' && exec '{a}' decode --parquet '{dataset}' '{f}'");
    add(
        "roce-analyzer decode --parquet",
        n,
        file_mb,
        &["sh", "-c", &write],
    )?;
    // The tracer writes pcapng, so users' own captures are read through the other format's path.
    let ng = file.with_extension("pcapng");
    if !ng.exists() {
        let tmp = ng.with_extension("pcapng.tmp");
        sh(Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(&file)
            .arg(&tmp))?;
        std::fs::rename(&tmp, &ng)?;
    }
    let g = path(&ng);
    let ng_mb = Some(std::fs::metadata(&ng)?.len() as f64 / 1e6);
    add(
        "bare pass, the same capture as pcapng",
        n,
        ng_mb,
        &[&path(&bare), &g],
    )?;
    add(
        "roce-analyzer stats, the same capture as pcapng",
        n,
        ng_mb,
        &[&a, "stats", &g],
    )?;
    // The whole report (DCQCN model and fit, charts, tables, HTML) on the same file: it once took over ten
    // minutes and 19 GB on it, so it is measured here too, though no target names it.
    let report_dir = path(&target_dir().join("bench").join("report"));
    add(
        "roce-analyzer report",
        n,
        file_mb,
        &[&a, "report", &f, "-o", &report_dir],
    )?;
    add(
        "tshark -T fields (BTH, ECN)",
        TSHARK_SLICE,
        None,
        &[
            "tshark",
            "-r",
            &s,
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "ip.dsfield.ecn",
        ],
    )?;
    add(
        "roce-analyzer decode --json (same slice)",
        TSHARK_SLICE,
        None,
        &[&a, "decode", "--json", &s],
    )?;
    eprintln!("xtask: {PAIRS} alternating runs of the floor and stats");
    let mut paired = Paired { runs: Vec::new() };
    for _ in 0..PAIRS {
        let floor = time_once(&[&path(&bare), &f], overhead)?.0;
        let stats = time_once(&[&a, "stats", &f], overhead)?.0;
        paired.runs.push((floor, stats));
    }
    let report = render(&rows, &paired, &spec, size_mb, overhead);
    println!("{report}");
    benchmarks_md::update("analyzer", &report, "")
}

fn render(
    rows: &[Measured],
    paired: &Paired,
    spec: &BulkSpec,
    size_mb: f64,
    overhead: f64,
) -> String {
    let fps = |m: &Measured| m.frames as f64 / m.seconds;
    let floor = rows.first().map(fps).unwrap_or(1.0);
    let stats = rows.get(1).map(fps).unwrap_or(0.0);
    let tshark = rows
        .iter()
        .find(|r| r.what.starts_with("tshark"))
        .map(fps)
        .unwrap_or(1.0);
    let mut s = String::new();
    s.push_str(&format!(
        "Machine: {}, {}; runs on {}; median of 3 runs, warm page cache; wall \
         time taken around each process, less {:.1} ms for starting GNU time and taskset (their median on \
         `true`).\n\n",
        cores_of_cpu(),
        kernel(),
        cores_note(),
        overhead * 1e3
    ));
    s.push_str(&format!(
        "Capture: `samples::bulk`, {} frames over {} QPs, {} B payload per data packet, snap length {}, {:.0} MB \
         (RDMA WRITE messages of 16 packets with ACKs, CE marks, CNPs and PFC on priority 3).\n\n",
        spec.frames,
        spec.qps,
        spec.mtu,
        spec.snaplen.map_or("none".into(), |s| format!("{s} B")),
        size_mb
    ));
    s.push_str("| what | frames | seconds | frames/s | MB/s of file | peak RSS MB | command |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        let mbs = r
            .file_mb
            .map_or("–".into(), |mb| format!("{:.0}", mb / r.seconds));
        s.push_str(&format!(
            "| {} | {} | {:.3} | {:.2e} | {} | {:.1} | `{}` |\n",
            r.what,
            r.frames,
            r.seconds,
            fps(r),
            mbs,
            r.peak_rss_mb,
            r.command
        ));
    }
    s.push_str(&format!(
        "\nRatios: stats runs at {:.2}× the floor's time ({:.1} M frames/s vs {:.1} M), and {:.0}× tshark's \
         frames/s.\n",
        floor / stats.max(1.0),
        stats / 1e6,
        floor / 1e6,
        stats / tshark
    ));
    let ratios = paired.ratios();
    let (best_floor, best_stats) = paired.best();
    if let (Some(lo), Some(hi)) = (ratios.first(), ratios.last()) {
        s.push_str(&format!(
            "\nPaired ({} alternating runs of the floor and `stats`, each pair on the same machine phase): \
             stats/floor ratio median {:.2}× (range {lo:.2}–{hi:.2}); fastest runs {best_floor:.3} s for the floor \
             and {best_stats:.3} s for `stats` ({:.1} M frames/s).\n",
            ratios.len(),
            ratios[ratios.len() / 2],
            spec.frames as f64 / best_stats / 1e6,
        ));
    }
    s
}
