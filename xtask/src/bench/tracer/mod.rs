//! `cargo xtask bench --tracer`: the live tracer's benchmarks, run as root on this machine with the release
//! build of `roce-tracer`, rewriting the `<!-- bench:tracer -->` section of BENCHMARKS.md.
//!
//! Four measurements, one module each: the eBPF probe's own cost per frame and the verifier's
//! (`probe`), capture at the fastest tcpreplay sends (`live`, timed by the kernel through
//! `bpf_stats`), the highest rate each engine takes without loss from a faster sender (`limits`), and that
//! rate for the eBPF engine with one ring reader and with two, senders on two CPUs (`readers`).
//! The live ones run in `rig`'s network namespaces on `traffic`'s replays.
//!
//! The load average is recorded before and after: the machine is shared, and the numbers mean little when
//! something else was running.

mod bpf_stats;
mod limits;
mod live;
mod probe;
mod readers;
mod rig;
mod traffic;

use std::process::Command;

use anyhow::{Result, bail};

use super::benchmarks_md;
use super::machine::{cpu_count, kernel, load_average};
use crate::install;
use crate::shell::{is_root, sh};
use crate::workspace::{root, target_dir};
use live::RateRow;
use probe::ProbeCase;
use traffic::{CORPUS, DATA, DATA_PASSES, PASSES, Workload};

pub fn run() -> Result<()> {
    if !is_root() {
        bail!("the tracer benchmark needs root (network namespaces, eBPF)");
    }
    install::ensure_apt(&["tcpreplay", "iproute2", "bpftool"])?;
    sh(Command::new("cargo").args([
        "build",
        "--release",
        "-p",
        "tracer",
        "--bin",
        "roce-tracer",
        "--example",
        "probe_cost",
        "--example",
        "blast",
    ]))?;
    let release = target_dir().join("release");
    let tracer = release.join("roce-tracer");
    let example = release.join("examples").join("probe_cost");
    let blast = release.join("examples").join("blast");
    let dir = target_dir().join("bench").join("tracer");
    std::fs::create_dir_all(&dir)?;
    let replay = dir.join("replay.pcap");
    let per_pass = traffic::replayable(&root().join("samples/corpus/corpus.pcap"), &replay)?;
    let data = dir.join("data.pcap");
    let workloads = [
        Workload {
            name: CORPUS,
            path: replay,
            per_pass,
            passes: PASSES,
            pcap: true,
        },
        Workload {
            name: DATA,
            path: data.clone(),
            per_pass: traffic::data_frames(&data)?,
            passes: DATA_PASSES,
            pcap: false,
        },
    ];

    let load = || load_average().unwrap_or_else(|| "unknown".into());
    let load_before = load();
    let probe = probe::probe_cost(&example)?;
    let verifier = probe::verifier_costs(&example)?;
    let rates = live::capture_rate(&tracer, &example, &workloads, &dir)?;
    let limits = limits::loss_free_limits(&tracer, &blast, &workloads[0].path, &dir)?;
    let by_readers = readers::loss_free_by_readers(&tracer, &blast, &workloads[0].path, &dir)?;
    let load_after = load();

    let mut report = render(
        &probe,
        &verifier,
        &rates,
        per_pass,
        &load_before,
        &load_after,
    );
    report.push_str(&limits::render(&limits));
    report.push_str(&readers::render(&by_readers));
    println!("{report}");
    benchmarks_md::update("tracer", &report, "")
}

fn render(
    probe: &[ProbeCase],
    verifier: &[String],
    rates: &[RateRow],
    per_pass: u64,
    load_before: &str,
    load_after: &str,
) -> String {
    let date = Command::new("date")
        .arg("+%F")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut s = String::new();
    s.push_str(&format!(
        "Measured {date} as root. Machine: {} cores, {}; release build of `roce-tracer` (the eBPF object is always release). Load \
         average (1, 5, 15 min) {load_before} before and {load_after} after: the machine is shared, and other \
         work only ever adds time.\n\n",
        cpu_count(),
        kernel()
    ));
    s.push_str(&probe::render(probe, verifier));
    s.push_str(&live::render(rates, per_pass));
    s
}
