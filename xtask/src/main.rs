//! Project tasks, run as `cargo xtask <task>`.
//!
//! `test` is the one command CI and a newcomer run: it installs what a fresh Debian machine lacks, then runs
//! formatting, lints, every test and short fuzz runs, failing on the first step that fails. Each step prints
//! what it runs, so a red CI log says which step broke.

mod bench;
mod bench_hops;
mod bench_scale;
mod bench_spark;
mod bench_tracer;
mod install;
mod samples_task;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  test [--no-install] [--fuzz-seconds N]   install what is missing, then fmt, clippy, every test, short fuzz runs
  install                                  only install what is missing (apt packages, cargo-fuzz)
  fuzz [--seconds N] [TARGET...]           run the fuzz targets (default 20 s each)
  bench [--frames N] [--one-core]          generate a large capture, measure analyzer and tshark, update BENCHMARKS.md
                                           (every core unless --one-core; any bench mode takes --one-core)
  bench --scale [--per-file N] [--long]    a saturation test's size: 3 rotated files (pcap, gzip, pcapng) of N
                                           frames (5 M), report vs stats, memory, output; --long adds 60 s in 12
                                           zstd files, reported over 3, 6 and 12 of them
  bench --hops [--us N]                    `hops` over both sides of a simulated switch (N µs of a 4:1 incast
                                           at 100 Gb/s, 5 taps in 2 files), frames/s and memory
  bench --tracer                           as root: the eBPF probe's cost per frame and each capture engine's
                                           loss at top sender speed (release tracer), update BENCHMARKS.md
  bench --spark [--frames N]               frames/s of decode --parquet, of the Spark job per executor core
                                           (local mode) and of stats on one core, update BENCHMARKS.md
  samples                                  regenerate the committed captures byte for byte
";

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Ok(());
    };
    match task.as_str() {
        "test" => test(rest),
        "bench" => bench::run(rest),
        "samples" => samples_task::run(),
        "install" => install::ensure_all(),
        "fuzz" => {
            let (seconds, targets) = fuzz_args(rest)?;
            fuzz(seconds, &targets)
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where cargo puts its builds: `CARGO_TARGET_DIR` when set, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Tests append a line here for each check this machine cannot run (`testkit::not_run_here`), because
/// `cargo test` hides the output of tests that pass; the test command prints the file at the end.
fn not_run_here_file() -> PathBuf {
    target_dir().join("tmp").join("not-run-here.txt")
}

/// Runs a command in the workspace root, echoing it, and fails with its exit status.
pub fn sh(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", show(cmd));
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not start {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn test(args: &[String]) -> Result<()> {
    let mut install = true;
    let mut fuzz_seconds = 15u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-install" => install = false,
            "--fuzz-seconds" => {
                fuzz_seconds = it
                    .next()
                    .context("--fuzz-seconds needs a number")?
                    .parse()
                    .context("--fuzz-seconds needs a number")?
            }
            other => bail!("unknown option {other:?} for test"),
        }
    }
    if install {
        install::ensure_all()?;
    }
    sh(cargo().args(["fmt", "--all", "--check"]))?;
    sh(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    let not_run = not_run_here_file();
    // A missing file is the expected case; any other problem shows up when the tests write it.
    let _ = std::fs::remove_file(&not_run);
    // The tracer's privileged tests wait for their own step, right after.
    sh(cargo()
        .args(["test", "--workspace", "--no-fail-fast"])
        .env("ROCETRACE_NOT_RUN_FILE", &not_run)
        .env(PRIVILEGED, "later"))?;
    privileged_tests(&not_run)?;
    match std::fs::read_to_string(&not_run) {
        Ok(text) if !text.trim().is_empty() => {
            eprintln!("xtask: checks this machine cannot run (the tests ran everything else):");
            for line in text.lines() {
                eprintln!("  - {line}");
            }
        }
        _ => eprintln!("xtask: every check ran on this machine"),
    }
    if fuzz_seconds > 0 {
        fuzz(fuzz_seconds, &[])?;
    }
    eprintln!("xtask: every step passed");
    Ok(())
}

/// How the tracer's privileged tests behave (see `tracer/tests/common`): `later` or `required`.
const PRIVILEGED: &str = "ROCETRACE_PRIVILEGED";

/// The tracer's tests that need root (network namespaces, captures, eBPF), as aya runs its integration
/// tests: in a step of their own, as root. A root xtask runs them directly; otherwise cargo runs each test
/// binary through `sudo -E`, so that only the tests run as root, not the build. Without root they fail.
fn privileged_tests(not_run: &Path) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["test", "-p", "tracer", "--tests", "--no-fail-fast"]);
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if !root {
        let sudo = Command::new("sudo").arg("-V").output();
        if !sudo.is_ok_and(|o| o.status.success()) {
            // Said where every other check that did not run is said, not a failure of the whole run.
            let line = "the tracer's privileged tests (network namespaces, captures, eBPF): xtask is not \
                        root and sudo is missing; run `cargo xtask test` as root\n";
            std::fs::create_dir_all(not_run.parent().unwrap_or(Path::new(".")))?;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(not_run)?;
            std::io::Write::write_all(&mut f, line.as_bytes())?;
            return Ok(());
        }
        cmd.args(["--config", "target.'cfg(all())'.runner = 'sudo -E'"]);
    }
    sh(cmd
        .env("ROCETRACE_NOT_RUN_FILE", not_run)
        .env(PRIVILEGED, "required"))
}

fn fuzz_args(args: &[String]) -> Result<(u64, Vec<String>)> {
    let mut seconds = 20;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            seconds = it
                .next()
                .context("--seconds needs a number")?
                .parse()
                .context("--seconds needs a number")?;
        } else {
            targets.push(a.clone());
        }
    }
    Ok((seconds, targets))
}

/// Runs each fuzz target for `seconds` on the committed seed corpus (copied to a scratch corpus, so runs
/// never dirty the work tree). cargo-fuzz needs the nightly toolchain; `install` checks both.
fn fuzz(seconds: u64, only: &[String]) -> Result<()> {
    let fuzz_dir = root().join("fuzz");
    let out = Command::new("cargo")
        .args(["+nightly", "fuzz", "list"])
        .current_dir(&fuzz_dir)
        .output()
        .context("running cargo +nightly fuzz list")?;
    if !out.status.success() {
        bail!(
            "cargo +nightly fuzz list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let targets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty() && (only.is_empty() || only.iter().any(|o| o == t)))
        .map(String::from)
        .collect();
    if targets.is_empty() {
        bail!("no fuzz targets to run");
    }
    // Fuzz builds use nightly and sanitizer flags: keep them out of the main target directory.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| d.with_file_name("fuzz-target"))
        .unwrap_or_else(|| fuzz_dir.join("target"));
    build_fuzz_targets(&fuzz_dir, &target_dir)?;
    let scratch = std::env::temp_dir().join("rocetrace-fuzz-corpus");
    for t in &targets {
        let seeds = fuzz_dir.join("seeds").join(t);
        let corpus = scratch.join(t);
        std::fs::create_dir_all(&corpus)?;
        if seeds.is_dir() {
            for e in std::fs::read_dir(&seeds)? {
                let e = e?;
                std::fs::copy(e.path(), corpus.join(e.file_name()))?;
            }
        }
        sh(Command::new("cargo")
            .args(["+nightly", "fuzz", "run", t])
            .arg(&corpus)
            .args(["--", &format!("-max_total_time={seconds}")])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(&fuzz_dir))?;
    }
    Ok(())
}

/// Builds every fuzz target in one cargo run before any of them runs, retrying once: CI once lost a run to the
/// linker dying of SIGBUS while linking the second target (a transient of the machine, e.g. memory or disk
/// pressure, not of our code); a second failure is real and stops the run with the free space shown.
fn build_fuzz_targets(fuzz_dir: &Path, target_dir: &Path) -> Result<()> {
    let build = || {
        sh(Command::new("cargo")
            .args(["+nightly", "fuzz", "build"])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(fuzz_dir))
    };
    if let Err(first) = build() {
        eprintln!("xtask: building the fuzz targets failed ({first:#}); trying once more");
        let _ = Command::new("df").arg("-h").arg(fuzz_dir).status();
        build().context("building the fuzz targets failed twice")?;
    }
    Ok(())
}
