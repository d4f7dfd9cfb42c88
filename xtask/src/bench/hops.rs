//! `cargo xtask bench --hops`: `roce-analyzer hops` over captures of both sides of a switch, as issue #15
//! states its target (≥ 5 M frames/s over all taps' frames together, memory bounded by the packets in flight).
//!
//! The captures come from `roce-sim`: four senders at 100 Gb/s write to one receiver behind one switch, whose
//! port to the receiver queues and marks; one capturing host taps the four senders' links, another (its
//! clock 3 ms ahead and 10 ppm fast) the receiver's. Each data packet is seen twice, its ACK twice. The
//! command runs on the bench's cores (all by default, core 0 with `--one-core`; `hops` reads and matches on
//! two threads when it has two cores), timed like `cargo xtask bench` (median of three, peak RSS), and the
//! same runs' CPU time (user + sys) is kept too: on a machine shared with other builds the wall time measures the load as
//! much as the pass, the CPU time much less so.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Result;
use samples::sim::{self, scenario::Scenario};

use super::benchmarks_md;
use super::inputs::{build_release_analyzer, release_analyzer};
use super::machine::load_average;
use super::measure::{Run, cores, cores_note, path, run_on, time_once, wrapper_overhead};
use crate::workspace::target_dir;

fn scenario(duration_us: u64) -> String {
    let mut s = format!(
        "description = \"hops bench: a 4:1 incast at 100 Gb/s, tapped on both sides of the switch\"\n\
         seed = 5\nduration_us = {duration_us}\nsnaplen = 96\nqueue_sample_ns = 100000\n\
         [[switch]]\nname = \"sw\"\nkmin_bytes = 100_000\nkmax_bytes = 400_000\npmax = 0.2\n\
         mark_at = \"enqueue\"\nbuffer_bytes = 8_000_000\nxoff_bytes = 1_000_000\nxon_bytes = 800_000\n\
         [[host]]\nname = \"r\"\n[[link]]\na = \"sw\"\nb = \"r\"\ngbps = 100\n\
         [[file]]\nname = \"rx\"\nclock_offset_ns = 3_000_000\nclock_drift_ppm = 10.0\n\
         [[tap]]\nname = \"r\"\na = \"sw\"\nb = \"r\"\nfile = \"rx\"\n"
    );
    for i in 1..=4 {
        s.push_str(&format!(
            "[[host]]\nname = \"s{i}\"\n[[link]]\na = \"s{i}\"\nb = \"sw\"\ngbps = 100\n\
             [[tap]]\nname = \"s{i}\"\na = \"s{i}\"\nb = \"sw\"\n\
             [[flow]]\nsrc = \"s{i}\"\ndst = \"r\"\n"
        ));
    }
    s
}

/// The bench's two files (the senders' taps, the receiver's), simulated once per duration and kept.
pub(super) fn capture(duration_us: u64) -> Result<Vec<PathBuf>> {
    let dir = target_dir()
        .join("bench")
        .join(format!("hops-{duration_us}"));
    let sc = Scenario::from_toml("hops_bench", &scenario(duration_us))?;
    let files: Vec<PathBuf> = (0..sc.files.len())
        .map(|i| dir.join(sc.file_name(i)))
        .collect();
    if !files.iter().all(|f| f.exists()) {
        eprintln!("xtask: simulating {duration_us} µs into {}", dir.display());
        sim::write_run(&sc, &dir)?;
    }
    Ok(files)
}

pub fn run(duration_us: u64) -> Result<()> {
    build_release_analyzer(&[])?;
    let analyzer = release_analyzer();
    let files = capture(duration_us)?;
    let mut frames = 0u64;
    let mut mb = 0.0;
    for f in &files {
        let mut c = roce_capture::CaptureReader::open(f)?;
        while c.next_record()?.is_some() {
            frames += 1;
        }
        mb += std::fs::metadata(f)?.len() as f64 / 1e6;
    }
    let a = path(&analyzer);
    let mut argv: Vec<String> = vec![a, "hops".into(), "--json".into()];
    argv.extend(files.iter().map(|f| path(f)));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    time_once(&argv, 0.0)?; // warm the page cache
    let overhead = wrapper_overhead()?;
    let mut runs: Vec<Run> = Vec::new();
    for _ in 0..3 {
        runs.push(run_on(cores(), &argv, overhead, Stdio::inherit())?);
    }
    let median = |of: fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(of).collect();
        v.sort_by(f64::total_cmp);
        v[1]
    };
    let secs = median(|r| r.wall);
    let cpu = median(|r| r.cpu);
    let rss = runs.iter().map(|r| r.rss_mb).fold(0.0, f64::max);
    let load = load_average()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into());
    let body = format!(
        "Captures: `roce-sim`, {duration_us} µs of a 4:1 incast at 100 Gb/s (snap length 96), the four senders' \
         links in one file and the receiver's in another (clock 3 ms ahead, 10 ppm fast): {frames} frames \
         over 5 taps, {mb:.0} MB. Runs on {}, median of 3 runs, warm page cache; load average {load} \
         when the runs ended.\n\n\
         | what | frames (all taps) | seconds | frames/s | CPU s (user+sys) | frames per CPU s | peak RSS MB | command |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n\
         | roce-analyzer hops --json | {frames} | {secs:.3} | {:.2e} | {cpu:.3} | {:.2e} | {rss:.1} | `roce-analyzer hops --json hops_bench.pcapng hops_bench.rx.pcapng` |\n",
        cores_note(),
        frames as f64 / secs,
        frames as f64 / cpu
    );
    println!("{body}");
    benchmarks_md::update("hops", &body, "")
}
