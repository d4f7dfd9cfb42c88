//! Project tasks, run as `cargo xtask <task>`: the usage and the choice of task; each task is a module of its
//! own (`test_task`, `bench`, `samples_task`, `install`, `fuzz_task`) standing on `shell` and `workspace`.
//! Each step prints what it runs, so a red CI log says which step broke.

mod bench;
mod fuzz_task;
mod install;
mod samples_task;
mod shell;
mod test_task;
mod workspace;

use anyhow::{Result, bail};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  test [--no-install] [--fuzz-seconds N]   install what is missing, then fmt, clippy, every test, short fuzz runs
  install                                  only install what is missing (apt packages, cargo-fuzz)
  fuzz [--seconds N] [TARGET...]           run the fuzz targets (default 20 s each)
  bench [--frames N] [--one-core]          generate a large capture, measure analyzer and tshark, update BENCHMARKS.md
                                           (every core unless --one-core; any bench mode takes --one-core)
  bench --cores 1,2 [--frames N]           stats and report with --threads N for each N listed, on the bench's
                                           capture: wall time per N, the runs of each N taking turns
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
        "test" => test_task::run(rest),
        "bench" => bench::run(rest),
        "samples" => samples_task::run(),
        "install" => install::ensure_all(),
        "fuzz" => fuzz_task::run(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
}
