//! The capture loop: start an engine, write what it hands over, stop on any of the stop conditions, and
//! always close the file so that it is valid.
//!
//! One thread (the caller's) owns the file; engines feed it through a bounded channel. Stop conditions are
//! checked at least every 100 ms: SIGINT/SIGTERM, `--duration`, `-c`, the end of `-- CMD`, every interface
//! gone, or a write error. A second SIGINT/SIGTERM skips writing what is still queued, so the tool exits at
//! once, still closing the file with its statistics blocks.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::time::{Duration, Instant};

use roce_capture::write::SectionInfo;
use roce_core::line::LineRates;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::counters::Sampler;
use crate::engine::{self, Captured, Engine, EngineConfig, Event, IfaceStats, Plumbing};
use crate::live::{self, LiveView};
use crate::merge::{self, Merge};
use crate::metrics::Metrics;
use crate::output::{ClosingBlock, OutInterface, Output, Rotation};
use crate::sys::{self, Cap};
use crate::term;
use crate::watch::{Message, TapInfo, Watch};

/// Which capture engine to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// libpcap on each interface.
    Pcap,
    /// The `tracer-ebpf` TC probe.
    Ebpf,
    /// The NIC's sniffer through libibverbs (see [`engine::rdma`]).
    Rdma,
}

impl EngineKind {
    /// The name `--engine` takes, also written into the file's section comment.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Pcap => "pcap",
            EngineKind::Ebpf => "ebpf",
            EngineKind::Rdma => "rdma",
        }
    }

    /// Capabilities the engine needs, for the start-up check.
    pub fn needed_caps(self) -> &'static [Cap] {
        match self {
            EngineKind::Pcap => &[Cap::NetRaw],
            EngineKind::Ebpf => &[Cap::Bpf, Cap::NetAdmin, Cap::Perfmon],
            // Replaying recorded completions touches no device.
            EngineKind::Rdma if engine::rdma::replaying() => &[],
            // The kernel asks for CAP_NET_RAW to create a raw-packet QP and a sniffer flow rule.
            EngineKind::Rdma => &[Cap::NetRaw],
        }
    }
}

/// Everything `capture` was asked to do, validated.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Which engine captures.
    pub engine: EngineKind,
    /// The `-i` interfaces, in the order of the file's interface ids.
    pub interfaces: Vec<String>,
    /// The capture file, or the base name of a rotated capture.
    pub output: PathBuf,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// The user's libpcap filter; `None` keeps each engine's default selection.
    pub filter: Option<String>,
    /// Send every frame, not only RoCE, CNP, PFC and PAUSE (eBPF).
    pub all_frames: bool,
    /// The eBPF rings' budget; `None` keeps the default.
    pub ring_bytes: Option<u32>,
    /// How many threads read the eBPF rings; `None` for the default.
    pub threads: Option<usize>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Written once the capture runs, for a script to wait on.
    pub ready_file: Option<PathBuf>,
    /// Sample sysfs counters and ethtool statistics every `interval` and record the DCQCN knobs at start.
    pub counters: bool,
    /// How often counters are sampled and kernel events written.
    pub interval: Duration,
    /// A fixture tree read instead of `/sys` and the ethtool ioctl (see [`Sampler::fixture`]), and for the
    /// GID tables of the QP snapshots (see [`crate::qp_owners::read_gid_table`]).
    pub sysfs_root: Option<PathBuf>,
    /// `--link-speed`: every interface's line rate for the live view's pause time, instead of its sysfs
    /// speed (never written to the file, which records what sysfs says).
    pub link_bps: Option<u64>,
    /// Start a new file by size or age (`-w` then names the sequence: `run.00000.pcapng`, ...).
    pub rotation: Rotation,
    /// Serve Prometheus metrics here.
    pub metrics: Option<std::net::SocketAddr>,
    /// No console line per second.
    pub quiet: bool,
    /// Record kernel events (`skb:kfree_skb` drops, the RDMA tracepoints this kernel has) into `EVNT` and
    /// `DROP` blocks.
    pub kernel_events: bool,
    /// More tracepoints to record with `kernel_events` (`--tracepoint`).
    pub tracepoints: Vec<crate::kevents::TraceSpec>,
    /// `-- CMD ARGS`: run it once the probes are attached, stop when it exits.
    pub command: Vec<String>,
    /// The command line, for the section comment.
    pub argv: Vec<String>,
}

/// Why the capture stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT or SIGTERM (or a write failure, reported as an error).
    Signal,
    /// `--duration` reached.
    Duration,
    /// `-c` reached.
    Count,
    /// The `-- CMD` workload exited, with its exit code (`None`: killed by a signal).
    CommandExited(Option<i32>),
    /// Every interface ended.
    InterfacesGone,
}

impl StopReason {
    /// Why, in a few words, for the closing line.
    pub fn describe(&self) -> String {
        match self {
            StopReason::Signal => "signal".to_string(),
            StopReason::Duration => "duration reached".to_string(),
            StopReason::Count => "frame count reached".to_string(),
            StopReason::CommandExited(Some(c)) => format!("command exited with {c}"),
            StopReason::CommandExited(None) => "command killed by a signal".to_string(),
            StopReason::InterfacesGone => "every interface is gone".to_string(),
        }
    }
}

/// What a finished capture reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Frames written.
    pub frames: u64,
    /// Frames the engine lost.
    pub dropped: u64,
    /// Why the capture stopped.
    pub reason: StopReason,
}

/// Why a capture could not start or did not end cleanly, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The process lacks capabilities the engine needs.
    #[error(
        "the {engine} engine needs {missing}; run as root, or grant them with: sudo setcap {caps}+ep {exe}"
    )]
    Privileges {
        /// The engine asked for.
        engine: &'static str,
        /// The capabilities missing, by name.
        missing: String,
        /// The `setcap` argument that grants them.
        caps: String,
        /// This program's path, for the `setcap` line.
        exe: String,
    },
    /// No `-i` interface was given.
    #[error("no interface given (-i IFACE)")]
    NoInterface,
    /// The pcap engine did not start.
    #[error(transparent)]
    Pcap(#[from] engine::pcap::PcapStartError),
    /// The eBPF engine did not start.
    #[error(transparent)]
    Ebpf(#[from] engine::ebpf::EbpfStartError),
    /// The RDMA engine did not start.
    #[error(transparent)]
    Rdma(#[from] engine::rdma::RdmaError),
    /// `--kernel-events` could not start.
    #[error("--kernel-events")]
    KernelEvents(#[from] crate::kevents::KernelEventsError),
    /// The capture file could not be created.
    #[error("cannot create {path}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing the capture file failed (a full disk); the file holds every frame before the failure.
    #[error(
        "writing {path} failed, so the capture stopped; the file holds every frame up to the failure \
         ({frames} frames)"
    )]
    Write {
        /// The file.
        path: PathBuf,
        /// Frames written before the failure.
        frames: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The ready file could not be written.
    #[error("cannot write the ready file {path}")]
    Ready {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `-- CMD` workload could not be started.
    #[error("cannot start {cmd}")]
    Command {
        /// The command line.
        cmd: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The metrics port could not be bound.
    #[error("cannot serve metrics on {addr}")]
    Metrics {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The signal handlers could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
}

fn check_privileges(engine: EngineKind, kernel_events: bool) -> Result<(), CaptureError> {
    let mut needed = engine.needed_caps().to_vec();
    // A tracepoint program needs CAP_BPF and CAP_PERFMON whatever the engine.
    if kernel_events {
        for cap in [Cap::Bpf, Cap::Perfmon] {
            if !needed.contains(&cap) {
                needed.push(cap);
            }
        }
    }
    let missing = sys::missing_caps(sys::effective_caps(), &needed);
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
    let all: Vec<&str> = needed.iter().map(|c| c.name()).collect();
    Err(CaptureError::Privileges {
        engine: engine.name(),
        missing: names.join(", "),
        caps: all.join(","),
        exe: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "roce-tracer".into()),
    })
}

fn section_info(opts: &CaptureOptions) -> SectionInfo {
    let kernel = sys::kernel_release();
    SectionInfo {
        hardware: None,
        os: Some(format!("Linux {kernel}")),
        user_application: Some(format!("roce-tracer {}", env!("CARGO_PKG_VERSION"))),
        comment: Some(format!(
            "host: {}\nkernel: {kernel}\nengine: {}\ncommand: {}",
            sys::hostname(),
            opts.engine.name(),
            opts.argv.join(" ")
        )),
    }
}

/// A capture's running engine and its file. Every way out of [`run_inner`] before the end drops it, which
/// stops the engine, empties its channel, detaches it, and closes the file as it is; the normal end takes
/// the parts out one by one instead, to write what is still queued and the statistics.
struct Session {
    stop: Arc<AtomicBool>,
    /// Dropped before the engine finishes: a closed channel tells its threads to stop reading.
    rx: Option<Receiver<Event>>,
    engine: Option<Box<dyn Engine>>,
    file: Option<Output>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("running", &self.engine.is_some())
            .field("file", &self.file.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(rx) = self.rx.take() {
            while rx.recv().is_ok() {}
        }
        if let Some(engine) = self.engine.take() {
            engine.finish(&[]);
        }
        if let Some(file) = self.file.take() {
            let _ = file.finish(&[]);
        }
    }
}

/// Runs one capture to its end.
pub fn run(opts: &CaptureOptions) -> Result<Outcome, CaptureError> {
    run_watched(opts, None, None)
}

/// Runs one capture to its end, handing every frame it writes to `watch` (`roce-tracer top`), which can also
/// stop it; `served` is a metrics endpoint the caller already serves, updated in place of `opts.metrics`.
pub fn run_watched(
    opts: &CaptureOptions,
    watch: Option<&Watch>,
    served: Option<Metrics>,
) -> Result<Outcome, CaptureError> {
    check_privileges(opts.engine, opts.kernel_events)?;
    if opts.interfaces.is_empty() {
        return Err(CaptureError::NoInterface);
    }
    let signals_seen = Arc::new(AtomicUsize::new(0));
    let mut signals = Signals::new([SIGINT, SIGTERM]).map_err(CaptureError::Signals)?;
    let signal_handle = signals.handle();
    let signal_thread = {
        let seen = Arc::clone(&signals_seen);
        std::thread::spawn(move || {
            for _ in signals.forever() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let result = run_inner(opts, &signals_seen, watch, served);
    signal_handle.close();
    let _ = signal_thread.join();
    result
}

fn run_inner(
    opts: &CaptureOptions,
    signals_seen: &AtomicUsize,
    watch: Option<&Watch>,
    served: Option<Metrics>,
) -> Result<Outcome, CaptureError> {
    // Before the engine, so that a failure here leaves nothing to detach.
    let kernel_events = if opts.kernel_events {
        let k = crate::kevents::KernelEvents::start(&opts.tracepoints, opts.sysfs_root.as_deref())?;
        term::say(&k.description);
        Some(std::rc::Rc::new(std::cell::RefCell::new(k)))
    } else {
        None
    };
    // Frames one by one from libpcap and the rdma engine; the eBPF readers' batches hold thousands each.
    let queue = match opts.engine {
        EngineKind::Ebpf => engine::consumer::QUEUE_BATCHES,
        _ => 1 << 16,
    };
    let (tx, rx) = sync_channel::<Event>(queue);
    let stop = Arc::new(AtomicBool::new(false));
    let plumbing = Plumbing {
        tx,
        stop: Arc::clone(&stop),
    };
    let config = EngineConfig {
        interfaces: opts.interfaces.clone(),
        snaplen: opts.snaplen,
        filter: opts.filter.clone(),
        all_frames: opts.all_frames,
        ring_bytes: opts.ring_bytes,
        threads: opts.threads,
    };
    let engine: Box<dyn Engine> = match opts.engine {
        EngineKind::Pcap => Box::new(engine::pcap::start(&config, &plumbing)?),
        EngineKind::Ebpf => Box::new(engine::ebpf::start(&config, &plumbing)?),
        EngineKind::Rdma => Box::new(engine::rdma::start(
            &config,
            &plumbing,
            opts.sysfs_root.as_deref(),
        )?),
    };
    // Only the engines' threads hold senders now: the channel disconnects when they have all finished.
    drop(plumbing);
    let links = engine.link_types();
    let merge = Merge::new(engine.sources(), merge::WINDOW_NS, merge::HELD);
    let mut session = Session {
        stop,
        rx: Some(rx),
        engine: Some(engine),
        file: None,
    };
    let sysfs = opts
        .sysfs_root
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("/sys"));
    let ifaces: Vec<OutInterface> = opts
        .interfaces
        .iter()
        .enumerate()
        .map(|(i, name)| OutInterface {
            speed_bps: crate::ports::netdev_speed_bps(&sysfs, name),
            name: name.clone(),
            link: links
                .get(i)
                .copied()
                .unwrap_or(roce_capture::LinkType::ETHERNET),
            snaplen: opts.snaplen,
            description: session
                .engine
                .as_ref()
                .map(|e| e.describe(i as u32))
                .unwrap_or_default(),
        })
        .collect();
    let speeds: Vec<Option<u64>> = ifaces.iter().map(|i| i.speed_bps).collect();
    if let Some(w) = watch {
        w.offer(Message::Taps(
            ifaces
                .iter()
                .map(|i| TapInfo {
                    name: i.name.clone(),
                    link: i.link,
                    speed_bps: opts.link_bps.or(i.speed_bps),
                })
                .collect(),
        ));
    }
    let created = Output::create(&opts.output, section_info(opts), ifaces, opts.rotation);
    let file = session
        .file
        .insert(created.map_err(|source| CaptureError::Create {
            path: opts.output.clone(),
            source,
        })?);
    if let Some(k) = &kernel_events {
        let k = std::rc::Rc::clone(k);
        file.set_closing_block(ClosingBlock(Box::new(move || {
            k.borrow_mut().closing_blocks()
        })));
    }
    let mut next_events = Instant::now() + opts.interval;
    let mut sampler = opts.counters.then(|| match &opts.sysfs_root {
        Some(root) => Sampler::fixture(root, &counter_interfaces(opts)),
        None => Sampler::live(&counter_interfaces(opts)),
    });
    if let Some(s) = sampler.as_mut() {
        for problem in s.ethtool_problems() {
            term::say(&format!("roce-tracer: --counters: {problem}"));
        }
    }
    if let Some(s) = &sampler
        && let Some(block) = s.knobs_block()
    {
        if let Err(source) = file.write_header_custom(&block) {
            return Err(write_error(opts, 0, source));
        }
        if let Some(w) = watch {
            w.offer(Message::Blocks(vec![block]));
        }
    }
    // A sample before the first frame and one after the last (below), so that the counters' deltas cover
    // the whole capture rather than its whole intervals.
    if let Some(s) = sampler.as_mut()
        && let Some(block) = s.sample_block()
        && let Err(source) = file.write_custom(&block)
    {
        return Err(write_error(opts, 0, source));
    }
    // Metrics before the ready file and the command: a port that cannot be bound stops the capture before
    // anyone is told it runs, and before a workload starts that nobody would then stop.
    let metrics = match opts.metrics {
        _ if served.is_some() => served,
        Some(addr) => {
            let m = Metrics::new();
            match m.serve(addr) {
                Ok(_) => Some(m),
                Err(source) => return Err(CaptureError::Metrics { addr, source }),
            }
        }
        None => None,
    };
    if let Some(path) = &opts.ready_file
        && let Err(source) = std::fs::write(path, b"ready\n")
    {
        return Err(CaptureError::Ready {
            path: path.clone(),
            source,
        });
    }
    let mut child: Option<Child> = None;
    if let Some((prog, args)) = opts.command.split_first() {
        // In a process group of its own, so that stopping it reaches what it started too (a shell's children).
        match Command::new(prog).args(args).process_group(0).spawn() {
            Ok(c) => child = Some(c),
            Err(source) => {
                return Err(CaptureError::Command {
                    cmd: opts.command.join(" "),
                    source,
                });
            }
        }
    }

    let started = Instant::now();
    let mut last_tick = Instant::now();
    let mut next_sample = Instant::now() + opts.interval;
    let mut sink = Sink {
        file,
        // Decoding every frame for the line and the metrics is the writer's largest cost after writing
        // itself; with neither asked for (`-q`, no `--metrics`) nothing would read the result.
        live: (!opts.quiet || opts.metrics.is_some())
            .then(|| LiveView::new(LineRates::flag(opts.link_bps), speeds)),
        links,
        merge,
        dropped: vec![0u64; opts.interfaces.len()],
        frames: 0,
        count: opts.count,
        watch: watch.map(|w| (w, Vec::new(), Instant::now())),
    };
    let mut ended = vec![false; opts.interfaces.len()];
    let mut write_failure = None;
    let reason = loop {
        if signals_seen.load(Ordering::SeqCst) > 0 || watch.is_some_and(Watch::stopping) {
            break StopReason::Signal;
        }
        sink.show(false);
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break StopReason::Duration;
        }
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            break StopReason::CommandExited(status.code());
        }
        let Some(rx) = session.rx.as_ref() else {
            break StopReason::InterfacesGone;
        };
        let put = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Frame(f)) => sink.put(f),
            Ok(Event::Batch(batches)) => sink.batch(batches),
            Ok(Event::Ended { iface, reason }) => {
                term::say(&format!("roce-tracer: {reason}; its capture ended"));
                if let Some(e) = ended.get_mut(iface as usize) {
                    *e = true;
                }
                if ended.iter().all(|&e| e) {
                    break StopReason::InterfacesGone;
                }
                Ok(false)
            }
            Err(RecvTimeoutError::Timeout) => Ok(false),
            Err(RecvTimeoutError::Disconnected) => break StopReason::InterfacesGone,
        };
        match put {
            Err(e) => {
                write_failure = Some(e);
                break StopReason::Signal;
            }
            Ok(true) => break StopReason::Count,
            Ok(false) => {}
        }
        if last_tick.elapsed() >= Duration::from_secs(1) {
            let secs = last_tick.elapsed().as_secs_f64();
            last_tick = Instant::now();
            let mut by_ring = Vec::new();
            if let Some(engine) = &session.engine {
                sink.dropped = engine.dropped_so_far();
                by_ring = engine.dropped_by_source();
            }
            let dropped: u64 = sink.dropped.iter().sum();
            let late: u64 = sink.merge.late().iter().sum();
            let (interval, rows) = sink.live.as_mut().map(|l| l.tick(secs)).unwrap_or_default();
            if !opts.quiet {
                eprintln!(
                    "{}",
                    live::line(
                        started.elapsed().as_secs(),
                        &interval,
                        &live::Losses {
                            dropped,
                            by_ring: &by_ring,
                            late
                        }
                    )
                );
            }
            if let Some(m) = &metrics {
                m.update(
                    &rows.kinds,
                    &rows.flows,
                    &rows.cnps,
                    &rows.pfc,
                    interval.roce_gbps,
                    dropped,
                );
                m.update_losses(&opts.interfaces, &sink.dropped, &by_ring, late);
            }
            if let Some(w) = watch {
                w.offer(Message::Losses {
                    by_iface: sink.dropped.clone(),
                    by_ring,
                    late,
                });
            }
            if let Err(e) = sink.file.tick(&sink.dropped) {
                write_failure = Some(e);
                break StopReason::Signal;
            }
        }
        if let Some(k) = &kernel_events {
            let mut k = k.borrow_mut();
            k.poll_if_due();
            if Instant::now() >= next_events {
                next_events += opts.interval;
                for block in k.interval_blocks() {
                    if let Err(e) = sink.file.write_custom(&block) {
                        write_failure = Some(e);
                    }
                }
            }
        }
        if write_failure.is_some() {
            break StopReason::Signal;
        }
        if let Some(s) = sampler.as_mut()
            && Instant::now() >= next_sample
        {
            next_sample += opts.interval;
            if let Some(block) = s.sample_block()
                && let Err(e) = sink.file.write_custom(&block)
            {
                write_failure = Some(e);
                break StopReason::Signal;
            }
        }
    };

    if let Some(c) = child.as_mut() {
        stop_command(c, &opts.command);
    }
    // Stop the engine and empty the channel: frames already queued, and those the engines still read out of
    // the kernel, are written unless the count is reached, a write failed, or a second signal asked for an
    // immediate exit. Then the channel is closed, which tells the engines to stop reading.
    session.stop.store(true, Ordering::SeqCst);
    let rx = session.rx.take();
    let keep = |write_failure: &Option<std::io::Error>, frames: u64| {
        write_failure.is_none()
            && signals_seen.load(Ordering::SeqCst) < 2
            && opts.count.is_none_or(|c| frames < c)
    };
    while let Some(Ok(ev)) = rx.as_ref().map(Receiver::recv) {
        if !keep(&write_failure, sink.frames) {
            break;
        }
        let put = match ev {
            Event::Frame(f) => sink.put(f),
            Event::Batch(batches) => sink.batch(batches),
            Event::Ended { .. } => Ok(false),
        };
        if let Err(e) = put {
            write_failure = Some(e);
        }
    }
    // Every reader has finished, or the rest of the queue is not to be written: what the merge still
    // holds was waiting for the other rings' marks, and goes out in order. It is in hand already, so a
    // second signal, which skips the queue, does not skip it.
    if write_failure.is_none()
        && opts.count.is_none_or(|c| sink.frames < c)
        && let Err(e) = sink.flush()
    {
        write_failure = Some(e);
    }
    sink.show(true);
    drop(rx);
    if write_failure.is_none()
        && let Some(s) = sampler.as_mut()
        && let Some(block) = s.sample_block()
        && let Err(e) = sink.file.write_custom(&block)
    {
        write_failure = Some(e);
    }
    let (stats, probe_block) = session
        .engine
        .take()
        .map(|e| e.finish(&sink.merge.late()))
        .unwrap_or_default();
    let frames = sink.frames;
    if let Some(block) = probe_block
        && write_failure.is_none()
        && let Err(e) = sink.file.write_custom(&block)
    {
        write_failure = Some(e);
    }
    let past_count = opts.count.is_some_and(|c| sink.frames >= c);
    let stats: Vec<IfaceStats> = stats
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let written = sink.file.frames_written().get(i).copied().unwrap_or(0);
            account(*s, written, past_count)
        })
        .collect();
    let dropped: u64 = stats.iter().filter_map(|s| s.dropped).sum();
    let isb: Vec<(Option<u64>, Option<u64>)> = stats
        .iter()
        .map(|s: &IfaceStats| (s.received, s.dropped))
        .collect();
    let closed = session.file.take().map_or(Ok(()), |f| f.finish(&isb));
    if let Some(source) = write_failure {
        return Err(write_error(opts, frames, source));
    }
    if let Err(source) = closed {
        return Err(write_error(opts, frames, source));
    }
    Ok(Outcome {
        frames,
        dropped,
        reason,
    })
}

/// An interface's statistics as the file states them: what was written, what was lost, and their sum as
/// received. The engine's counts (`received`, lost ones included, and `dropped`) say how many frames it
/// handed over; those not written were skipped by a second signal or after a failed write, and are lost
/// too, unless the capture ended at `-c`, after which frames are not part of it.
fn account(engine: IfaceStats, written: u64, past_count: bool) -> IfaceStats {
    let (Some(received), Some(dropped)) = (engine.received, engine.dropped) else {
        return engine;
    };
    let handed_over = received.saturating_sub(dropped);
    let unwritten = handed_over.saturating_sub(written);
    let dropped = if past_count {
        dropped
    } else {
        dropped + unwritten
    };
    IfaceStats {
        received: Some(written + dropped),
        dropped: Some(dropped),
    }
}

/// The writing end of the loop: the file, the merge of the eBPF rings, the live view, and the count
/// that `-c` stops at.
struct Sink<'a> {
    file: &'a mut Output,
    /// `None` when neither the line nor the metrics are shown.
    live: Option<LiveView>,
    links: Vec<roce_capture::LinkType>,
    merge: Merge,
    /// The loss counts as of the last tick: asking the eBPF engine costs a system call per frame.
    dropped: Vec<u64>,
    frames: u64,
    count: Option<u64>,
    /// `roce-tracer top`: where written frames go, those not handed over yet, and since when they wait.
    watch: Option<(&'a Watch, Vec<Captured>, Instant)>,
}

impl Sink<'_> {
    /// Hands the written frames to the view: a batch at a time, at least every [`SHOW_EVERY`], and all of
    /// them when `all`.
    fn show(&mut self, all: bool) {
        if let Some((w, frames, since)) = self.watch.as_mut()
            && !frames.is_empty()
            && (all || frames.len() >= SHOW_BATCH || since.elapsed() >= SHOW_EVERY)
        {
            w.offer(Message::Frames {
                frames: std::mem::take(frames),
                upto_ns: None,
            });
            *since = Instant::now();
        }
    }

    /// Writes one frame and shows it to the live view; `true` once `-c` frames are written.
    fn put(&mut self, f: Captured) -> std::io::Result<bool> {
        self.file
            .write_frame(f.iface, f.ts_ns, &f.data, f.len, &self.dropped)?;
        self.frames += 1;
        if let Some(live) = self.live.as_mut() {
            let link = self.links.get(f.iface as usize).copied();
            live.frame(
                link.unwrap_or(roce_capture::LinkType::ETHERNET),
                f.iface,
                f.ts_ns,
                &f.data,
                f.len,
            );
        }
        if let Some((_, frames, _)) = self.watch.as_mut() {
            frames.push(f);
            if frames.len() >= SHOW_BATCH {
                self.show(false);
            }
        }
        Ok(self.count.is_some_and(|c| self.frames >= c))
    }

    /// Merges the batches in and writes what no source can still precede.
    fn batch(&mut self, batches: Vec<engine::SourceBatch>) -> std::io::Result<bool> {
        for b in batches {
            self.merge.push(b);
        }
        self.drain(Merge::pop)
    }

    /// Writes everything the merge holds, in order: once no source can deliver more.
    fn flush(&mut self) -> std::io::Result<bool> {
        self.drain(Merge::pop_any)
    }

    fn drain(&mut self, next: fn(&mut Merge) -> Option<Captured>) -> std::io::Result<bool> {
        while let Some(f) = next(&mut self.merge) {
            if self.put(f)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Frames handed to `top`'s view at a time, and the longest one waits for the others.
const SHOW_BATCH: usize = 4096;
const SHOW_EVERY: Duration = Duration::from_millis(20);

/// The netdevs whose ethtool statistics `--counters` samples: the captured interfaces, or for the rdma
/// engine, whose `-i` names RDMA ports, each port's netdev.
fn counter_interfaces(opts: &CaptureOptions) -> Vec<String> {
    match opts.engine {
        EngineKind::Rdma => engine::rdma::netdevs_of(
            opts.sysfs_root
                .as_deref()
                .unwrap_or(std::path::Path::new("/sys")),
            &opts.interfaces,
        ),
        _ => opts.interfaces.clone(),
    }
}

/// How long a command still running when the capture ends gets to exit after SIGTERM, before SIGKILL.
const COMMAND_GRACE: Duration = Duration::from_secs(2);

/// Ends the `-- CMD` workload when the capture stopped for another reason (a signal, `--duration`, `-c`, a
/// full disk), so that it does not go on unobserved after the tool has exited; and reaps it in every case.
/// SIGTERM goes to its process group, which it leads, so a shell's children stop with it; SIGKILL follows
/// for a group whose leader has not exited after [`COMMAND_GRACE`].
fn stop_command(child: &mut Child, command: &[String]) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    eprintln!(
        "roce-tracer: the capture ended while `{}` (pid {}) still ran; stopping it",
        command.join(" "),
        child.id()
    );
    let group = i32::try_from(child.id()).ok().map(|pid| -pid);
    let signal_group = |sig| {
        if let Some(g) = group {
            // SAFETY: kill(2) on the group of a child this process spawned and has not reaped, so the id
            // cannot have been reused.
            unsafe { libc::kill(g, sig) };
        }
    };
    signal_group(libc::SIGTERM);
    let deadline = Instant::now() + COMMAND_GRACE;
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(libc::SIGKILL);
    let _ = child.wait();
}

fn write_error(opts: &CaptureOptions, frames: u64, source: std::io::Error) -> CaptureError {
    CaptureError::Write {
        path: opts.output.clone(),
        frames,
        source,
    }
}
