//! `roce-tracer`: live RoCEv2 capture into pcapng.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use tracer::capture::{self, CaptureOptions, EngineKind};

/// Live RoCEv2 capture: RoCE, CNP and PFC/PAUSE frames into pcapng, with NIC counters and a live view.
#[derive(Debug, Parser)]
#[command(name = "roce-tracer", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Cmd {
    /// Capture to a pcapng file until a signal, --duration, -c, or the end of `-- CMD`.
    Capture(CaptureArgs),
    /// Watch DCQCN live: per flow its rate, CE marks, CNPs and the reaction-point model's rate, per priority
    /// the time paused, on a terminal (a capture as `capture` runs it, or --replay of capture files).
    Top(TopArgs),
    /// List the interfaces and RDMA devices, which engine can capture each and what it would see, and
    /// whether this process may (docs/capture.md).
    List(ListArgs),
    /// Check the rdma engine on a device: capture while RoCE traffic runs, then check what was captured.
    Selftest(SelftestArgs),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// A recorded sysfs tree to read instead of /sys (tests).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct SelftestArgs {
    /// The RDMA device and port, DEVICE or DEVICE:PORT (mlx5_0, mlx5_0:1).
    #[arg(short = 'i', long = "interface")]
    interface: String,
    /// How long to capture.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// Keep the capture here (by default it goes to a temporary file, deleted when the test passes).
    #[arg(short = 'w', long = "write")]
    output: Option<PathBuf>,
    /// A recorded sysfs tree to read instead of /sys (tests).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// Traffic to run during the capture, e.g. -- ib_write_bw -d mlx5_0 -x 3 -D 5 PEER.
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Engine {
    /// libpcap: any interface, any BPF filter.
    Pcap,
    /// The eBPF TC probe: parses in the kernel, counts per QP and priority, copies only matching frames.
    Ebpf,
    /// The RDMA NIC's sniffer through libibverbs (-i mlx5_0[:PORT]): sees the RoCE the NIC offloads, which
    /// the other two cannot see on its netdev.
    Rdma,
}

#[derive(Debug, clap::Args)]
struct CaptureArgs {
    /// Interface to capture on (with --engine rdma an RDMA device and port: mlx5_0 or mlx5_0:1); repeat for
    /// several.
    #[arg(short = 'i', long = "interface", required = true)]
    interfaces: Vec<String>,
    /// Output pcapng file.
    #[arg(short = 'w', long = "write")]
    output: PathBuf,
    #[command(flatten)]
    capture: CaptureFlags,
}

#[derive(Debug, clap::Args)]
struct TopArgs {
    /// Interface to capture on, as `capture -i` (or --replay files instead).
    #[arg(
        short = 'i',
        long = "interface",
        required_unless_present = "replay",
        conflicts_with = "replay"
    )]
    interfaces: Vec<String>,
    /// Also write the capture to this pcapng file, as `capture -w` does.
    #[arg(short = 'w', long = "write", conflicts_with = "replay")]
    output: Option<PathBuf>,
    /// Play capture files through the view instead of capturing (no privileges needed): files,
    /// directories, quoted patterns, compressed or not, as the analyzer reads them.
    #[arg(long, num_args = 1..)]
    replay: Vec<PathBuf>,
    /// Replay speed: capture seconds per wall second (1 real time; 0.001 a thousand times slower, so that a
    /// 3 ms sample lasts 3 s; `max` as fast as the files read). `+` and `-` double and halve it.
    #[arg(long, default_value = "1", value_parser = parse_speed, requires = "replay")]
    speed: f64,
    /// The view's bin of capture time: every number on screen is of the last bin (default 1s live; for a
    /// replay about a quarter second of wall time at the starting speed, e.g. 200us at --speed 0.001).
    #[arg(long, value_parser = parse_duration)]
    bin: Option<Duration>,
    /// Added to every CNP's capture time before the model sees it: the delay from the tap to the sender.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    cnp_delay: Duration,
    #[command(flatten)]
    capture: CaptureFlags,
}

/// The capture's options, shared by `capture` and `top`.
#[derive(Debug, clap::Args)]
struct CaptureFlags {
    #[arg(long, value_enum, default_value = "pcap")]
    engine: Engine,
    /// Bytes kept of each frame. The default holds Ethernet, two VLAN tags, IPv6, UDP, the BTH and every
    /// extension header with room to spare; raise it to keep payloads (and check ICRCs).
    #[arg(short = 's', long, default_value_t = 256)]
    snaplen: u32,
    /// A libpcap filter expression. With --engine pcap it replaces the default, which keeps RoCEv2, RoCEv1
    /// and MAC Control frames with or without tags. With --engine ebpf the probe still selects RoCE, CNP, PFC
    /// and PAUSE frames (or all with --all-frames) and the filter then narrows what is written: it cannot
    /// widen the probe's selection.
    #[arg(long)]
    filter: Option<String>,
    /// eBPF engine: keep every frame, not only RoCE, CNP, PFC and PAUSE.
    #[arg(long)]
    all_frames: bool,
    /// eBPF engine: the ring buffers' budget in bytes (a power of two, at least 4096; default 64 MiB). Each
    /// CPU has a ring of its own, an equal share of the budget rounded down to a power of two, and no less
    /// than 1 MiB unless the budget is smaller. Smaller rings lose frames sooner; the tests use tiny ones to
    /// check the loss accounting.
    #[arg(long, value_parser = parse_ring_bytes)]
    ring_bytes: Option<u32>,
    /// eBPF engine: how many threads read the rings (each reads every N-th ring; default one per ring, at
    /// most 4). Their frames are merged by time before they are written.
    #[arg(long, value_parser = parse_threads)]
    threads: Option<usize>,
    /// Stop after this long (e.g. 30s, 500ms, 2m; a bare number is seconds).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Start a new file once this one holds this many bytes (K, M, G suffixes: powers of 1024). Files are
    /// then named after -w with a sequence number: run.00000.pcapng, run.00001.pcapng, ...
    #[arg(long, value_parser = parse_size)]
    rotate_size: Option<u64>,
    /// Start a new file every this many seconds (or 10m, 1h...).
    #[arg(long, value_parser = parse_duration)]
    rotate_seconds: Option<Duration>,
    /// Stop after this many frames.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Written once every probe is attached and the file is open: start the traffic then.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Sample the RDMA port counters and the interfaces' ethtool statistics every --interval, and record the
    /// DCQCN knobs once.
    #[arg(long)]
    counters: bool,
    /// How often --counters samples, and how often kernel events are written out (`1s`, `500ms`).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    interval: Duration,
    /// A fixture tree to read instead of /sys and the ethtool ioctl (tests): laid out like /sys, with each
    /// interface's `ethtool -S` output in DIR/ethtool-S/IFACE.
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// Line rate of every interface for the live view's pause time. By default each interface's own, from
    /// sysfs, else 100 Gb/s. The file records each interface's sysfs speed (pcapng if_speed) whatever this
    /// says. A number alone is Gb/s (25); or 25G, 400Gbps, 100000M.
    #[arg(long, value_name = "SPEED", value_parser = roce_core::units::parse_speed)]
    link_speed: Option<u64>,
    /// Serve Prometheus metrics (per QP, per priority, capture drops) at this address, e.g. 127.0.0.1:9464.
    #[arg(long)]
    metrics: Option<std::net::SocketAddr>,
    /// Record kernel events into the capture (eBPF tracepoints, either engine): the kernel's drops of IP,
    /// RoCEv1 and MAC Control packets per drop reason (skb:kfree_skb), and, where the kernel has them, QP
    /// creation and connection events with their process, MAD traffic and CQ polling (rdma_cma, ib_mad,
    /// rdma_core). Tracepoints this kernel lacks are listed at start.
    #[arg(long)]
    kernel_events: bool,
    /// With --kernel-events, also record this tracepoint: SYSTEM:EVENT, or SYSTEM:EVENT:FIELD,FIELD... for
    /// up to six numeric and two byte-array fields of its record (repeatable).
    #[arg(long = "tracepoint", value_name = "SYSTEM:EVENT[:FIELDS]", requires = "kernel_events", value_parser = parse_tracepoint)]
    tracepoints: Vec<tracer::kevents::TraceSpec>,
    /// No line per second on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// A command to run while capturing: the capture starts before it and stops when it exits; a capture
    /// that ends first stops it (SIGTERM to its process group, SIGKILL 2 s later).
    #[arg(last = true)]
    command: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 10s, 500ms, 200us, 2m)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("not a duration: {s:?}"));
    }
    Duration::try_from_secs_f64(v * scale).map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a size: {s:?} (try 100M)"))?;
    v.checked_mul(scale)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("not a usable size: {s:?}"))
}

fn parse_speed(s: &str) -> Result<f64, String> {
    if s.trim().eq_ignore_ascii_case("max") {
        return Ok(f64::INFINITY);
    }
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => {
            Ok(v.clamp(tracer::top::replay::SLOWEST, tracer::top::replay::FASTEST))
        }
        _ => Err(format!(
            "not a speed: {s:?} (1 is real time, 0.001 a thousand times slower, max as fast as it reads)"
        )),
    }
}

fn parse_tracepoint(s: &str) -> Result<tracer::kevents::TraceSpec, String> {
    tracer::kevents::TraceSpec::parse(s).map_err(|e| e.to_string())
}

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("not a thread count (1 or more): {s:?}")),
    }
}

fn parse_ring_bytes(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a byte count: {s:?}"))?;
    if v < 4096 || !v.is_power_of_two() {
        return Err(format!("{v} is not a power of two of at least 4096"));
    }
    Ok(v)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracer::term::say(&format!("roce-tracer: error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Capture(a) => {
            let opts = capture_options(a.capture, a.interfaces, a.output)?;
            let out = capture::run(&opts)?;
            let why = out.reason.describe();
            eprintln!(
                "roce-tracer: {} frames written to {}, {} dropped ({why})",
                out.frames,
                opts.output.display(),
                out.dropped
            );
            Ok(())
        }
        Cmd::List(a) => {
            // A fixture tree brings its ethtool statistics as files, as for `capture --sysfs-root`.
            let mut counters = match &a.sysfs_root {
                Some(root) => tracer::counters::Sampler::fixture(root, &[]),
                None => tracer::counters::Sampler::live(&[]),
            };
            let root = a.sysfs_root.unwrap_or_else(|| PathBuf::from("/sys"));
            // Device and interface names come from the host.
            print!(
                "{}",
                tracer::term::safe(&tracer::list::render(
                    &root,
                    &tracer::list::Host::this(),
                    &mut counters
                ))
            );
            Ok(())
        }
        Cmd::Selftest(a) => selftest(a),
        Cmd::Top(a) => top(a),
    }
}

/// The capture's options from the command line, checked.
fn capture_options(
    f: CaptureFlags,
    interfaces: Vec<String>,
    output: PathBuf,
) -> Result<CaptureOptions> {
    if f.interval.is_zero() {
        bail!("--interval must be above zero");
    }
    let most = tracer_common::MAX_SNAPLEN as u32;
    let snaplen = match f.engine {
        Engine::Ebpf if f.snaplen > most => {
            // The file's interface blocks then state the snap length the frames really have.
            eprintln!(
                "roce-tracer: the eBPF engine copies at most {most} bytes of a frame: -s {} becomes \
                 {most} (--engine pcap keeps whole jumbo frames)",
                f.snaplen
            );
            most
        }
        _ => f.snaplen.max(1),
    };
    if f.threads.is_some() && !matches!(f.engine, Engine::Ebpf) {
        bail!(
            "--threads is for --engine ebpf, whose rings it shares out; the other engines read \
             each interface on a thread of its own"
        );
    }
    Ok(CaptureOptions {
        engine: match f.engine {
            Engine::Pcap => EngineKind::Pcap,
            Engine::Ebpf => EngineKind::Ebpf,
            Engine::Rdma => EngineKind::Rdma,
        },
        interfaces,
        output,
        snaplen,
        filter: f.filter,
        all_frames: f.all_frames,
        ring_bytes: f.ring_bytes,
        threads: f.threads,
        rotation: tracer::output::Rotation {
            size: f.rotate_size,
            every: f.rotate_seconds.filter(|d| !d.is_zero()),
        },
        duration: f.duration,
        count: f.count,
        ready_file: f.ready_file,
        counters: f.counters,
        interval: f.interval,
        sysfs_root: f.sysfs_root,
        link_bps: f.link_speed,
        metrics: f.metrics,
        quiet: f.quiet,
        kernel_events: f.kernel_events,
        tracepoints: f.tracepoints,
        command: f.command,
        argv: std::env::args().collect(),
    })
}

fn top(a: TopArgs) -> Result<()> {
    let dcqcn = roce_core::dcqcn_options::Options {
        lines: roce_core::line::LineRates::flag(a.capture.link_speed),
        cnp_delay_ns: i64::try_from(a.cnp_delay.as_nanos()).unwrap_or(i64::MAX),
        fit: false,
        ..Default::default()
    };
    let metrics = a.capture.metrics;
    let source = if a.replay.is_empty() {
        // Without -w the frames are written nowhere, by the same loop: the view is what was asked for.
        let output = a.output.unwrap_or_else(|| PathBuf::from("/dev/null"));
        let mut opts = capture_options(a.capture, a.interfaces, output)?;
        // The view serves the metrics itself, and the screen replaces the line per second.
        opts.metrics = None;
        opts.quiet = true;
        tracer::top::Source::Live(Box::new(opts))
    } else {
        tracer::top::Source::Replay {
            paths: a.replay,
            speed: a.speed,
        }
    };
    let bin_ns = a
        .bin
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
    let said = tracer::top::run(tracer::top::TopOptions {
        source,
        bin_ns,
        dcqcn,
        metrics,
    })?;
    tracer::term::say(&said);
    Ok(())
}

fn selftest(a: SelftestArgs) -> Result<()> {
    use tracer::selftest;
    let spec = tracer::engine::rdma::PortSpec::parse(&a.interface)?;
    let root = a
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/sys"));
    let keep = a.output.is_some();
    let output = selftest::output_path(a.output);
    eprintln!(
        "roce-tracer selftest: capturing every frame of {spec} for {:.0} s with --engine rdma.",
        a.duration.as_secs_f64()
    );
    if a.command.is_empty() {
        tracer::term::say(&selftest::traffic_hint(&root, &spec.device, spec.port));
    }
    let opts = CaptureOptions {
        engine: EngineKind::Rdma,
        interfaces: vec![spec.to_string()],
        output: output.clone(),
        snaplen: 256,
        filter: None,
        all_frames: true,
        ring_bytes: None,
        threads: None,
        rotation: tracer::output::Rotation::default(),
        duration: Some(a.duration),
        count: None,
        ready_file: None,
        counters: false,
        interval: Duration::from_secs(1),
        sysfs_root: a.sysfs_root,
        link_bps: None,
        metrics: None,
        quiet: true,
        kernel_events: false,
        tracepoints: Vec::new(),
        command: a.command,
        argv: std::env::args().collect(),
    };
    let start = tracer::sys::now_ns();
    let out = capture::run(&opts).context("the selftest's capture failed")?;
    let end = tracer::sys::now_ns();
    let seen = selftest::inspect(&output, (start, end))
        .with_context(|| format!("reading back {}", output.display()))?;
    eprintln!(
        "roce-tracer selftest: {} frames captured, {} lost",
        out.frames, out.dropped
    );
    match selftest::verdict(&seen, &spec.to_string()) {
        Ok(summary) => {
            println!("PASS: {}", tracer::term::safe(&summary));
            if keep {
                println!("the capture is in {}", output.display());
            } else {
                let _ = std::fs::remove_file(&output);
            }
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                println!("FAIL: {}", tracer::term::safe(p));
            }
            bail!(
                "the selftest failed; the capture is kept in {} for a look (roce-analyzer, tshark)",
                output.display()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("200us").unwrap(), Duration::from_micros(200));
        assert_eq!(parse_duration("1.5µs").unwrap(), Duration::from_nanos(1500));
        assert_eq!(parse_duration("10ns").unwrap(), Duration::from_nanos(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("1e400").is_err());
        assert_eq!(parse_ring_bytes("65536"), Ok(65536));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert!(parse_size("xM").is_err());
        assert!(parse_ring_bytes("1000").is_err());
        assert!(parse_ring_bytes("2048").is_err());
        assert_eq!(parse_threads("2"), Ok(2));
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("two").is_err());
    }
}
