//! `stats`' passes over several threads: the reading thread cuts the capture into chunks, each thread decodes
//! the records of the flows it owns ([`crate::fanout`]) and folds them into passes of its own, which are
//! joined at the end, and the first also counts what every record says in order (the capture's span, its
//! gaps). A flow's state sees
//! its frames in capture order on one thread, and the tables are sorted by their keys, so the output is the
//! same bytes whatever the number of threads.

use roce_capture::{Capture, RecordBatch};

use super::Stats;
use crate::decode::{Decoder, Frame};
use crate::fanout::{self, Owner};
use crate::frames::Frames;
use crate::shard::{Grouping, Sharder};

impl Stats {
    /// The part of a frame a thread that owns its flow folds: everything but the record's size and time.
    #[inline]
    pub fn owned_frame(&mut self, f: &Frame<'_>) {
        self.capture.kind(f);
        let psn = self.flows.observe(f);
        self.nic_side.frame(f, psn);
        self.cnps.frame(f);
        self.pfc.frame(f);
    }

    /// What every record says in order (its size and time: the capture's span, its gaps), for the owner
    /// that is handed every chunk whole.
    pub fn records(&mut self, batch: &RecordBatch) {
        for (number, rec) in batch.iter() {
            self.capture.record(number, rec.ts_ns, rec.len, rec.caplen);
        }
    }

    /// Joins a thread's passes, whose keys no other thread held, to these.
    pub fn absorb(&mut self, other: Stats) {
        self.capture.absorb_kinds(&other.capture);
        self.flows.absorb(other.flows);
        self.cnps.absorb(other.cnps);
        self.pfc.absorb(other.pfc);
        self.nic_side.absorb(other.nic_side);
    }
}

impl Owner for Stats {
    type Out = ();

    fn whole(&mut self, batch: &RecordBatch) {
        self.records(batch);
    }

    #[inline]
    fn frame(&mut self, _index: usize, f: &Frame<'_>) {
        self.owned_frame(f);
    }

    fn chunk_done(&mut self) {}
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
    let states = (0..threads).map(|_| make()).collect();
    let mut owners = fanout::run(capture, decoder, sharder, states, None, |_, _| {}).into_iter();
    // The first owner counted every record in order; the others' keys are joined to its own.
    let Some(mut stats) = owners.next() else {
        return make();
    };
    for o in owners {
        stats.absorb(o);
    }
    stats
}
