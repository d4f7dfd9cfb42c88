//! The report's read on three threads or more: the threads that own the flows decode them and count them
//! (`Stats`), and one thread, the tail, takes what the DCQCN and hosts passes read of every frame in the
//! capture's order. Of `--threads N`, N - 1 own flows and one is the tail; the thread that cuts the
//! capture into chunks comes on top, as for `stats`.
//!
//! The DCQCN pass cannot be split by flow as `Stats` is: its rate grid is shared by every flow (its start
//! is the first frame's time, and it widens when all flows together hold too many bins), and the pairing
//! compares streams of different flows. So each owner puts the [`Brief`] of each frame it decoded, with
//! the frame's place in its chunk, into a list per chunk, and the tail merges the owners' lists of each
//! chunk back into the capture's order: the passes see exactly the frames, in exactly the order, one
//! thread would have given them, and each frame is still decoded once.
//!
//! The hops pass, which needs whole frames in order and starts only when a frame shows up at a second tap
//! ([`super::LazyHops`]), runs at that moment on a thread of its own over the capture opened again from its
//! start: the same frames in the same order as the single loop gives it. Only inputs that can be read
//! twice go this way ([`super::read`] keeps standard input on one thread).

use roce_capture::{Capture, RecordBatch};
use roce_core::decode::{Decoder, Frame};
use roce_core::fanout::{self, Owner};
use roce_core::frames::Frames;
use roce_core::passes::brief::Brief;
use roce_core::shard::{Grouping, Sharder};

use super::{Counts, InOrder, LazyHops, Reading, hops};

/// One owner's share: its flows' counts, and the briefs of its frames of the current chunk.
struct Share<C> {
    stats: C,
    briefs: Vec<(u32, Brief)>,
}

impl<C: Counts> Owner for Share<C> {
    type Out = Vec<(u32, Brief)>;

    fn whole(&mut self, batch: &RecordBatch) {
        self.stats.records(batch);
    }

    #[inline]
    fn frame(&mut self, index: usize, f: &Frame<'_>) {
        self.stats.owned_frame(f);
        self.briefs.push((index as u32, Brief::of(f)));
    }

    fn chunk_done(&mut self) -> Self::Out {
        std::mem::take(&mut self.briefs)
    }
}

/// The read of [`super::read`] on `how.threads` threads, and the tail's: the same `Stats`, passes and hops
/// pass as the single loop's.
pub(super) fn read<C: Counts, P: InOrder>(
    capture: &mut Capture,
    how: &Reading<'_>,
    make: impl Fn() -> C,
    passes: P,
    mut progress: impl FnMut(u64),
) -> (C, P, LazyHops) {
    // The tail works as hard as an owner, so it counts among the N threads: N - 1 owners. The reading
    // thread, which only cuts chunks, is on top, as for `stats`.
    let threads = how.threads.saturating_sub(1).max(1);
    let mut passes = passes;
    let mut tail = |chunk: Vec<Vec<(u32, Brief)>>| merged(&chunk, &mut passes);
    let mut read_so_far = 0usize;
    let shares = std::thread::scope(|scope| {
        let mut hops = match how.hops {
            Some(_) => Started::Not { tap: None },
            None => Started::Off,
        };
        let shares: Vec<Share<C>> = (0..threads)
            .map(|_| Share {
                stats: make(),
                briefs: Vec::new(),
            })
            .collect();
        let shares = fanout::run(
            capture,
            how.decoder,
            Sharder::new(threads, Grouping::Flow, how.decoder),
            shares,
            Some(&mut tail),
            |capture, batch| {
                hops.look(scope, capture, batch, how);
                let before = read_so_far;
                read_so_far += batch.len();
                if before / 65_536 != read_so_far / 65_536 {
                    progress(capture.progress().0);
                }
            },
        );
        (shares, hops.finish())
    });
    let (shares, hops) = shares;
    let mut shares = shares.into_iter();
    let Some(first) = shares.next() else {
        return (make(), passes, hops);
    };
    // The first owner counted every record in order; the others' flows are joined to its own.
    let mut stats = first.stats;
    for s in shares {
        stats.absorb(s.stats);
    }
    (stats, passes, hops)
}

/// Every owner's briefs of one chunk to the passes in the capture's order. Each brief carries its place in
/// the chunk and no two share one, so each is put straight into its place: the tail's work per frame stays
/// the same however many owners there are (it is the part of the read that does not spread).
fn merged<P: InOrder>(chunk: &[Vec<(u32, Brief)>], passes: &mut P) {
    let places = chunk
        .iter()
        .filter_map(|list| list.last().map(|&(index, _)| index as usize + 1))
        .max()
        .unwrap_or(0);
    let mut in_order: Vec<Option<&Brief>> = vec![None; places];
    for (index, brief) in chunk.iter().flatten() {
        in_order[*index as usize] = Some(brief);
    }
    for brief in in_order.into_iter().flatten() {
        passes.brief(brief);
    }
}

/// The hops pass: not started while every record was at one tap; then a thread reading the capture again.
/// `Off` for a command that does not look at hops.
enum Started<'scope> {
    Off,
    Not { tap: Option<u32> },
    Running(std::thread::ScopedJoinHandle<'scope, hops::HopsPass>),
    Lost(String),
}

impl<'scope> Started<'scope> {
    /// After a chunk is read: starts the pass at its first record at a second tap.
    fn look<'env>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        capture: &Capture,
        batch: &RecordBatch,
        how: &Reading<'_>,
    ) {
        let (Started::Not { tap }, Some(opts)) = (&mut *self, how.hops) else {
            return;
        };
        let second = batch
            .iter()
            .any(|(_, rec)| *tap.get_or_insert(rec.iface) != rec.iface);
        if !second {
            return;
        }
        *self = match capture.reopen() {
            Some(Ok(again)) => {
                let (decoder, hops) = (how.decoder, opts.clone());
                Started::Running(scope.spawn(move || whole_pass(again, decoder, hops)))
            }
            Some(Err(e)) => Started::Lost(e.to_string()),
            None => Started::Lost("the inputs cannot be read twice".to_owned()),
        };
    }

    /// The pass as [`super::LazyHops`] holds it after a read.
    fn finish(self) -> LazyHops {
        match self {
            Started::Off => LazyHops::Off,
            Started::Not { .. } => LazyHops::Waiting {
                tap: None,
                second: false,
                opts: hops::HopsOptions::default(),
            },
            Started::Running(handle) => LazyHops::Running {
                pass: Box::new(
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                ),
                known_taps: 0,
            },
            Started::Lost(why) => LazyHops::Lost(why),
        }
    }
}

/// The hops pass over every frame of `capture`, learning each tap's file at its first frame, as the single
/// loop does.
fn whole_pass(mut capture: Capture, decoder: Decoder, opts: hops::HopsOptions) -> hops::HopsPass {
    let mut pass = hops::HopsPass::new(opts);
    let mut known = 0usize;
    let mut frames = Frames::new(&mut capture, decoder);
    while frames.for_each_until(|f| {
        pass.frame(f);
        f.iface as usize >= known
    }) {
        pass.learn_taps(frames.capture());
        known = frames.capture().taps().len();
    }
    pass
}
