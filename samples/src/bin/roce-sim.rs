//! `roce-sim`: runs a scenario file and writes the mirrored capture and its ground truth.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use samples::sim::{self, Scenario};

/// Simulate a RoCEv2 fabric (RC QPs, DCQCN, ECN, PFC) from a TOML scenario and write a pcapng of its taps plus
/// NAME.truth.json with what really happened. See samples/README.md for the scenario keys.
#[derive(Debug, Parser)]
#[command(name = "roce-sim", version)]
struct Cli {
    /// Scenario file(s), e.g. samples/scenarios/incast_dcqcn.toml.
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    /// Directory for NAME.pcapng and NAME.truth.json.
    #[arg(short = 'o', long, default_value = ".")]
    out_dir: PathBuf,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Only check the scenario files and exit.
    #[arg(long)]
    check: bool,
    /// Run without writing anything and print the simulation speed (frames serialized per second).
    #[arg(long)]
    bench: bool,
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roce-sim: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    for path in &cli.scenarios {
        let mut sc = Scenario::load(path)?;
        if let Some(seed) = cli.seed {
            sc.seed = seed;
        }
        if cli.check {
            eprintln!("{}: ok", path.display());
            continue;
        }
        if cli.bench {
            let t0 = Instant::now();
            let r = sim::run::<std::io::Sink>(&sc, Vec::new(), false)?;
            let secs = t0.elapsed().as_secs_f64();
            let t = &r.truth.totals;
            println!(
                "{}: {} frames serialized, {} packets created, {} events in {:.3} s: {:.2} M frames/s, {:.2} M events/s",
                sc.name,
                t.frames_transmitted,
                t.packets_created,
                t.events,
                secs,
                t.frames_transmitted as f64 / secs / 1e6,
                t.events as f64 / secs / 1e6
            );
            continue;
        }
        let w = sim::write_run(&sc, &cli.out_dir)
            .with_context(|| format!("writing {} into {}", sc.name, cli.out_dir.display()))?;
        let files: Vec<String> = w.captures.iter().map(|p| p.display().to_string()).collect();
        let t = &w.truth.totals;
        eprintln!(
            "{}: {} frames captured, {} dropped, {} CE marks -> {} and {}",
            sc.name,
            t.captured_frames,
            t.packets_dropped,
            t.ce_marked,
            files.join(", "),
            w.truth_file.display()
        );
    }
    Ok(())
}
