//! Everything the report needs from one read of a capture: each frame is decoded once and handed to the
//! statistics pass, and its brief (what they read of it) to the DCQCN and hosts passes on a thread beside
//! ([`beside`]); the PFC and findings analyses then run on their tables.

mod beside;
pub mod dcqcn;
pub mod fabric;
pub mod findings;
pub mod hist;
pub mod hops;
pub mod model_log;
pub mod np;
pub mod on_disk;
pub mod pauses;
mod spread;

use serde::Serialize;

use dcqcn::{DcqcnPass, DcqcnReport, Options};
use findings::{Finding, Rules};
use pauses::{PauseInputs, PauseReport};
use roce_capture::{Capture, RecordBatch};
use roce_core::dcqcn::DcqcnError;
use roce_core::decode::{Decoder, Frame};
use roce_core::frames::Frames;
use roce_core::passes::brief::Brief;
use roce_core::passes::hosts::HostsPass;
use roce_core::passes::{Stats, StatsReport};
use roce_core::recorded::Recorded;

/// How the whole analysis runs.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// How frames are decoded: whether the ICRC is checked, which extra UDP port carries RoCE.
    pub decoder: Decoder,
    /// How the DCQCN analysis runs: knobs, bins, fit, and the rule that gives each tap its line rate (which
    /// every pass of the pipeline follows).
    pub dcqcn: Options,
    /// A pause at least this long is a storm (what a PFC watchdog would act on).
    pub storm_threshold_ns: u64,
    /// Thresholds of the findings' rules.
    pub rules: Rules,
    /// The hops pass (it finds nothing in a capture of one tap).
    pub hops: hops::HopsOptions,
    /// Threads the read runs on ([`spread`]); 1 runs every pass on the caller's thread.
    pub threads: usize,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            decoder: Decoder::default(),
            dcqcn: Options::default(),
            storm_threshold_ns: pauses::DEFAULT_STORM_THRESHOLD_NS,
            rules: Rules::default(),
            hops: hops::HopsOptions::default(),
            threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        }
    }
}

/// The results of one read of a capture, everything the outputs draw from.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// Counts, the flow table, and per-file summaries.
    pub stats: StatsReport,
    /// What DCQCN did: model, observation and fit per flow.
    pub dcqcn: DcqcnReport,
    /// What PFC did: pauses, storms, stalls.
    pub pauses: PauseReport,
    /// The problems worth a reader's attention, most serious first.
    pub findings: Vec<Finding>,
    /// Hops, queues and marking, when some packet was seen at two taps.
    pub hops: Option<hops::HopsReport>,
    /// What the tracer recorded beside the packets, read once at the end of the read: the statistics and the
    /// model took their part of it, and the outputs take the kernel events from here.
    #[serde(skip)]
    pub recorded: Recorded,
    /// The hosts side by side: each host pair's rate and what slowed it.
    pub fabric: fabric::FabricReport,
}

/// Runs every analysis over `capture`. A damaged file still yields the analysis of everything before the
/// damage; its error stays in the capture (and in `stats.capture.error`). `progress` hears the bytes read
/// from the files so far, every 65,536 frames.
pub fn run(
    capture: &mut Capture,
    opts: &PipelineOptions,
    progress: impl FnMut(u64),
) -> Result<Analysis, DcqcnError> {
    run_with_model_events(capture, opts, progress, None)
}

/// [`run`], handing every event of every flow's DCQCN model to `on_event`, when there is one, as the model
/// makes it (the report's per-event table goes to disk this way, never whole in memory). Without one the
/// flows' models run over the threads of the caller's rayon pool, each flow's on one.
pub fn run_with_model_events(
    capture: &mut Capture,
    opts: &PipelineOptions,
    mut progress: impl FnMut(u64),
    on_event: Option<dcqcn::OnEvent<'_>>,
) -> Result<Analysis, DcqcnError> {
    let make = || Stats::new(opts.dcqcn.lines).with_priorities(opts.dcqcn.priorities.clone());
    let passes = beside::Passes {
        dcqcn: DcqcnPass::new(opts.dcqcn.bin_ns, opts.dcqcn.lines),
        hosts: HostsPass::default(),
    };
    let how = Reading {
        decoder: opts.decoder,
        threads: opts.threads,
        hops: Some(&opts.hops),
    };
    let (stats, passes, hops) = read(capture, &how, make, passes, &mut progress);
    let beside::Passes { dcqcn, hosts } = passes;
    give_back_free_memory();
    let recorded = Recorded::of(capture);
    let (stats, intervals) = stats.finish_with_intervals(capture, &recorded);
    let mut dcqcn_opts = opts.dcqcn.clone();
    dcqcn_opts.apply_recorded_knobs(&recorded);
    dcqcn_opts.learn_taps(capture.taps());
    let (mut dcqcn, series) = dcqcn.finish_with_events(&dcqcn_opts, &intervals, on_event)?;
    dcqcn.name_taps(|i| tap_name(capture, i));
    let hosts = hosts.finish();
    let pauses = pauses::analyse(PauseInputs {
        hosts: &hosts,
        intervals,
        flows: &stats.flows,
        series: &series.flows,
        bins_start_ns: series.start_ns,
        bin_ns: series.bin_ns,
        start_ns: stats.capture.first_ns.unwrap_or(0),
        end_ns: stats.capture.last_ns.unwrap_or(0),
        storm_threshold_ns: opts.storm_threshold_ns,
    });
    let fabric = fabric::analyse(fabric::FabricInputs {
        stats: &stats,
        intervals: &pauses.intervals,
        hosts: &hosts,
        series: &series.flows,
    });
    let mut findings = findings::diagnose(&stats, &dcqcn, &pauses, &opts.rules);
    let hops = match hops {
        LazyHops::Waiting { .. } | LazyHops::Off => None,
        LazyHops::Running { pass, .. } => Some(pass.finish(capture)).filter(|h| !h.hops.is_empty()),
        LazyHops::Lost(why) => {
            findings.push(hops_lost(why));
            None
        }
    };
    if let Some(h) = &hops {
        findings.extend(h.findings.iter().cloned());
    }
    Ok(Analysis {
        stats,
        dcqcn,
        pauses,
        findings,
        hops,
        recorded,
        fabric,
    })
}

/// Passes that take every frame's [`Brief`] in the capture's order, whatever the threads: beside the loop
/// that decodes ([`beside`]) or on the tail of the spread read ([`spread`]). The DCQCN model's pairing and
/// rate grid span every flow, so they cannot be split by flow as `Stats` is.
pub trait InOrder: Send {
    /// The next frame of the capture.
    fn brief(&mut self, b: &Brief);
}

impl InOrder for DcqcnPass {
    #[inline]
    fn brief(&mut self, b: &Brief) {
        self.frame(b);
    }
}

/// What a read counts of each frame, which can be split by flow: on the loop it sees every frame; in a
/// spread read each owner sees the frames of its own flows (records without a flow go to the first) and the
/// first owner also every record's size and time in order, and the owners' counts are then joined.
pub trait Counts: Send + Sized {
    /// Every frame, on the loop.
    fn frame(&mut self, f: &Frame<'_>);
    /// An owner's own frame, in a spread read.
    fn owned_frame(&mut self, f: &Frame<'_>);
    /// Every record of a chunk in order, on the first owner of a spread read.
    fn records(&mut self, batch: &RecordBatch);
    /// Joins another owner's counts, whose flows no other owner held.
    fn absorb(&mut self, other: Self);
}

impl Counts for Stats {
    #[inline]
    fn frame(&mut self, f: &Frame<'_>) {
        Stats::frame(self, f);
    }
    #[inline]
    fn owned_frame(&mut self, f: &Frame<'_>) {
        Stats::owned_frame(self, f);
    }
    fn records(&mut self, batch: &RecordBatch) {
        Stats::records(self, batch);
    }
    fn absorb(&mut self, other: Self) {
        Stats::absorb(self, other);
    }
}

/// How one read runs: the decoder, the threads, and the hops pass's options when the command looks at hops.
struct Reading<'a> {
    decoder: Decoder,
    threads: usize,
    hops: Option<&'a hops::HopsOptions>,
}

/// The counts `make` makes and `passes` from one read of `capture` on `threads` threads, the same whatever
/// their number: the read `report` makes, without the hops pass, for the commands that need part of what it
/// gives (`dcqcn`, `fabric`). `progress` hears the bytes read so far, every 65,536 frames.
pub fn read_with<C: Counts, P: InOrder>(
    capture: &mut Capture,
    decoder: Decoder,
    threads: usize,
    make: impl Fn() -> C,
    passes: P,
    progress: impl FnMut(u64),
) -> (C, P) {
    let how = Reading {
        decoder,
        threads,
        hops: None,
    };
    let (counts, passes, _) = read(capture, &how, make, passes, progress);
    (counts, passes)
}

/// Every frame to the counts `make` makes, to `passes` and to the hops pass (when `how` asks for it). On
/// three threads or more, and inputs that can be read twice, the read is spread over them ([`spread`]);
/// else it is the loop below, with `passes` on a second thread when there is one ([`beside`]).
///
/// Two threads keep the loop: on the bench's capture (two cores) `report` took 1.43 s with the passes
/// beside it, 1.70 s spread over one owner and the tail, and 1.73 to 1.84 s on one thread (BENCHMARKS.md).
/// The spread read pays for a thread that copies every record into chunks, and one owner does not win that
/// back.
fn read<C: Counts, P: InOrder>(
    capture: &mut Capture,
    how: &Reading<'_>,
    make: impl Fn() -> C,
    passes: P,
    mut progress: impl FnMut(u64),
) -> (C, P, LazyHops) {
    if how.threads > 2 && capture.rereadable() {
        return spread::read(capture, how, make, passes, progress);
    }
    let mut stats = make();
    let mut hops = LazyHops::new(capture, how.hops);
    let passes = std::thread::scope(|scope| {
        let mut beside = beside::Beside::start(scope, passes, how.threads <= 1);
        let mut frames = Frames::new(capture, how.decoder);
        let mut number = 0u64;
        let mut paused_at = 0u64;
        // The loop pauses every 65,536 frames for the progress bar, and whenever the hops pass must look at
        // the capture's taps; the frames stay where they were decoded (see `Frames::for_each`).
        while frames.for_each_until(|f| {
            stats.frame(f);
            beside.frame(f);
            number += 1;
            paused_at = f.number;
            hops.frame(f) | number.is_multiple_of(65_536)
        }) {
            hops.between(frames.capture(), paused_at, how.decoder);
            if number.is_multiple_of(65_536) {
                progress(frames.capture().progress().0);
            }
        }
        beside.finish()
    });
    (stats, passes, hops)
}

/// Returns the heap's free pages to the system between reading and the analyses that follow it.
///
/// Reading allocates and frees in many small pieces (each flow's rate bins grow, and shrink as the grid
/// widens), and glibc keeps what was freed in the middle of its heap resident. The analyses after reading
/// then make their largest transient (the pairing's evidence, about 70 MB on the saturation benchmark) in
/// fresh pages on top of it. On that benchmark the resident memory at the end of reading was half again
/// what was live, and more the longer the capture: the peak was 157, 169 and 181 MB for 15, 30 and 60 s,
/// and is 157, 162 and 152 MB with the free pages given back. Process-wide and glibc's only; elsewhere it
/// does nothing. The analyzer binary allocates with mimalloc, told to give freed pages back at once
/// (analyzer/src/main.rs): this is for programs that use the library with glibc's allocator.
fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only hands free memory back to the system; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The hops pass, started only once a frame shows up at a second tap.
///
/// A hop is a packet seen at two taps, so a capture of one tap (one file, or a rotated set whose files
/// continue one another's taps) has none; yet the pass would hold every packet for its match window, a
/// sixth of `report`'s time on the benchmark capture. A capture's taps are known only as its files open, so
/// the pass waits: at the first frame of another tap it reads the capture again from its start up to that
/// frame ([`Capture::reopen`]) and then takes the frames of the main loop, so it sees every frame in order,
/// exactly as if it had run from the start. Inputs that cannot be read twice (standard input) get the pass
/// from the first frame.
enum LazyHops {
    /// Every frame so far was at `tap` (`None` before the first) until `second` says one was not; the
    /// options the pass will start with.
    Waiting {
        tap: Option<u32>,
        second: bool,
        opts: hops::HopsOptions,
    },
    /// The pass, and how many taps it has learnt (a frame at a tap beyond them pauses the loop to learn).
    Running {
        pass: Box<hops::HopsPass>,
        known_taps: usize,
    },
    /// The capture could not be read again: why.
    Lost(String),
    /// The command does not look at hops.
    Off,
}

impl LazyHops {
    fn new(capture: &Capture, opts: Option<&hops::HopsOptions>) -> Self {
        let Some(opts) = opts else {
            return LazyHops::Off;
        };
        if capture.rereadable() {
            LazyHops::Waiting {
                tap: None,
                second: false,
                opts: opts.clone(),
            }
        } else {
            LazyHops::Running {
                pass: Box::new(hops::HopsPass::new(opts.clone())),
                known_taps: 0,
            }
        }
    }

    /// One frame; true when the loop must pause and call [`LazyHops::between`] before the next.
    #[inline]
    fn frame(&mut self, f: &roce_core::decode::Frame<'_>) -> bool {
        match self {
            LazyHops::Waiting { tap, second, .. } => {
                *second = *tap.get_or_insert(f.iface) != f.iface;
                *second
            }
            LazyHops::Running { pass, known_taps } => {
                pass.frame(f);
                f.iface as usize >= *known_taps
            }
            LazyHops::Lost(_) | LazyHops::Off => false,
        }
    }

    /// At a pause after frame `number`: starts the pass when that frame was at a second tap, and learns the
    /// taps' files (which the pass needs before the copies of a new tap close).
    fn between(&mut self, capture: &Capture, number: u64, decoder: Decoder) {
        match self {
            LazyHops::Waiting { second, opts, .. } => {
                if !*second {
                    return;
                }
                *self = match Self::catch_up(capture, number, decoder, opts.clone()) {
                    Ok(mut pass) => {
                        pass.learn_taps(capture);
                        LazyHops::Running {
                            pass: Box::new(pass),
                            known_taps: capture.taps().len(),
                        }
                    }
                    Err(why) => LazyHops::Lost(why),
                };
            }
            LazyHops::Running { pass, known_taps } => {
                pass.learn_taps(capture);
                *known_taps = capture.taps().len();
            }
            LazyHops::Lost(_) | LazyHops::Off => {}
        }
    }

    /// A pass fed the frames of the capture read again, up to frame `number` included.
    fn catch_up(
        capture: &Capture,
        number: u64,
        decoder: Decoder,
        opts: hops::HopsOptions,
    ) -> Result<hops::HopsPass, String> {
        let mut again = match capture.reopen() {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("the inputs cannot be read twice".to_owned()),
        };
        let mut pass = hops::HopsPass::new(opts);
        let mut frames = Frames::new(&mut again, decoder);
        while let Some(f) = frames.next_frame() {
            let n = f.number;
            pass.frame(&f);
            pass.learn_taps(frames.capture());
            if n >= number {
                return Ok(pass);
            }
        }
        Err(format!(
            "the capture ended before frame {number} when read again: did a file change?"
        ))
    }
}

/// The finding that says the hops were not analysed, and why.
fn hops_lost(why: String) -> Finding {
    Finding {
        code: "hops_not_analysed",
        severity: findings::Severity::Warning,
        title: "The hops between taps were not analysed: the capture could not be read again"
            .to_owned(),
        detail:
            "The hops pass starts when a frame shows up at a second tap and then reads the capture \
                 again from its start up to that frame; that second read failed."
                .to_owned(),
        evidence: vec![why],
    }
}

/// The one rule for something seen at several taps (a flow mirrored at both ends of a link, a CNP stream, a
/// pause): it is counted once, at the tap that saw most of it, the lowest tap index on a tie. The key that
/// rule maximises over (tap, how much it saw) pairs.
pub fn tap_preference(iface: u32, seen: u64) -> (u64, std::cmp::Reverse<u32>) {
    (seen, std::cmp::Reverse(iface))
}

/// A tap's name (`FILE:IFACE`) by its index over the capture.
pub fn tap_name(capture: &Capture, iface: u32) -> String {
    capture
        .taps()
        .get(iface as usize)
        .map(|t| t.name.clone())
        .unwrap_or_default()
}
