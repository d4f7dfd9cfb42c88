//! `cargo xtask bench --cores 1,2`: what `--threads N` buys `stats`, `report`, `decode --json`,
//! `decode --parquet`, `dcqcn`, `fabric` and `hops` on the analyzer's and the hops bench's captures, for each N given.
//!
//! The runs of the different N take turns (one run of each N, three times over) rather than three of one N
//! then three of the next: the machines this runs on share their cores with other work, and runs side by
//! side see the same load. Each figure is the median of its three, timed as every bench times (under GNU
//! time). A run of N threads is allowed the first N cores and no more (`taskset`), as issue 26 measures "by
//! the cores it was allowed": on more cores the one-thread run would have its reading-ahead thread on a core
//! of its own and the speedup would be understated, on fewer the N threads would share them. More threads
//! than the machine has cores share them all. The load average is read before and after, since another
//! process busy on a core takes exactly what the extra threads hoped to use, and a reader must know it was
//! there.

use std::process::Stdio;

use anyhow::{Context, Result, bail};
use samples::bulk::BulkSpec;

use super::benchmarks_md;
use super::inputs::{build_release_analyzer, bulk_capture, release_analyzer};
use super::machine::{cores_of_cpu, kernel};
use super::measure::{Run, cores, path, run_on, time_once, wrapper_overhead};
use crate::install;
use crate::workspace::target_dir;

/// Runs of each command at each N.
const RUNS: usize = 3;

/// The commands measured, by name, each given `--threads N` and its capture: the analyzer bench's file,
/// and then the saturation set, the capture issue 26 measures (`bench --scale`'s three rotated files, pcap,
/// gzip pcap and pcapng, of this many frames each). `hops` is timed on the hops bench's two taps
/// (`bench --hops`'s default) alone.
const COMMANDS: &[&str] = &[
    "stats",
    "report",
    "decode --json",
    "decode --parquet",
    "dcqcn",
    "fabric",
];
const SET_FRAMES: u64 = 2_000_000;

/// The µs of traffic in the hops capture: `bench --hops`'s default, so both benches time one capture.
const HOPS_US: u64 = 800_000;

/// Parses `1,2,4`: thread counts, each at least 1, none twice.
pub fn parse_counts(list: &str) -> Result<Vec<u32>> {
    let mut counts = Vec::new();
    for part in list.split(',') {
        let n: u32 = part
            .trim()
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .with_context(|| format!("--cores takes thread counts like 1,2, not {list:?}"))?;
        if counts.contains(&n) {
            bail!("--cores names {n} twice");
        }
        counts.push(n);
    }
    Ok(counts)
}

/// A row's name: its command, and its capture when that is the saturation set.
fn label(row: &Measured) -> String {
    if row.set {
        format!("`{}` on the saturation set", row.command)
    } else {
        format!("`{}`", row.command)
    }
}

/// The cores a run of `threads` threads is allowed: the first `threads` of the machine's, or all of them.
fn first_cores(threads: u32) -> String {
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    match threads.min(machine) {
        0 | 1 => "0".to_owned(),
        n => format!("0-{}", n - 1),
    }
}

/// The 1-minute load average, as /proc/loadavg says it; `None` where there is none.
fn load() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Each command at each thread count: its runs, in the order they ran.
struct Measured {
    command: &'static str,
    /// On the saturation set rather than its own capture.
    set: bool,
    threads: u32,
    runs: Vec<Run>,
}

impl Measured {
    /// The run of median wall time.
    fn median(&self) -> Run {
        let mut runs = self.runs.clone();
        runs.sort_by(|a, b| a.wall.total_cmp(&b.wall));
        runs[runs.len() / 2]
    }
}

pub fn run(frames: u64, counts: &[u32]) -> Result<()> {
    let spec = BulkSpec {
        frames,
        ..BulkSpec::default()
    };
    install::ensure_apt(&["time"])?;
    build_release_analyzer(&[])?;
    let analyzer = path(&release_analyzer());
    let file = bulk_capture(&spec)?;
    let size_mb = std::fs::metadata(&file)?.len() as f64 / 1e6;
    let f = path(&file);
    let report_dir = path(&target_dir().join("bench").join("report-cores"));
    let dataset = target_dir().join("bench").join("dataset-cores");
    let dataset_dir = path(&dataset);
    let hops_files: Vec<String> = super::hops::capture(HOPS_US)?
        .iter()
        .map(|f| path(f))
        .collect();
    // Warm the page cache so that no run reads the disk.
    time_once(&[&analyzer, "stats", "--threads", "1", &f], 0.0)?;
    let mut warm = vec![analyzer.as_str(), "stats"];
    warm.extend(hops_files.iter().map(String::as_str));
    time_once(&warm, 0.0)?;
    let overhead = wrapper_overhead()?;
    let set: Vec<String> = super::scale::saturation_set(SET_FRAMES)?
        .iter()
        .map(|f| path(f))
        .collect();
    let mut warm_set = vec![analyzer.as_str(), "stats"];
    warm_set.extend(set.iter().map(String::as_str));
    time_once(&warm_set, 0.0)?;
    let jobs = COMMANDS
        .iter()
        .chain(&["hops"])
        .map(|&c| (c, false))
        .chain(COMMANDS.iter().map(|&c| (c, true)));
    let mut rows: Vec<Measured> = jobs
        .flat_map(|(command, set)| {
            counts.iter().map(move |&threads| Measured {
                command,
                set,
                threads,
                runs: Vec::new(),
            })
        })
        .collect();
    let load_before = load();
    for round in 0..RUNS {
        for row in &mut rows {
            eprintln!(
                "xtask: {} --threads {}, run {}",
                label(row),
                row.threads,
                round + 1
            );
            let threads = row.threads.to_string();
            let mut argv = vec![analyzer.as_str()];
            argv.extend(row.command.split(' ').take(1));
            argv.extend(["--threads", &threads]);
            let inputs: Vec<&str> = match (row.command, row.set) {
                ("hops", _) => hops_files.iter().map(String::as_str).collect(),
                (_, true) => set.iter().map(String::as_str).collect(),
                (_, false) => vec![f.as_str()],
            };
            match row.command {
                "report" => argv.extend(["-o", report_dir.as_str()]),
                "decode --json" => argv.push("--json"),
                "decode --parquet" => {
                    // The dataset writer refuses a directory that holds part files already.
                    if dataset.exists() {
                        std::fs::remove_dir_all(&dataset)?;
                    }
                    argv.extend(["--parquet", dataset_dir.as_str()]);
                }
                _ => {}
            }
            argv.extend(inputs);
            row.runs.push(run_on(
                &first_cores(row.threads),
                &argv,
                overhead,
                Stdio::inherit(),
            )?);
        }
    }
    let load_after = load();
    let report = render(&rows, &spec, size_mb, overhead, (load_before, load_after));
    println!("{report}");
    benchmarks_md::update(
        "cores",
        &report,
        "## Analyzer on N threads: `cargo xtask bench --cores 1,2,3`\n\n\
         Every command works on `--threads N` (issue 26). This \
         section is each command's wall time on its bench capture, and on the saturation set, for every N \
         asked, N threads on the first N cores, the runs of the different N taking turns.\n",
    )
}

fn render(
    rows: &[Measured],
    spec: &BulkSpec,
    size_mb: f64,
    overhead: f64,
    load: (Option<f64>, Option<f64>),
) -> String {
    let shown = |l: Option<f64>| l.map_or("unknown".to_owned(), |l| format!("{l:.2}"));
    let mut s = format!(
        "Machine: {}, {}; a run of N threads on the first N cores (taskset; on every core, {}, when N \
         is larger); {RUNS} runs of each, the thread counts taking turns; median wall time \
         taken around each process, less {:.1} ms for starting GNU time and taskset. Load average (1 min) \
         {} before the runs and {} after.\n\n\
         Capture: `samples::bulk`, {} frames over {} QPs, snap length {}, {:.0} MB; for `hops`, the hops \
         bench's 4:1 incast tapped on both sides of the switch ({HOPS_US} µs, two files, five taps); the \
         saturation set, `bench --scale`'s mix of 64 senders over 4,096 QPs with ACKs and CNPs, rotated \
         into three files of {SET_FRAMES} frames (pcap, gzip pcap, pcapng).\n\n",
        cores_of_cpu(),
        kernel(),
        cores(),
        overhead * 1e3,
        shown(load.0),
        shown(load.1),
        spec.frames,
        spec.qps,
        spec.snaplen.map_or("none".into(), |s| format!("{s} B")),
        size_mb,
    );
    s.push_str(
        "| command | --threads | cores | wall s (median) | every run, s | CPU s (median run) | peak RSS MB \
         | against the first N |\n|---|---:|---|---:|---|---:|---:|---:|\n",
    );
    for row in rows {
        let median = row.median();
        let first = rows
            .iter()
            .find(|r| r.command == row.command && r.set == row.set)
            .map_or(median.wall, |r| r.median().wall);
        let every: Vec<String> = row.runs.iter().map(|r| format!("{:.3}", r.wall)).collect();
        let rss = row.runs.iter().map(|r| r.rss_mb).fold(0.0, f64::max);
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {} | {:.2} | {:.1} | {:.2}× |\n",
            label(row),
            row.threads,
            first_cores(row.threads),
            median.wall,
            every.join(", "),
            median.cpu,
            rss,
            first / median.wall,
        ));
    }
    s.push_str(&amdahl(rows));
    s
}

/// Amdahl's law read backwards: a speedup `speedup` on `n` threads leaves this share of the one-thread run
/// that did not spread over them.
fn serial_fraction(speedup: f64, n: f64) -> f64 {
    ((n / speedup - 1.0) / (n - 1.0)).clamp(0.0, 1.0)
}

/// Amdahl's law forwards: the speedup on `n` cores of a run whose share `serial` does not spread.
fn projected(serial: f64, n: f64) -> f64 {
    1.0 / (serial + (1.0 - serial) / n)
}

/// The serial share each command's best measured speedup leaves, and what it would give on a capture host's
/// 16 and 64 cores, from runs on no more threads than the machine has cores (more would measure the
/// machine's oversubscription, not the command). An upper bound: it assumes the rest spreads perfectly.
fn amdahl(rows: &[Measured]) -> String {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as u32;
    let mut s = String::new();
    // Each command and capture once, in the table's order.
    let mut jobs: Vec<&Measured> = Vec::new();
    for r in rows {
        if !jobs
            .iter()
            .any(|j| j.command == r.command && j.set == r.set)
        {
            jobs.push(r);
        }
    }
    for job in jobs {
        let same = |r: &&Measured| r.command == job.command && r.set == job.set;
        let Some(one) = rows.iter().filter(same).find(|r| r.threads == 1) else {
            continue;
        };
        let best = rows
            .iter()
            .filter(same)
            .filter(|r| r.threads > 1 && r.threads <= cores)
            .map(|r| (r.threads, one.median().wall / r.median().wall))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((n, speedup)) = best else { continue };
        if s.is_empty() {
            s.push_str(
                "\nFrom the best speedup on at most as many threads as cores, by Amdahl's law: the share of \
                 the one-thread run that did not spread, and the speedup it would allow on 16 and 64 cores \
                 were the rest to spread perfectly (an upper bound).\n\n\
                 | command | threads | speedup | serial share | 16 cores | 64 cores |\n\
                 |---|---:|---:|---:|---:|---:|\n",
            );
        }
        let f = serial_fraction(speedup, f64::from(n));
        s.push_str(&format!(
            "| {} | {n} | {speedup:.2}× | {:.0} % | {:.1}× | {:.1}× |\n",
            label(job),
            f * 100.0,
            projected(f, 16.0),
            projected(f, 64.0),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{parse_counts, projected, serial_fraction};

    /// Amdahl both ways: a run twice as fast on two threads spread wholly, one no faster did not at all, and
    /// the fraction read from a speedup gives that speedup back.
    #[test]
    fn the_serial_share_and_its_projection_agree() {
        assert_eq!(serial_fraction(2.0, 2.0), 0.0);
        assert_eq!(serial_fraction(1.0, 2.0), 1.0);
        let f = serial_fraction(1.34, 2.0);
        assert!((f - 0.4925).abs() < 1e-3, "{f}");
        assert!((projected(f, 2.0) - 1.34).abs() < 1e-9);
        assert!(projected(f, 64.0) < 1.0 / f);
        assert!((projected(0.05, 16.0) - 9.14).abs() < 0.01);
    }

    #[test]
    fn thread_counts_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_counts("1,2").unwrap(), [1, 2]);
        assert_eq!(parse_counts("4").unwrap(), [4]);
        for bad in ["", "0", "1,,2", "two", "-1"] {
            assert!(parse_counts(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            format!("{:#}", parse_counts("2,2").unwrap_err()),
            "--cores names 2 twice"
        );
    }
}
