//! Frames of several sources (the eBPF engine's rings, one per CPU) merged into one stream in timestamp
//! order, with a bounded wait.
//!
//! Each source delivers its frames in batches, in the order it holds them, which is nearly time order:
//! within a CPU's ring a frame stamped by the stack on receive can follow one the probe stamped a little
//! later. Across sources nothing is ordered, and a source that has nothing to say may simply be idle or
//! may be a reader that has not come round to it yet. So a frame is written only once no source can still
//! deliver an earlier one, as far as each source's *mark* tells: a source's mark is the reading it last
//! reported of when it was found empty ([`SourceBatch::caught_up_at`]), or the newest timestamp it
//! delivered, whichever is later, less the [`Merge::window`]. The window is the bound on disorder: a frame
//! stamped more than the window before its source's mark can arrive after later frames were written. Such
//! a frame is still written, at once, and counted as late ([`Merge::late`]) rather than put in a wrong
//! place silently.
//!
//! A single source comes out in its own order wherever that order is by time, so a one-ring capture is
//! written as before.
//!
//! Memory is bounded too: a source that says nothing for long (its reader starved of CPU) would make the
//! merge hold every other source's frames meanwhile, so past [`HELD`] frames the earliest go out without
//! waiting for it; what it delivers later than them is then late, and counted.

use std::collections::VecDeque;

use crate::engine::{Captured, SourceBatch};

/// How far out of order a source's frames may be and still be written in order, ns: the default of
/// [`Merge::new`]. A frame's receive stamp is taken when the kernel first sees it and the probe runs when
/// the stack reaches it, after any backlog queue: on a busy host, a thousand frames of backlog at a million
/// frames a second is a millisecond. Ten milliseconds covers that with room, and costs that much latency
/// and that many frames of memory before a frame is written.
pub const WINDOW_NS: u64 = 10_000_000;

/// How many frames the merge holds at most before it writes the earliest without waiting: about a hundred
/// megabytes of header copies, a third of a second at 3 M frames/s.
pub const HELD: usize = 1 << 20;

#[derive(Debug, Default)]
struct Source {
    /// Frames not yet written, in timestamp order (stable: equal stamps keep their arrival order).
    pending: VecDeque<Captured>,
    /// No frame this source delivers from now on is earlier than this, within the window.
    mark: u64,
    /// Frames of this source written after a later frame.
    late: u64,
}

/// The merge (see the module documentation).
#[derive(Debug)]
pub struct Merge {
    sources: Vec<Source>,
    window: u64,
    /// The timestamp of the last frame handed out.
    last_out: u64,
    pending: usize,
    /// The least of the sources' marks: frames up to it may go. Marks move only when a batch comes in.
    wall: u64,
    /// Past this many frames held, the earliest go without waiting.
    held: usize,
}

impl Merge {
    /// A merge of `sources` sources with a window of `window` ns, holding at most `held` frames.
    pub fn new(sources: usize, window: u64, held: usize) -> Self {
        Merge {
            sources: (0..sources).map(|_| Source::default()).collect(),
            window,
            last_out: 0,
            pending: 0,
            wall: 0,
            held,
        }
    }

    /// The window, ns.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Takes a batch in. A source number beyond those given to [`Merge::new`] is taken as a new source
    /// (whose silence until now the merge could not wait for).
    pub fn push(&mut self, batch: SourceBatch) {
        let idx = batch.source as usize;
        if idx >= self.sources.len() {
            self.sources.resize_with(idx + 1, Source::default);
        }
        let Some(src) = self.sources.get_mut(idx) else {
            return;
        };
        let mut newest = 0;
        let mut in_order = true;
        let mut prev = src.pending.back().map_or(0, |f| f.ts_ns);
        for f in batch.frames {
            in_order &= f.ts_ns >= prev;
            prev = f.ts_ns;
            newest = newest.max(f.ts_ns);
            src.pending.push_back(f);
            self.pending += 1;
        }
        if !in_order {
            // Stable, and nearly sorted already: the sort finds the runs.
            src.pending.make_contiguous().sort_by_key(|f| f.ts_ns);
        }
        let reported = batch.caught_up_at.unwrap_or(0).max(newest);
        src.mark = src.mark.max(reported.saturating_sub(self.window));
        self.wall = self.sources.iter().map(|s| s.mark).min().unwrap_or(0);
    }

    /// The next frame that no source can still precede, if any; or the earliest, when too many are held.
    pub fn pop(&mut self) -> Option<Captured> {
        let wall = if self.pending > self.held {
            u64::MAX
        } else {
            self.wall
        };
        self.pop_up_to(wall)
    }

    /// The earliest frame held, whatever the sources may still deliver: for the end of the capture, once
    /// every source has finished.
    pub fn pop_any(&mut self) -> Option<Captured> {
        self.pop_up_to(u64::MAX)
    }

    fn pop_up_to(&mut self, wall: u64) -> Option<Captured> {
        let (idx, ts) = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.pending.front().map(|f| (i, f.ts_ns)))
            .min_by_key(|&(i, ts)| (ts, i))?;
        if ts > wall {
            return None;
        }
        let src = self.sources.get_mut(idx)?;
        let frame = src.pending.pop_front()?;
        self.pending -= 1;
        if frame.ts_ns < self.last_out {
            src.late += 1;
        } else {
            self.last_out = frame.ts_ns;
        }
        Some(frame)
    }

    /// Frames held, waiting for the sources' marks.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Frames written after a later one, per source: they arrived more than the window late.
    pub fn late(&self) -> Vec<u64> {
        self.sources.iter().map(|s| s.late).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ts: u64, tag: u8) -> Captured {
        Captured {
            iface: 0,
            ts_ns: ts,
            len: 60,
            data: vec![tag],
        }
    }

    fn batch(source: u32, stamps: &[u64], caught_up_at: Option<u64>) -> SourceBatch {
        SourceBatch {
            source,
            frames: stamps
                .iter()
                .enumerate()
                .map(|(i, &t)| frame(t, i as u8))
                .collect(),
            caught_up_at,
        }
    }

    fn drain(m: &mut Merge) -> Vec<u64> {
        std::iter::from_fn(|| m.pop()).map(|f| f.ts_ns).collect()
    }

    #[test]
    fn two_sources_interleave_by_time_once_both_have_spoken() {
        let mut m = Merge::new(2, 10, HELD);
        m.push(batch(0, &[100, 130, 160], None));
        // Source 1 has said nothing: it could still deliver anything.
        assert_eq!(drain(&mut m), Vec::<u64>::new());
        m.push(batch(1, &[110, 120, 200], None));
        // Marks: 160 - 10 and 200 - 10; nothing past 150 may go.
        assert_eq!(drain(&mut m), [100, 110, 120, 130]);
        // Source 0 found empty at 300: everything of source 1 up to 290 may go, and 160.
        m.push(batch(0, &[], Some(300)));
        assert_eq!(drain(&mut m), [160]);
        m.push(batch(1, &[], Some(300)));
        assert_eq!(drain(&mut m), [200]);
        assert_eq!(m.pending(), 0);
        assert_eq!(m.late(), [0, 0]);
    }

    #[test]
    fn disorder_within_the_window_is_sorted_and_beyond_it_counted() {
        let mut m = Merge::new(1, 50, HELD);
        m.push(batch(0, &[100, 90, 120, 110], Some(200)));
        assert_eq!(drain(&mut m), [90, 100, 110, 120]);
        // 140 went out; then a frame stamped 130 arrives: written, but late.
        m.push(batch(0, &[140], Some(200)));
        assert_eq!(drain(&mut m), [140]);
        m.push(batch(0, &[130, 150], Some(210)));
        assert_eq!(drain(&mut m), [130, 150]);
        assert_eq!(m.late(), [1]);
    }

    #[test]
    fn a_single_source_in_time_order_comes_out_as_it_went_in() {
        let mut m = Merge::new(1, 10, HELD);
        let stamps: Vec<u64> = (0..100).map(|i| 1000 + i / 3).collect();
        let mut b = batch(0, &stamps, Some(5000));
        // Equal stamps keep their order: tag them.
        for (i, f) in b.frames.iter_mut().enumerate() {
            f.data = vec![i as u8];
        }
        m.push(b);
        let tags: Vec<u8> = std::iter::from_fn(|| m.pop()).map(|f| f.data[0]).collect();
        assert_eq!(tags, (0..100).collect::<Vec<u8>>());
    }

    #[test]
    fn the_end_flushes_everything_in_order() {
        let mut m = Merge::new(3, 1_000, HELD);
        m.push(batch(0, &[5, 7], None));
        m.push(batch(2, &[6], None));
        assert_eq!(drain(&mut m), Vec::<u64>::new());
        let rest: Vec<u64> = std::iter::from_fn(|| m.pop_any())
            .map(|f| f.ts_ns)
            .collect();
        assert_eq!(rest, [5, 6, 7]);
    }

    #[test]
    fn an_unknown_source_joins_rather_than_panics() {
        let mut m = Merge::new(1, 0, HELD);
        m.push(batch(0, &[1], Some(10)));
        m.push(batch(4, &[2], Some(10)));
        // Sources 1-3 never spoke: the merge waits for them, until the end.
        assert_eq!(drain(&mut m), Vec::<u64>::new());
        assert_eq!(m.pending(), 2);
        assert_eq!(std::iter::from_fn(|| m.pop_any()).count(), 2);
    }

    #[test]
    fn a_silent_source_holds_no_more_than_the_limit() {
        let mut m = Merge::new(2, 10, 3);
        // Source 1 never speaks: up to three frames wait for it, the fourth pushes the earliest out.
        m.push(batch(0, &[100, 200, 300], Some(1000)));
        assert_eq!(drain(&mut m), Vec::<u64>::new());
        m.push(batch(0, &[400, 500], Some(1000)));
        assert_eq!(drain(&mut m), [100, 200]);
        assert_eq!(m.pending(), 3);
        // What the silent source delivers earlier than what went out is late.
        m.push(batch(1, &[150], Some(1000)));
        assert_eq!(drain(&mut m), [150, 300, 400, 500]);
        assert_eq!(m.late(), [0, 1]);
    }
}
