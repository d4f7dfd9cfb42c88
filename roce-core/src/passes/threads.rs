//! `stats`' passes over several threads: the reading thread cuts the capture into chunks, each thread decodes
//! the records of the flows it owns ([`crate::fanout`]) and folds them into passes of its own, which are
//! joined at the end, and the first also counts what every record says in order (the capture's span, its
//! gaps). A flow's state sees
//! its frames in capture order on one thread, and the tables are sorted by their keys, so the output is the
//! same bytes whatever the number of threads.

use roce_capture::Capture;

use super::Stats;
use crate::decode::{Decoder, Frame};
use crate::fanout;
use crate::frames::Frames;
use crate::shard::{Grouping, Sharder};

impl Stats {
    /// The part of a frame a thread that owns its flow folds: everything but the record's size and time.
    fn owned_frame(&mut self, f: &Frame<'_>) {
        self.capture.kind(f);
        self.flows.frame(f);
        self.cnps.frame(f);
        self.pfc.frame(f);
    }

    /// Joins a thread's passes, whose keys no other thread held, to these.
    fn absorb(&mut self, other: Stats) {
        self.capture.absorb_kinds(&other.capture);
        self.flows.absorb(other.flows);
        self.cnps.absorb(other.cnps);
        self.pfc.absorb(other.pfc);
    }
}

/// Every frame of `capture` through the passes `make` builds, on `threads` threads: one reads, the others
/// decode and fold (with one, the single loop of [`Frames`]). Returns the joined passes, to finish as usual.
pub fn stats_on_threads(
    capture: &mut Capture,
    decoder: Decoder,
    threads: usize,
    make: impl Fn() -> Stats,
) -> Stats {
    if threads <= 1 {
        let mut stats = make();
        Frames::new(capture, decoder).for_each(|f| stats.frame(f));
        return stats;
    }
    let sharder = Sharder::new(threads, Grouping::Flow, decoder);
    let mut owners = fanout::run(
        capture,
        decoder,
        sharder,
        (0..threads).map(|_| make()).collect(),
        |s: &mut Stats, batch| {
            for (number, rec) in batch.iter() {
                s.capture.record(number, rec.ts_ns, rec.len, rec.caplen);
            }
        },
        |s: &mut Stats, f| s.owned_frame(f),
    )
    .into_iter();
    // The first owner counted every record in order; the others' keys are joined to its own.
    let Some(mut stats) = owners.next() else {
        return make();
    };
    for o in owners {
        stats.absorb(o);
    }
    stats
}
