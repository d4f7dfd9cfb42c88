//! `dcqcn`'s read: the DCQCN pass and the PFC pauses, on any number of threads
//! ([`crate::analysis::read_with`]).

use roce_capture::{Capture, RecordBatch};
use roce_core::decode::{Decoder, Frame};
use roce_core::passes::pfc::{PauseInterval, PfcPass};

use super::{DcqcnPass, Options};
use crate::analysis::{Counts, read_with};

/// What `dcqcn` counts beside its pass: the PFC/PAUSE intervals (the model is compared with the observed rate
/// outside them only), and the last frame's time, where the pauses still running at the end close. Nothing
/// more: on the loop this is all the decoding thread does besides decoding, so `dcqcn` does not pay for the
/// tables of `stats` it does not print.
struct Pauses {
    pfc: PfcPass,
    last_ns: u64,
}

impl Counts for Pauses {
    #[inline]
    fn frame(&mut self, f: &Frame<'_>) {
        self.pfc.frame(f);
        self.last_ns = self.last_ns.max(f.ts_ns);
    }

    #[inline]
    fn owned_frame(&mut self, f: &Frame<'_>) {
        // PFC and PAUSE frames have no flow: they all go to the first owner, in order.
        self.pfc.frame(f);
    }

    fn records(&mut self, batch: &RecordBatch) {
        for (_, rec) in batch.iter() {
            self.last_ns = self.last_ns.max(rec.ts_ns);
        }
    }

    fn absorb(&mut self, other: Self) {
        self.pfc.absorb(other.pfc);
        self.last_ns = self.last_ns.max(other.last_ns);
    }
}

/// The DCQCN pass fed every frame of `capture` in order, and every PFC/PAUSE interval, read on `threads`
/// threads: the same whatever their number. `progress` hears the bytes read so far.
pub fn read(
    capture: &mut Capture,
    decoder: Decoder,
    threads: usize,
    opts: &Options,
    progress: impl FnMut(u64),
) -> (DcqcnPass, Vec<PauseInterval>) {
    let make = || Pauses {
        pfc: PfcPass::new(opts.lines),
        last_ns: 0,
    };
    let pass = DcqcnPass::new(opts.bin_ns, opts.lines);
    let (pauses, pass) = read_with(capture, decoder, threads, make, pass, progress);
    (pass, pauses.pfc.finish_with_intervals(pauses.last_ns).1)
}
