//! `cargo xtask bench`: the analyzer's throughput and memory against the file-reading floor and tshark.
//!
//! Everything runs with a warm page cache, timed by GNU time for wall time and peak RSS, on every core (a
//! capture is read on a thread of its own beside the one that decodes) or, with `--one-core`, on core 0; each measurement is the median of three runs, and the floor/`stats` ratio is also taken over
//! alternating pairs of runs. tshark is measured on a slice of the same file,
//! because dissecting millions of frames with it takes many minutes; frames/s is what compares.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use samples::bulk::{self, BulkSpec};

use crate::{install, root, sh, target_dir};

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

/// Runs `argv` once under GNU time on core 0, stdout to /dev/null; returns (wall seconds, peak RSS MB).
///
/// GNU time prints wall time in hundredths of a second, a tenth of the floor's whole run on a fast machine,
/// so the wall time is taken here around the child instead, less `overhead` (what starting GNU time and
/// taskset costs, [`wrapper_overhead`]); GNU time still gives the peak RSS.
pub(crate) fn time_once(argv: &[&str], overhead: f64) -> Result<(f64, f64)> {
    timed(argv, overhead, Stdio::inherit())
}

/// Like [`time_once`], also returning what the command printed on stderr (its warnings are part of the result).
pub(crate) fn time_once_keeping_stderr(argv: &[&str], overhead: f64) -> Result<(f64, f64, String)> {
    let err = std::env::temp_dir().join("rocetrace-bench-stderr.txt");
    let (secs, rss) = timed(argv, overhead, Stdio::from(File::create(&err)?))?;
    let text = std::fs::read_to_string(&err)?;
    eprint!("{text}");
    Ok((secs, rss, text))
}

/// The cores the measured commands may run on, for taskset: all of them unless `--one-core` was given.
static CORES: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// See [`CORES`].
pub(crate) fn cores() -> &'static str {
    CORES.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("0-{}", n - 1)
    })
}

/// How the runs were placed, for the notes under each table.
pub(crate) fn cores_note() -> String {
    match cores() {
        "0" => "one core (taskset -c 0)".to_owned(),
        all => format!("every core (taskset -c {all}; reading runs on a thread of its own)"),
    }
}

fn timed(argv: &[&str], overhead: f64, stderr: Stdio) -> Result<(f64, f64)> {
    let timing = std::env::temp_dir().join("rocetrace-bench-time.txt");
    let start = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&timing)
        .args(["taskset", "-c", cores()])
        .args(argv)
        .stdout(Stdio::null())
        .stderr(stderr)
        .status()
        .with_context(|| format!("running {}", argv.join(" ")))?;
    let secs = start.elapsed().as_secs_f64() - overhead;
    if !status.success() {
        bail!("{} failed ({status})", argv.join(" "));
    }
    let text = std::fs::read_to_string(&timing)?;
    let kb: f64 = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .context("time output")?;
    Ok((secs.max(0.001), kb / 1024.0))
}

/// The median time of running `true` under the same wrappers: what every measurement subtracts.
pub(crate) fn wrapper_overhead() -> Result<f64> {
    let mut runs = Vec::new();
    for _ in 0..9 {
        runs.push(time_once(&["true"], 0.0)?.0);
    }
    runs.sort_by(f64::total_cmp);
    Ok(runs[runs.len() / 2])
}

/// Runs `argv` three times; returns (median s, max RSS MB).
pub(crate) fn measure(argv: &[&str], overhead: f64) -> Result<(f64, f64)> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(time_once(argv, overhead)?);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rss = runs.iter().map(|r| r.1).fold(0.0, f64::max);
    Ok((runs[1].0, rss))
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

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--one-core") {
        let _ = CORES.set("0".to_owned());
    }
    let args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--one-core")
        .cloned()
        .collect();
    let args = args.as_slice();
    if args.iter().any(|a| a == "--tracer") {
        if args.len() > 1 {
            bail!("--tracer takes no other option");
        }
        return crate::bench_tracer::run();
    }
    if args.iter().any(|a| a == "--scale") {
        return crate::bench_scale::run(args);
    }
    if args.first().is_some_and(|a| a == "--spark") {
        return crate::bench_spark::run(&args[1..]);
    }
    if args.iter().any(|a| a == "--hops") {
        return crate::bench_hops::run(args);
    }
    let spec = bulk_spec(args, "bench")?;
    install::ensure_apt(&["tshark", "time"])?;
    build_release_analyzer(&["--example", "bare_pass"])?;
    let release = target_dir().join("release");
    let analyzer = release.join("roce-analyzer");
    let bare = release.join("examples").join("bare_pass");
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
    let md = root().join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    std::fs::write(&md, splice(&old, "analyzer", &report))?;
    eprintln!("xtask: updated {}", md.display());
    Ok(())
}

/// The analyzer as users run it: the release binary, plus whatever `extra` cargo arguments add.
pub(crate) fn build_release_analyzer(extra: &[&str]) -> Result<()> {
    sh(Command::new("cargo")
        .args([
            "build",
            "--release",
            "-p",
            "analyzer",
            "--bin",
            "roce-analyzer",
        ])
        .args(extra))
}

/// The bulk capture's spec from the bench's options (`--frames N` only).
pub(crate) fn bulk_spec(args: &[String], task: &str) -> Result<BulkSpec> {
    let mut spec = BulkSpec::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--frames" => {
                spec.frames = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .context("--frames needs a number")?
            }
            other => bail!("unknown option {other:?} for {task}"),
        }
    }
    Ok(spec)
}

/// The bulk capture of `spec` under the target's bench directory, generated once and kept for later runs.
pub(crate) fn bulk_capture(spec: &BulkSpec) -> Result<PathBuf> {
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("bulk-{}.pcap", spec.frames));
    if !file.exists() {
        eprintln!(
            "xtask: generating {} ({} frames)",
            file.display(),
            spec.frames
        );
        let tmp = file.with_extension("tmp");
        let counts = bulk::write(BufWriter::with_capacity(1 << 20, File::create(&tmp)?), spec)?;
        std::fs::rename(&tmp, &file)?;
        eprintln!("xtask: wrote {counts:?}");
    }
    Ok(file)
}

pub(crate) fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
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
        "Machine: {} cores of {}, {}; runs on {}; median of 3 runs, warm page cache; wall \
         time taken around each process, less {:.1} ms for starting GNU time and taskset (their median on \
         `true`).\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| format!("Linux {}", k.trim()))
            .unwrap_or_default(),
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

/// Replaces the section between `<!-- bench:NAME -->` markers, or appends it.
pub(crate) fn splice(doc: &str, name: &str, body: &str) -> String {
    let open = format!("<!-- bench:{name} -->");
    let close = format!("<!-- /bench:{name} -->");
    let section = format!("{open}\n{body}{close}");
    match (doc.find(&open), doc.find(&close)) {
        (Some(a), Some(b)) if b > a => {
            format!("{}{}{}", &doc[..a], section, &doc[b + close.len()..])
        }
        _ => format!("{}\n{}\n", doc.trim_end(), section),
    }
}
