//! `cargo xtask bench --tracer`: the live tracer's benchmarks, run as root on this machine, rewriting the
//! `<!-- bench:tracer -->` section of BENCHMARKS.md.
//!
//! Two measurements, both with the release build of `roce-tracer`:
//! - the eBPF probe's own cost per frame: `tracer/examples/probe_cost.rs` drives the ingress program through
//!   `BPF_PROG_TEST_RUN` (the kernel times it); several rounds, pinned to one core, the best kept and the
//!   median shown beside it, because other work on the machine only ever adds time; the ring either
//!   drained between batches of runs or read meanwhile from the other core, by aya's reader (space handed
//!   back per record) and by the capture's (per batch); and what verifying the programs costs, with the
//!   size of their JIT code;
//! - capture without loss: the corpus's RoCE, CNP, PFC and PAUSE frames replayed by tcpreplay at top speed
//!   into a veth pair in a network namespace, each engine capturing on the peer; what was sent, captured and
//!   reported dropped, the tracer's CPU time per frame, and for the eBPF engine (several captures) the
//!   program's run time per frame as the kernel counts it with `kernel.bpf_stats_enabled`, next to the run
//!   time of an empty program attached beside it: what the counting itself adds (two clock reads per run).
//!
//! The load average is recorded before and after: the machine is shared, and the numbers mean little when
//! something else was running.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use roce_capture::write::PcapWriter;
use roce_capture::{CaptureReader, LinkType};
use roce_core::decode::{Decoder, Kind};

use crate::{install, root, sh, target_dir};

/// Rounds of the probe-cost example per ring size.
const PROBE_ROUNDS: usize = 5;
/// Passes of the corpus per engine in the capture benchmark.
const PASSES: u32 = 2000;
/// Captures with the eBPF engine: the live run time swings by a third between runs on this shared VM.
const LIVE_ROUNDS: usize = 5;
/// A ring that fits in the caches, measured beside the default to show what the ring's memory costs.
const SMALL_RING: u32 = 4 << 20;

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// One case of the probe-cost example, over every round.
struct ProbeCase {
    case: String,
    ring_bytes: u64,
    /// Who read the ring during the runs: "" (nobody: drained between batches), "record" or "batch".
    reader: String,
    bests: Vec<u64>,
    medians: Vec<u64>,
}

fn probe_cost(example: &Path) -> Result<Vec<ProbeCase>> {
    let mut cases: Vec<ProbeCase> = Vec::new();
    for round in 0..PROBE_ROUNDS {
        // Alternate the ring sizes and readers so that a noisy moment does not land on one of them only.
        for (ring, reader) in [
            (None, None),
            (Some(SMALL_RING), None),
            (None, Some("record")),
            (None, Some("batch")),
        ] {
            eprintln!("xtask: probe cost, round {}", round + 1);
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", "0"]).arg(example);
            if let Some(r) = ring {
                cmd.args(["--ring-bytes", &r.to_string()]);
            }
            if let Some(r) = reader {
                cmd.args(["--reader", r]);
            }
            let out = cmd.output().context("running probe_cost")?;
            if !out.status.success() {
                bail!(
                    "probe_cost failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let (numbers, case) = line
                    .split_once(" case=")
                    .with_context(|| format!("probe_cost printed {line:?}"))?;
                let get = |key: &str| -> Result<u64> {
                    numbers
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.parse().ok())
                        .with_context(|| format!("no {key} in {line:?}"))
                };
                let case = case.to_string();
                let ring_bytes = get("ring_bytes")?;
                let best = get("best_ns")?;
                let median = get("median_ns")?;
                let reader = numbers
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("reader="))
                    .unwrap_or_default()
                    .to_string();
                match cases
                    .iter_mut()
                    .find(|c| c.case == case && c.ring_bytes == ring_bytes && c.reader == reader)
                {
                    Some(c) => {
                        c.bests.push(best);
                        c.medians.push(median);
                    }
                    None => cases.push(ProbeCase {
                        case,
                        ring_bytes,
                        reader,
                        bests: vec![best],
                        medians: vec![median],
                    }),
                }
            }
        }
    }
    Ok(cases)
}

/// `probe_cost --verifier`: per configuration and program, the instructions the verifier processed, the
/// JIT code's size and the load time, as printed (`key=value` pairs).
fn verifier_costs(example: &Path) -> Result<Vec<String>> {
    let out = Command::new(example)
        .arg("--verifier")
        .output()
        .context("running probe_cost --verifier")?;
    if !out.status.success() {
        bail!(
            "probe_cost --verifier failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// Writes the Ethernet frames of `src` that are not `other` to a classic pcap tcpreplay can send; returns
/// how many.
fn replayable(src: &Path, dst: &Path) -> Result<u64> {
    let mut reader = CaptureReader::open(src)?;
    let decoder = Decoder::default();
    let file = std::fs::File::create(dst)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535)?;
    let (mut i, mut n) = (0, 0);
    while let Some(rec) = reader.next_record()? {
        i += 1;
        if rec.link != LinkType::ETHERNET || decoder.decode(i, &rec).kind == Kind::Other {
            continue;
        }
        w.write_packet(rec.ts_ns, rec.data, rec.caplen)?;
        n += 1;
    }
    w.into_inner()?;
    Ok(n)
}

/// Names of the two replays in the tables.
const CORPUS: &str = "corpus";
const DATA: &str = "1 KiB writes";

/// Frames per pass of the data-frame replay, and passes.
const DATA_FRAMES: u32 = 200;
const DATA_PASSES: u32 = 1500;

/// Writes a pcap of RoCEv2 RDMA WRITE frames with 1 KiB payloads on four QPs (a WRITE FIRST with its RETH
/// every 50 frames, WRITE MIDDLE otherwise): traffic made of data frames, where a header-only copy saves
/// most of the 256 bytes the corpus's mostly short frames do not have. The ICRC is left zero: the probe
/// does not check it. Returns the number of frames.
fn data_frames(dst: &Path) -> Result<u64> {
    let file = std::fs::File::create(dst)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535)?;
    for i in 0..DATA_FRAMES {
        let first = i % 50 == 0;
        let mut roce = Vec::with_capacity(1100);
        // BTH: opcode, solicited/migreq/pad/version, P_Key, reserved + destination QP, ack request + PSN.
        roce.push(if first { 0x06 } else { 0x07 });
        roce.push(0x40);
        roce.extend_from_slice(&0xffffu16.to_be_bytes());
        roce.extend_from_slice(&(0x10 + i % 4).to_be_bytes());
        roce.extend_from_slice(&i.to_be_bytes());
        if first {
            // RETH: virtual address, R_Key, DMA length.
            roce.extend_from_slice(&0x1000u64.to_be_bytes());
            roce.extend_from_slice(&0x42u32.to_be_bytes());
            roce.extend_from_slice(&65536u32.to_be_bytes());
        }
        roce.extend_from_slice(&[0xa5; 1024]);
        roce.extend_from_slice(&[0; 4]);
        let udp_len = 8 + roce.len();
        let ip_len = 20 + udp_len;
        let mut f = Vec::with_capacity(14 + ip_len);
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        // IPv4: DSCP 26 with ECT(0), don't fragment, UDP; the checksum is not needed on a veth.
        f.extend_from_slice(&[0x45, (26 << 2) | 2]);
        f.extend_from_slice(&(ip_len as u16).to_be_bytes());
        f.extend_from_slice(&(i as u16).to_be_bytes());
        f.extend_from_slice(&[0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&49152u16.to_be_bytes());
        f.extend_from_slice(&4791u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&roce);
        w.write_packet(u64::from(i) * 1000, &f, f.len() as u32)?;
    }
    w.into_inner()?;
    Ok(u64::from(DATA_FRAMES))
}

/// What a capture benchmark replays.
struct Workload {
    name: &'static str,
    path: std::path::PathBuf,
    per_pass: u64,
    passes: u32,
    /// Also capture it with libpcap.
    pcap: bool,
}

/// Two network namespaces joined by the veth pair `va` ↔ `vb`: the tracer's, holding `vb`, and the
/// sender's, holding `va`, as the issue sets the benchmark up. Both are deleted on drop.
struct Netns {
    capture: String,
    sender: String,
}

impl Netns {
    fn new() -> Result<Netns> {
        let capture = format!("rtbench{}", std::process::id());
        let ns = Netns {
            sender: format!("{capture}s"),
            capture,
        };
        for name in [&ns.capture, &ns.sender] {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
            sh(Command::new("ip").args(["netns", "add", name]))?;
        }
        let (c, s) = (ns.capture.as_str(), ns.sender.as_str());
        for args in [
            &[
                "-n", c, "link", "add", "va", "type", "veth", "peer", "name", "vb",
            ][..],
            &["-n", c, "link", "set", "va", "netns", s],
            &["-n", s, "link", "set", "va", "up"],
            &["-n", c, "link", "set", "vb", "up"],
        ] {
            sh(Command::new("ip").args(args))?;
        }
        for name in [c, s] {
            for key in [
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ] {
                let _ = in_ns(name, "sysctl").args(["-qw", key]).output();
            }
        }
        Ok(ns)
    }

    /// A command in the tracer's namespace.
    fn cmd(&self, prog: &str) -> Command {
        in_ns(&self.capture, prog)
    }

    /// A command in the sender's namespace.
    fn sender_cmd(&self, prog: &str) -> Command {
        in_ns(&self.sender, prog)
    }
}

fn in_ns(name: &str, prog: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", name, prog]);
    c
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in [&self.capture, &self.sender] {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

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

/// Ids of the loaded BPF programs named `name`, from `bpftool prog show`, whose first line per program reads
/// `ID: TYPE  name NAME  tag ...`.
fn prog_ids(name: &str) -> Vec<u64> {
    let Ok(out) = Command::new("bpftool").args(["prog", "show"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(':')?;
            let mut words = rest.split_whitespace();
            words.find(|&w| w == "name")?;
            (words.next()? == name).then(|| id.trim().parse().ok())?
        })
        .collect()
}

/// (run_time_ns, run_cnt) of a program, which `bpftool prog show` prints while kernel.bpf_stats_enabled is
/// on.
fn prog_run_stats(id: u64) -> Option<(u64, u64)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.trim().is_empty() {
        return None;
    }
    // bpftool leaves both out while they are zero.
    let value = |key: &str| -> u64 {
        let mut words = text.split_whitespace();
        words
            .find(|&w| w == key)
            .and_then(|_| words.next()?.parse().ok())
            .unwrap_or(0)
    };
    Some((value("run_time_ns"), value("run_cnt")))
}

/// Turns kernel.bpf_stats_enabled on for its lifetime and restores the old value.
struct BpfStats(String);

impl BpfStats {
    fn enable() -> Result<BpfStats> {
        let old = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")?
            .trim()
            .to_string();
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1")?;
        Ok(BpfStats(old))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", &self.0);
    }
}

struct RateRow {
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

fn wait_ready(child: &mut Child, ready: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("roce-tracer exited before it was ready ({status})");
        }
        if Instant::now() > deadline {
            bail!("roce-tracer never became ready");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
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

/// (run_time_ns, run_cnt) of the one program in `ids`, or None.
fn one_prog_stats(ids: &[u64]) -> Option<(u64, u64)> {
    match ids {
        [id] => prog_run_stats(*id),
        _ => None,
    }
}

fn per_run(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    match (before, after) {
        (Some((t0, n0)), Some((t1, n1))) if n1 > n0 => Some((t1 - t0) as f64 / (n1 - n0) as f64),
        _ => None,
    }
}

fn capture_rate(
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

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!("Linux {}", k.trim()))
        .unwrap_or_default()
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
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel()
    ));
    s.push_str(&format!(
        "**The probe's own cost per frame** (`BPF_PROG_TEST_RUN` on core 0, one 1 KiB RoCEv2 RDMA WRITE FIRST \
         frame, {PROBE_ROUNDS} rounds of 20 kernel averages over 10 000 runs; best and median of the rounds' \
         best averages):\n\n"
    ));
    s.push_str(
        "| case | ring | ring read during the runs | best ns/frame | median ns/frame |\n\
         |---|---|---|---:|---:|\n",
    );
    for c in probe {
        let mut b = c.bests.clone();
        b.sort_unstable();
        let best = b.first().copied().unwrap_or(0);
        let median = b.get(b.len() / 2).copied().unwrap_or(0);
        let reader = match c.reader.as_str() {
            "" => "no (drained between batches)",
            "record" => "from core 1, aya's reader (per record)",
            "batch" => "from core 1, the capture's reader (per batch)",
            other => other,
        };
        s.push_str(&format!(
            "| {} | {} MiB | {reader} | {best} | {median} |\n",
            c.case,
            c.ring_bytes >> 20
        ));
    }
    s.push_str(
        "\n**Verifying and compiling the probe** (`probe_cost --verifier`: the configuration is a load-time \
         constant, so each is verified on its own; instructions the verifier processed, and the JIT code):\n\n\
         | snap length | headers only | program | verified instructions | JIT bytes | load of both, ms |\n\
         |---:|---|---|---:|---:|---:|\n",
    );
    for line in verifier {
        let get = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or("?")
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            get("snaplen"),
            if get("headers_only") == "1" {
                "yes"
            } else {
                "no"
            },
            get("program"),
            get("verified_insns"),
            get("jited_bytes"),
            get("load_ms_both"),
        ));
    }
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

/// Frames per trial of the loss-free search: a few seconds at the rates reached here.
const BLAST_FRAMES: u64 = 3_000_000;
/// Trials of the bisection when the fastest sender causes loss.
const BLAST_STEPS: usize = 6;

/// One trial of an engine against the blasting sender.
struct BlastTrial {
    engine: &'static str,
    /// The rate asked for (`None`: as fast as the socket takes frames).
    asked: Option<f64>,
    /// What the sender reached.
    rate: f64,
    /// Frames the veth delivered to the tracer's side (`vb`'s receive counter): what the capture could see.
    delivered: u64,
    captured: u64,
    dropped: u64,
}

impl BlastTrial {
    fn lossless(&self) -> bool {
        self.dropped == 0 && self.captured >= self.delivered
    }
}

/// Starts `roce-tracer capture` on `vb` in the capture namespace and waits until its probes are attached.
fn start_capture(ns: &Netns, tracer: &Path, engine: &str, out: &Path, dir: &Path) -> Result<Child> {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let mut child = ns
        .cmd(&tracer.to_string_lossy())
        .args(["capture", "-q", "-i", "vb", "--engine", engine, "-w"])
        .arg(out)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting roce-tracer")?;
    wait_ready(&mut child, &ready)?;
    Ok(child)
}

/// Stops a capture with SIGINT, and returns the frames its file holds that are not `other` and the losses
/// its statistics block reports.
fn stop_capture(child: Child, out: &Path) -> Result<(u64, u64)> {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let result = child.wait_with_output()?;
    if !result.status.success() {
        bail!(
            "roce-tracer failed: {}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    let mut reader = CaptureReader::open(out)?;
    let decoder = Decoder::default();
    let (mut i, mut captured) = (0, 0u64);
    while let Some(rec) = reader.next_record()? {
        i += 1;
        if decoder.decode(i, &rec).kind != Kind::Other {
            captured += 1;
        }
    }
    let st = reader.if_stats().first().copied().unwrap_or_default();
    Ok((
        captured,
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
    ))
}

fn rx_packets(ns: &Netns) -> Result<u64> {
    let out = ns
        .cmd("cat")
        .arg("/sys/class/net/vb/statistics/rx_packets")
        .output()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("vb's rx_packets")
}

/// Captures `BLAST_FRAMES` frames of `replay` sent by the blast example (in the sender's namespace, at
/// `rate` or flat out) with `engine`, and counts what arrived, what was written and what was reported lost.
fn blast_trial(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
    engine: &'static str,
    rate: Option<f64>,
) -> Result<BlastTrial> {
    let ns = Netns::new()?;
    let out = dir.join(format!("blast-{engine}.pcapng"));
    let child = start_capture(&ns, tracer, engine, &out, dir)?;
    let before = rx_packets(&ns)?;
    let mut send = ns.sender_cmd(&blast.to_string_lossy());
    send.arg("va").arg(replay).arg(BLAST_FRAMES.to_string());
    if let Some(r) = rate {
        send.arg(format!("{r:.0}"));
    }
    let sent = send.output()?;
    if !sent.status.success() {
        bail!("blast failed: {}", String::from_utf8_lossy(&sent.stderr));
    }
    let text = String::from_utf8_lossy(&sent.stdout);
    let seconds: f64 = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("seconds="))
        .and_then(|v| v.parse().ok())
        .context("blast's output")?;
    let delivered = rx_packets(&ns)? - before;
    // The capture's own queues drain before the stop.
    std::thread::sleep(Duration::from_millis(1500));
    let (captured, dropped) = stop_capture(child, &out)?;
    Ok(BlastTrial {
        engine,
        asked: rate,
        rate: BLAST_FRAMES as f64 / seconds.max(1e-9),
        delivered,
        captured,
        dropped,
    })
}

/// Each engine against the blast sender: flat out first; only if that loses frames, a bisection on the
/// paced rate for the highest one without loss.
fn loss_free_limits(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
) -> Result<Vec<BlastTrial>> {
    let mut out = Vec::new();
    for engine in ["pcap", "ebpf"] {
        eprintln!("xtask: loss-free limit, {engine} engine");
        let flat = blast_trial(tracer, blast, replay, dir, engine, None)?;
        let (mut low, mut high) = (0.0, flat.rate);
        let lossy = !flat.lossless();
        out.push(flat);
        if lossy {
            for _ in 0..BLAST_STEPS {
                let mid = (low + high) / 2.0;
                let t = blast_trial(tracer, blast, replay, dir, engine, Some(mid))?;
                if t.lossless() {
                    low = mid;
                } else {
                    high = mid;
                }
                out.push(t);
            }
        }
    }
    Ok(out)
}

fn render_limits(trials: &[BlastTrial]) -> String {
    let mut s = format!(
        "\n**Loss-free limit, with a faster sender**: `tracer/examples/blast` sends the corpus replay's \
         frames from the sender's namespace through an AF_PACKET socket, {BLAST_FRAMES} per trial in \
         batches of 64 per `sendmmsg`, past the qdisc; each engine first flat out, and only when that loses \
         frames, a bisection on the paced rate. Delivered is `vb`'s receive counter: what reached the \
         capture point.\n\n| engine | rate asked | sender rate | delivered | captured | reported dropped | \
         unaccounted | lossless |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
    );
    for t in trials {
        s.push_str(&format!(
            "| {} | {} | {:.2} M frames/s | {} | {} | {} | {} | {} |\n",
            t.engine,
            t.asked
                .map_or("flat out".to_string(), |r| format!("{:.2} M/s", r / 1e6)),
            t.rate / 1e6,
            t.delivered,
            t.captured,
            t.dropped,
            t.delivered.saturating_sub(t.captured + t.dropped),
            if t.lossless() { "yes" } else { "no" }
        ));
    }
    for engine in ["pcap", "ebpf"] {
        let mine: Vec<&BlastTrial> = trials.iter().filter(|t| t.engine == engine).collect();
        let best = mine
            .iter()
            .filter(|t| t.lossless())
            .map(|t| t.rate)
            .fold(0.0, f64::max);
        let flat_lossless = mine.first().is_some_and(|t| t.lossless());
        s.push_str(&format!(
            "\n{engine}: {}.",
            if flat_lossless {
                format!(
                    "no loss at the fastest this sender goes with it attached, {:.2} M frames/s; its limit is higher",
                    best / 1e6
                )
            } else {
                format!("highest rate without loss {:.2} M frames/s", best / 1e6)
            }
        ));
    }
    s.push('\n');
    s
}

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
    let per_pass = replayable(&root().join("samples/corpus/corpus.pcap"), &replay)?;
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
            per_pass: data_frames(&data)?,
            passes: DATA_PASSES,
            pcap: false,
        },
    ];

    let load_before = load_average();
    let probe = probe_cost(&example)?;
    let verifier = verifier_costs(&example)?;
    let rates = capture_rate(&tracer, &example, &workloads, &dir)?;
    let limits = loss_free_limits(&tracer, &blast, &workloads[0].path, &dir)?;
    let load_after = load_average();

    let mut report = render(
        &probe,
        &verifier,
        &rates,
        per_pass,
        &load_before,
        &load_after,
    );
    report.push_str(&render_limits(&limits));
    println!("{report}");
    let md = root().join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    std::fs::write(&md, crate::bench::splice(&old, "tracer", &report))?;
    eprintln!("xtask: updated {}", md.display());
    Ok(())
}
