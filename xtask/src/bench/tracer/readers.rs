//! The eBPF engine's loss-free rate with one ring reader and with two (`--threads`), issue 26's measure of
//! whether the rings per CPU let more readers take more: two blast senders, each pinned to one of two CPUs,
//! send into a veth pair with two queues each way, so the probe runs on both CPUs and writes into both
//! rings; the search of [`super::limits`] (flat out, then a bisection) finds the highest total rate without
//! loss, several times for each reader count, alternating, since one search on a shared machine can swing.
//!
//! On a machine with two cores the senders, the probe (which runs in the senders' system calls on a veth),
//! the readers and the writer all share them: a second reader can only take time the others would have
//! had, and the senders slow down before the tracer falls behind. So the readers' own capacity is measured
//! apart too: with the tracer stopped (SIGSTOP), both senders fill large rings; then the tracer continues
//! and `-c` ends it once it has written every frame. The time from SIGCONT to its exit, with nothing else
//! of the benchmark running, is what one and two readers (and the one writer) take to empty the rings.

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::limits::{BLAST_FRAMES, BlastTrial, HEADER, Setup, best, rows, search};
use super::rig::{Netns, count_capture, rx_packets, signal, start_capture_with, wait_capture};

/// Searches per reader count.
pub const RUNS: usize = 3;
/// The reader counts compared.
pub const READERS: [usize; 2] = [1, 2];

/// Drain trials per reader count.
pub const DRAINS: usize = 5;

/// The ring budget of a drain trial: each of the two rings holds its sender's whole share (records of the
/// corpus's frames take 96 to 288 bytes).
const DRAIN_RING_BYTES: &str = "1073741824";

/// Every trial of every search, and the loss-free rate each search found, per reader count; and the drain
/// rates.
pub struct ReaderLimits {
    trials: Vec<BlastTrial>,
    /// `(readers, loss-free rate of each run, whether each run's flat-out trial was already lossless)`.
    limits: Vec<(usize, Vec<(f64, bool)>)>,
    /// `(readers, frames per second of each drain trial)`.
    drains: Vec<(usize, Vec<f64>)>,
}

/// One drain trial (see the module documentation): frames per second from SIGCONT to the tracer's exit.
fn drain_trial(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
    readers: usize,
) -> Result<f64> {
    let ns = Netns::with_queues(2)?;
    let out = dir.join("drain.pcapng");
    let threads = readers.to_string();
    let count = BLAST_FRAMES.to_string();
    let child = start_capture_with(
        &ns,
        tracer,
        "ebpf",
        &[
            "--threads",
            &threads,
            "--ring-bytes",
            DRAIN_RING_BYTES,
            "-c",
            &count,
        ],
        &out,
        dir,
    )?;
    signal(&child, "STOP");
    let before = rx_packets(&ns)?;
    let mut senders = Vec::new();
    for cpu in [0, 1] {
        senders.push(
            ns.sender_cmd("taskset")
                .args(["-c", &cpu.to_string()])
                .arg(blast)
                .arg("va")
                .arg(replay)
                .arg((BLAST_FRAMES / 2).to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    for s in senders {
        let done = s.wait_with_output()?;
        if !done.status.success() {
            bail!("blast failed: {}", String::from_utf8_lossy(&done.stderr));
        }
    }
    let delivered = rx_packets(&ns)? - before;
    let started = Instant::now();
    signal(&child, "CONT");
    wait_capture(child)?;
    let seconds = started.elapsed().as_secs_f64();
    let (captured, dropped) = count_capture(&out).context("the drained capture")?;
    if captured != BLAST_FRAMES || dropped != 0 || delivered < BLAST_FRAMES {
        bail!(
            "a drain trial lost frames: delivered {delivered}, captured {captured}, dropped {dropped} \
             (the rings are too small for the backlog?)"
        );
    }
    Ok(captured as f64 / seconds)
}

/// The drain rate of each reader count, [`DRAINS`] times, alternating.
pub fn drain_rates(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
) -> Result<Vec<(usize, Vec<f64>)>> {
    let mut out: Vec<(usize, Vec<f64>)> = READERS.iter().map(|&r| (r, Vec::new())).collect();
    for run in 0..DRAINS {
        for (readers, rates) in out.iter_mut() {
            eprintln!(
                "xtask: drain rate with {readers} reader(s), run {}",
                run + 1
            );
            rates.push(drain_trial(tracer, blast, replay, dir, *readers)?);
        }
    }
    Ok(out)
}

pub fn loss_free_by_readers(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
) -> Result<ReaderLimits> {
    let mut trials = Vec::new();
    let mut limits: Vec<(usize, Vec<(f64, bool)>)> =
        READERS.iter().map(|&r| (r, Vec::new())).collect();
    for run in 0..RUNS {
        for (readers, found) in limits.iter_mut() {
            eprintln!(
                "xtask: loss-free limit with {readers} reader(s), run {}",
                run + 1
            );
            let threads = readers.to_string();
            let extra = ["--threads", threads.as_str()];
            let got = search(&Setup {
                tracer,
                blast,
                replay,
                dir,
                engine: "ebpf",
                extra: &extra,
                queues: 2,
                senders: &[Some(0), Some(1)],
                label: format!("ebpf, --threads {readers}, run {}", run + 1),
            })?;
            let mine: Vec<&BlastTrial> = got.iter().collect();
            found.push(best(&mine));
            trials.extend(got);
        }
    }
    let drains = drain_rates(tracer, blast, replay, dir)?;
    Ok(ReaderLimits {
        trials,
        limits,
        drains,
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn render(r: &ReaderLimits) -> String {
    let mut s = format!(
        "\n**Loss-free limit with one ring reader and with two** (`--threads`, issue 26): two `blast` \
         senders pinned to CPUs 0 and 1 send the corpus replay's frames ({} in all per trial, half each, \
         each paced at half the rate asked) into a veth pair with two transmit and two receive queues, so the \
         probe runs on both CPUs and fills both rings; per reader count {RUNS} searches (flat out, then a \
         bisection), alternating. The senders, the probe, the readers and the writer share this machine's \
         cores: a second reader only has the time the others leave.\n\n",
        super::limits::BLAST_FRAMES
    );
    let mut medians = Vec::new();
    for (readers, found) in &r.limits {
        let mut rates: Vec<f64> = found.iter().map(|f| f.0).collect();
        let flat = found.iter().filter(|f| f.1).count();
        let m = median(&mut rates);
        let (lo, hi) = (
            rates.first().copied().unwrap_or(0.0),
            rates.last().copied().unwrap_or(0.0),
        );
        medians.push(m);
        s.push_str(&format!(
            "- {readers} reader(s): loss-free up to {:.2} M frames/s (median of {RUNS}; range {:.2}–{:.2}); \
             {flat} of {RUNS} searches lost nothing even flat out (the sender's limit, not the tracer's).\n",
            m / 1e6,
            lo / 1e6,
            hi / 1e6,
        ));
    }
    if let [one, two] = medians[..] {
        s.push_str(&format!(
            "\nLoss-free rate, two readers against one: {:.2}× (the issue's goal: at least 1.8×).\n",
            if one > 0.0 { two / one } else { 0.0 }
        ));
    }
    s.push_str(&format!(
        "\n**The readers' own capacity**: the tracer stopped (SIGSTOP) while both senders put {BLAST_FRAMES} \
         frames into two rings of 512 MiB, then continued; frames per second from SIGCONT until `-c` ended it, \
         {DRAINS} trials per reader count, alternating:\n\n"
    ));
    let mut drain_medians = Vec::new();
    for (readers, rates) in &r.drains {
        let mut rates = rates.clone();
        let m = median(&mut rates);
        drain_medians.push(m);
        let all: Vec<String> = rates.iter().map(|x| format!("{:.2}", x / 1e6)).collect();
        s.push_str(&format!(
            "- {readers} reader(s): median {:.2} M frames/s (trials, sorted: {} M frames/s).\n",
            m / 1e6,
            all.join(", ")
        ));
    }
    if let [one, two] = drain_medians[..] {
        s.push_str(&format!(
            "\nDrain rate, two readers against one: {:.2}×.\n",
            if one > 0.0 { two / one } else { 0.0 }
        ));
    }
    s.push_str(&format!("\n{HEADER}"));
    s.push_str(&rows(&r.trials));
    s
}
