//! How every bench times a command: on the bench's cores through taskset, under GNU time for the peak RSS
//! and the CPU time, with the wall time taken here around the child.
//!
//! GNU time prints wall time in hundredths of a second, a tenth of the floor's whole run on a fast machine,
//! so the wall time is measured around the child instead, less `overhead` (what starting GNU time and
//! taskset costs, [`wrapper_overhead`]).

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The cores the measured commands may run on, for taskset: all of them unless `--one-core` was given.
static CORES: OnceLock<String> = OnceLock::new();

/// Pins every later measurement to core 0 (`--one-core`).
pub fn use_one_core() {
    let _ = CORES.set("0".to_owned());
}

/// See [`CORES`].
pub fn cores() -> &'static str {
    CORES.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("0-{}", n - 1)
    })
}

/// How the runs were placed, for the notes under each table.
pub fn cores_note() -> String {
    match cores() {
        "0" => "one core (taskset -c 0)".to_owned(),
        all => format!("every core (taskset -c {all}; reading runs on a thread of its own)"),
    }
}

/// One run of a command.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Wall seconds around the child, less the wrappers' overhead (at least a millisecond).
    pub wall: f64,
    /// CPU seconds, user + system, of every thread.
    pub cpu: f64,
    /// Peak resident set, MB.
    pub rss_mb: f64,
}

/// Runs `argv` once on `cores` (taskset syntax) under GNU time, stdout to /dev/null, stderr to `stderr`.
pub fn run_on(cores: &str, argv: &[&str], overhead: f64, stderr: Stdio) -> Result<Run> {
    let timing = std::env::temp_dir().join("rocetrace-bench-time.txt");
    let start = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%U %S %M", "-o"])
        .arg(&timing)
        .args(["taskset", "-c", cores])
        .args(argv)
        .stdout(Stdio::null())
        .stderr(stderr)
        .status()
        .with_context(|| format!("running {}", argv.join(" ")))?;
    let wall = start.elapsed().as_secs_f64() - overhead;
    if !status.success() {
        bail!("{} failed ({status})", argv.join(" "));
    }
    let text = std::fs::read_to_string(&timing)?;
    let numbers: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [user, sys, kb] = numbers[..] else {
        bail!("unexpected GNU time output {text:?}");
    };
    Ok(Run {
        wall: wall.max(0.001),
        cpu: user + sys,
        rss_mb: kb / 1024.0,
    })
}

/// Runs `argv` once on the bench's cores; returns (wall seconds, peak RSS MB).
pub fn time_once(argv: &[&str], overhead: f64) -> Result<(f64, f64)> {
    let run = run_on(cores(), argv, overhead, Stdio::inherit())?;
    Ok((run.wall, run.rss_mb))
}

/// Like [`time_once`], also returning what the command printed on stderr (its warnings are part of the result).
pub fn time_once_keeping_stderr(argv: &[&str], overhead: f64) -> Result<(f64, f64, String)> {
    let err = std::env::temp_dir().join("rocetrace-bench-stderr.txt");
    let run = run_on(cores(), argv, overhead, Stdio::from(File::create(&err)?))?;
    let text = std::fs::read_to_string(&err)?;
    eprint!("{text}");
    Ok((run.wall, run.rss_mb, text))
}

/// The median time of running `true` under the same wrappers: what every measurement subtracts.
pub fn wrapper_overhead() -> Result<f64> {
    let mut runs = Vec::new();
    for _ in 0..9 {
        runs.push(time_once(&["true"], 0.0)?.0);
    }
    runs.sort_by(f64::total_cmp);
    Ok(runs[runs.len() / 2])
}

/// Runs `argv` three times; returns (median s, max RSS MB).
pub fn measure(argv: &[&str], overhead: f64) -> Result<(f64, f64)> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(time_once(argv, overhead)?);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rss = runs.iter().map(|r| r.1).fold(0.0, f64::max);
    Ok((runs[1].0, rss))
}

/// Megabytes of the files under `dir`: what a command wrote.
pub fn dir_mb(dir: &Path) -> Result<f64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                total += e.metadata()?.len();
            }
        }
    }
    Ok(total as f64 / 1e6)
}

/// A path as a command-line argument.
pub fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
