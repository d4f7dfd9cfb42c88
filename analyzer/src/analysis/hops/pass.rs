//! The pass and its two entry points: [`HopsPass`], fed one frame at a time by a loop that runs other passes
//! too, and [`run`], which reads a whole capture on the threads it is given.

use roce_capture::{Capture, RecordBatch};
use roce_core::decode::{Decoder, Frame};
use roce_core::frames::Frames;
use roce_core::ordered;

use super::HopsOptions;
use super::findings::findings;
use super::groups::Core;
use super::matching::{self, Copy, Matcher, Seen};
use super::queues;
use super::report::{HopReport, HopsReport};
use super::taps::{Side, Taps, new_taps};

/// The streaming pass: hand it every frame of the capture, in order.
#[derive(Debug)]
pub struct HopsPass {
    matcher: Matcher,
    /// The last copy, not yet added to `matcher`: (key, its digest, copy).
    waiting: Option<(matching::Key, u64, Copy)>,
    core: Core,
    side: Side,
}

impl HopsPass {
    /// A pass with these options; the taps' files are learnt as the capture is read ([`HopsPass::learn_taps`]).
    pub fn new(opts: HopsOptions) -> Self {
        HopsPass {
            matcher: Matcher::new(opts.match_window_ns),
            waiting: None,
            side: Side::new(opts.np_min_gap_ns),
            core: Core::new(opts),
        }
    }

    /// Learns the files of taps that appeared since the last call (taps of one file share a clock). Call
    /// it after each frame: a tap's file is needed only once its first copies close, later.
    #[inline]
    pub fn learn_taps(&mut self, capture: &Capture) {
        let taps = capture.taps();
        if taps.len() != self.core.taps.known() {
            self.core.taps = Taps::of(taps);
        }
    }

    /// One frame. Its tap's file must be known ([`HopsPass::learn_taps`]) before its copies close.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.seen(Seen::of(f));
    }

    /// One frame, as [`Seen::of`] cut it out.
    #[inline]
    fn seen(&mut self, mut s: Seen) {
        self.side.seen(&mut s);
        self.matched(&s);
    }

    /// The matching part of [`HopsPass::seen`].
    #[inline]
    fn matched(&mut self, s: &Seen) {
        let tap = s.copy.tap as usize;
        let ts = s.copy.ts;
        let start = *self.core.start_ns.get_or_insert(ts);
        let segment = self.core.opts.segment_ns();
        let Some(key) = s.key else {
            return;
        };
        let copy = s.copy;
        if tap >= self.core.spans.len() {
            self.core.spans.resize(tap + 1, (u64::MAX, 0));
        }
        let span = &mut self.core.spans[tap];
        span.0 = span.0.min(ts);
        span.1 = span.1.max(ts);
        let core = &mut self.core;
        if core.learn_until.is_none() {
            core.learn_until = Some(start.saturating_add(segment));
        }
        // This frame's copy joins the matcher at the next frame, its table entry fetched meanwhile; the groups
        // its window closes close now, as if it had joined.
        let digest = s.digest;
        self.matcher.prefetch(digest);
        if let Some((k, d, c)) = self.waiting.replace((key, digest, copy)) {
            self.matcher.add_digested(k, d, c, |g| core.group(g));
        }
        let now = ts.saturating_sub(core.opts.match_window_ns);
        self.matcher.close_before(now, &mut |g| core.group(g));
        if core.learning.is_some() && core.learn_until.is_some_and(|t| now >= t) {
            core.end_learning();
        }
        if core.learning.is_none() {
            let next = *core
                .next_flush
                .get_or_insert(start.saturating_add(2 * segment));
            if now >= next {
                core.flush(now.saturating_sub(segment));
                core.next_flush = Some(now.saturating_add(segment));
            }
        }
    }

    /// Closes every window and computes the report. `capture` names the taps and gives their drop counters.
    pub fn finish(mut self, capture: &Capture) -> HopsReport {
        let core = &mut self.core;
        if let Some((k, d, c)) = self.waiting.take() {
            self.matcher.add_digested(k, d, c, |g| core.group(g));
        }
        self.matcher.close_all(&mut |g| core.group(g));
        if core.learning.is_some() {
            core.end_learning();
        }
        core.flush(u64::MAX);
        let name = |i: u32| crate::analysis::tap_name(capture, i);
        let taps = self.side.tap_reports(capture);
        let opts = core.opts.clone();
        let mut accs = std::mem::take(&mut core.hops);
        accs.sort_unstable_by_key(|h| (h.from, h.to));
        let hops: Vec<HopReport> = accs
            .into_iter()
            .filter(|h| h.matched > 0)
            .map(|h| h.report(&taps, &name))
            .collect();
        let pauses = std::mem::take(&mut self.side.pauses);
        let queues = queues::reports(
            std::mem::take(&mut core.queues),
            &self.side.rates,
            |tap| core.line_bps(tap),
            &opts,
            &pauses,
            &name,
        );
        let findings = findings(&hops, &queues, &opts);
        let np = self.side.np.finish(name, opts.np_min_gap_ns);
        HopsReport {
            taps,
            hops,
            queues,
            np,
            findings,
            match_window_ns: opts.match_window_ns,
            peak_in_flight: self.matcher.peak_open,
            copies_left_out: self.matcher.overflow,
            start_ns: core.start_ns.unwrap_or(0),
        }
    }
}

/// How many frames ahead of the one it handles [`HopsPass::feed`] fetches the table entry of a frame's key,
/// and (fewer, once that entry is in the cache) the group it points to.
const PREFETCH_TABLE: usize = 16;
const PREFETCH_GROUP: usize = 8;

impl HopsPass {
    /// Matches frames in capture order (their [`Side`] was kept as they were read), the table entries and
    /// groups their copies go to fetched from memory a few frames ahead: waiting on them was most of the
    /// pass's time once it no longer decoded between frames.
    fn feed(&mut self, batch: &[Seen]) {
        for (i, s) in batch.iter().enumerate() {
            if let Some(a) = batch.get(i + PREFETCH_TABLE)
                && a.key.is_some()
            {
                self.matcher.prefetch(a.digest);
            }
            if let Some(a) = batch.get(i + PREFETCH_GROUP)
                && a.key.is_some()
            {
                self.matcher.prefetch_group(a.digest);
            }
            self.matched(s);
        }
    }
}

/// Runs the pass over a whole capture on as many threads as the cores this process may use.
pub fn run(capture: &mut Capture, decoder: Decoder, opts: HopsOptions) -> HopsReport {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    run_on(capture, decoder, opts, cores)
}

/// Runs the pass over a whole capture on `threads`: a thread cuts the capture into chunks, `threads - 1`
/// workers decode them and cut their frames down to [`Seen`]s, a chunk each ([`roce_core::ordered`]), and
/// this thread keeps the [`Side`] and matches, chunk after chunk in the capture's order. Decoding spreads
/// over the workers; what stays on one thread is what needs the order. On one thread, the frames are
/// decoded where the reader holds them ([`on_this_thread`]). The pass sees the same frames in the same order
/// either way, so the report is the same bytes.
pub fn run_on(
    capture: &mut Capture,
    decoder: Decoder,
    opts: HopsOptions,
    threads: usize,
) -> HopsReport {
    // Matching keys on the ICRC the frame carries, never on whether it is right: no CRC over every frame.
    let decoder = Decoder {
        check_icrc: false,
        ..decoder
    };
    let mut pass = HopsPass::new(opts);
    let mut known = 0;
    let note = move |capture: &Capture, _: &RecordBatch| new_taps(capture, &mut known);
    let make = |batch: &RecordBatch, _: &Option<Taps>, seen: &mut Vec<Seen>| {
        seen.clear();
        // Each frame is cut down where it was decoded: moving it (360 bytes) out of `Frames::next_frame`
        // cost a tenth of the pass's time.
        roce_core::frames::for_each_in(batch, decoder, |f| seen.push(Seen::of(f)));
    };
    if threads <= 1 {
        return on_this_thread(capture, decoder, pass).finish(capture);
    }
    let taken = ordered::run(capture, threads - 1, note, make, |chunk| {
        if let Some(taps) = chunk.note.take() {
            pass.core.taps = taps;
        }
        for s in &mut chunk.made {
            pass.side.seen(s);
        }
        pass.feed(&chunk.made);
        Ok::<(), std::convert::Infallible>(())
    });
    match taken {
        Ok(()) => pass.finish(capture),
        Err(never) => match never {},
    }
}

/// Frames cut down to [`Seen`]s and matched in batches of this many on one thread.
const BATCH: usize = 1024;

/// [`run_on`] on one thread: each frame cut down where the reader decoded it, without copying its record
/// into a chunk first (which the threads need, and which cost one thread a twentieth of its time).
fn on_this_thread(capture: &mut Capture, decoder: Decoder, mut pass: HopsPass) -> HopsPass {
    let mut frames = Frames::new(capture, decoder);
    let mut batch = Vec::with_capacity(BATCH);
    let mut known = 0;
    loop {
        frames.for_each_until(|f| {
            let mut s = Seen::of(f);
            pass.side.seen(&mut s);
            batch.push(s);
            batch.len() >= BATCH
        });
        if batch.is_empty() {
            return pass;
        }
        if let Some(taps) = new_taps(frames.capture(), &mut known) {
            pass.core.taps = taps;
        }
        pass.feed(&batch);
        batch.clear();
    }
}
