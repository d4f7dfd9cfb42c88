//! Capture at the fastest sender here: tcpreplay at top speed into the rig's veth pair, each engine
//! capturing on the peer; what was sent, captured and reported dropped, the tracer's CPU time per frame, and
//! for the eBPF engine (several captures) the program's run time per frame as the kernel counts it, next to
//! the run time of an empty program attached beside it: what the counting itself adds (two clock reads per
//! run).

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::bpf_stats::{BpfStats, one_prog_stats, per_run, prog_ids};
use super::rig::{Netns, start_capture, stop_capture};
use super::traffic::{CORPUS, DATA, DATA_FRAMES, DATA_PASSES, PASSES, Workload};

/// Captures with the eBPF engine: the live run time swings by a third between runs on this shared VM.
const LIVE_ROUNDS: usize = 5;

/// CPU time (user + system) of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // USER_HZ is 100 on Linux.
    Some((utime + stime) as f64 / 100.0)
}

pub struct RateRow {
    workload: &'static str,
    engine: &'static str,
    sent: u64,
    send_seconds: f64,
    captured: u64,
    dropped: u64,
    cpu_ns_per_frame: f64,
    /// eBPF only: the ingress program's run time per run.
    prog_ns_per_run: Option<f64>,
    /// eBPF only: the run time per run of the empty program attached beside it.
    empty_ns_per_run: Option<f64>,
}

/// The empty program attached to `iface` in `ns` by the probe-cost example, detached when this is dropped
/// (its standard input closes).
struct EmptyProgram {
    child: Child,
    ids: Vec<u64>,
}

impl EmptyProgram {
    fn attach(ns: &Netns, example: &Path, iface: &str) -> Result<EmptyProgram> {
        let before = prog_ids("tracer_baseline");
        let mut child = ns
            .cmd(&example.to_string_lossy())
            .args(["--baseline", iface])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting probe_cost --baseline")?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        }
        let ids = prog_ids("tracer_baseline")
            .into_iter()
            .filter(|id| !before.contains(id))
            .collect();
        let empty = EmptyProgram { child, ids };
        if line.trim() != "attached" {
            bail!("probe_cost --baseline did not attach");
        }
        Ok(empty)
    }
}

impl Drop for EmptyProgram {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

pub fn capture_rate(
    tracer: &Path,
    example: &Path,
    workloads: &[Workload],
    dir: &Path,
) -> Result<Vec<RateRow>> {
    let mut rows = Vec::new();
    // The eBPF rounds of the workloads alternate, so that a noisy moment does not land on one only.
    let mut runs: Vec<(&Workload, &'static str)> = workloads
        .iter()
        .filter(|w| w.pcap)
        .map(|w| (w, "pcap"))
        .collect();
    for _ in 0..LIVE_ROUNDS {
        runs.extend(workloads.iter().map(|w| (w, "ebpf")));
    }
    for (work, engine) in runs {
        let (replay, per_pass, passes) = (&work.path, work.per_pass, work.passes);
        eprintln!("xtask: capture rate, {}, {engine} engine", work.name);
        let ns = Netns::new()?;
        let out = dir.join(format!("{engine}.pcapng"));
        let stats = if engine == "ebpf" {
            Some(BpfStats::enable()?)
        } else {
            None
        };
        let before_ids = prog_ids("tracer_ingress");
        let child = start_capture(&ns, tracer, engine, &out, dir)?;
        let ours: Vec<u64> = prog_ids("tracer_ingress")
            .into_iter()
            .filter(|id| !before_ids.contains(id))
            .collect();
        // Attached after the probe, so it runs after it on every frame: the same frames, at the same time.
        let empty = if engine == "ebpf" {
            Some(EmptyProgram::attach(&ns, example, "vb")?)
        } else {
            None
        };
        let empty_ids = empty.as_ref().map(|e| e.ids.clone()).unwrap_or_default();
        let cpu_before = cpu_seconds(child.id()).unwrap_or(0.0);
        let prog_before = one_prog_stats(&ours);
        let empty_before = one_prog_stats(&empty_ids);
        let t = Instant::now();
        let status = ns
            .sender_cmd("tcpreplay")
            .args(["-q", "-t", "-i", "va"])
            .arg(format!("--loop={passes}"))
            .arg(replay)
            .stdout(Stdio::null())
            .status()?;
        let send_seconds = t.elapsed().as_secs_f64();
        if !status.success() {
            bail!("tcpreplay failed ({status})");
        }
        // Let the tracer drain what is queued before reading its CPU time.
        std::thread::sleep(Duration::from_millis(1500));
        let cpu_after = cpu_seconds(child.id()).unwrap_or(0.0);
        let prog_after = one_prog_stats(&ours);
        let empty_after = one_prog_stats(&empty_ids);
        drop(empty);
        drop(stats);
        let (captured, dropped) = stop_capture(child, &out)?;
        let prog_ns_per_run = per_run(prog_before, prog_after);
        let empty_ns_per_run = per_run(empty_before, empty_after);
        rows.push(RateRow {
            workload: work.name,
            engine,
            sent: per_pass * u64::from(passes),
            send_seconds,
            captured,
            dropped,
            cpu_ns_per_frame: (cpu_after - cpu_before) * 1e9 / captured.max(1) as f64,
            prog_ns_per_run,
            empty_ns_per_run,
        });
    }
    Ok(rows)
}

/// The table of captures at the fastest sender, and the probe's live run time over them.
pub fn render(rates: &[RateRow], per_pass: u64) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "\n**Capture at the fastest sender here**: tcpreplay at top speed in one network namespace into a \
         veth pair whose peer is in another, the tracer's, with its defaults (snap length 256, so the eBPF probe copies \
         headers only; 64 MiB ring). Two replays: the corpus's {per_pass} RoCE/CNP/PFC/PAUSE frames {PASSES} \
         times (mostly short frames, which are whole at either copy length), and {DATA_FRAMES} RoCEv2 RDMA \
         WRITE frames with 1 KiB payloads {DATA_PASSES} times (where the header-only copy matters); libpcap \
         on the corpus once, the eBPF engine {LIVE_ROUNDS} times on each, the replays alternating. Run \
         times are the kernel's own counts with `kernel.bpf_stats_enabled` on, which times every run with \
         two clock reads: the empty program, attached beside the probe on the same interface and run on the \
         same frames, shows what that timing adds by itself.\n\n"
    ));
    s.push_str(
        "| traffic | engine | sent | sender rate | captured | reported dropped | unaccounted | tracer CPU per \
         frame | probe run time per frame | empty program | probe − empty |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let ns = |v: Option<f64>| v.map_or("–".to_string(), |ns| format!("{ns:.0} ns"));
    for r in rates {
        let net = r
            .prog_ns_per_run
            .zip(r.empty_ns_per_run)
            .map(|(p, e)| p - e);
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} frames/s | {} | {} | {} | {:.2} µs | {} | {} | {} |\n",
            r.workload,
            r.engine,
            r.sent,
            r.sent as f64 / r.send_seconds.max(1e-9),
            r.captured,
            r.dropped,
            r.sent as i64 - r.captured as i64 - r.dropped as i64,
            r.cpu_ns_per_frame / 1e3,
            ns(r.prog_ns_per_run),
            ns(r.empty_ns_per_run),
            ns(net),
        ));
    }
    for workload in [CORPUS, DATA] {
        let summary = |f: &dyn Fn(&RateRow) -> Option<f64>| -> String {
            let mut v: Vec<f64> = rates
                .iter()
                .filter(|r| r.workload == workload)
                .filter_map(f)
                .collect();
            v.sort_by(f64::total_cmp);
            match (v.first(), v.get(v.len() / 2)) {
                (Some(best), Some(median)) => format!("best {best:.0} ns, median {median:.0} ns"),
                _ => "not measured".to_string(),
            }
        };
        s.push_str(&format!(
            "\nThe eBPF probe live on the {workload} replay, per frame, over {LIVE_ROUNDS} captures: run time as \
             counted (raw) {}; the empty program {}; raw minus empty {}.\n",
            summary(&|r| r.prog_ns_per_run),
            summary(&|r| r.empty_ns_per_run),
            summary(&|r| r.prog_ns_per_run.zip(r.empty_ns_per_run).map(|(p, e)| p - e)),
        ));
    }
    s
}
