//! `stats`' passes over several threads: the reading thread counts what every record says in order (the
//! capture's span, its gaps), and each other thread decodes the records of the flows it owns
//! ([`crate::fanout`]) and folds them into passes of its own, which are joined at the end. A flow's state sees
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
        let psn = self.flows.observe(f);
        self.nic_side.frame(f, psn);
        self.cnps.frame(f);
        self.pfc.frame(f);
    }

    /// Joins a thread's passes, whose keys no other thread held, to these.
    fn absorb(&mut self, other: Stats) {
        self.capture.absorb_kinds(&other.capture);
        self.flows.absorb(other.flows);
        self.cnps.absorb(other.cnps);
        self.pfc.absorb(other.pfc);
        self.nic_side.absorb(other.nic_side);
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
    let mut stats = make();
    if threads <= 1 {
        Frames::new(capture, decoder).for_each(|f| stats.frame(f));
        return stats;
    }
    let sharder = Sharder::new(threads, Grouping::Flow, decoder);
    let owners = fanout::run(
        capture,
        decoder,
        sharder,
        (0..threads).map(|_| make()).collect(),
        |number, rec| stats.capture.record(number, rec.ts_ns, rec.len, rec.caplen),
        |s: &mut Stats, f| s.owned_frame(f),
    );
    for o in owners {
        stats.absorb(o);
    }
    stats
}
