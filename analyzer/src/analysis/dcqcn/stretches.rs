//! The comparison of a flow's model with what the flow sent, over stretches long enough for the capture to
//! resolve its rate: whether the sender stayed under its modeled limit, and by how much the two differ, which
//! the fit minimises. Built as the model's events come, so that no replay keeps its events.

use super::report::Observed;
use super::window::Window;

/// Frames of the flow's size the model must allow in a stretch before the stretch is compared: below a few
/// frames per stretch the observed rate is quantised (one 4 KiB frame in a 10 µs bin reads 3.3 Gb/s whatever
/// the sender's rate), and a sender paced exactly at Rc would read as above it.
pub const RESOLVE_FRAMES: f64 = 8.0;

/// How far above the model's allowance a stretch's bytes must be to count as above it: Rc is a ceiling, and a
/// sender that obeys it stays under it except for the frame straddling the stretch's start (the allowance
/// adds one frame for it) and the jitter of the queues on the way to the tap.
pub const ABOVE_MODEL_FACTOR: f64 = 1.2;

/// Model versus observation over stretches the capture can resolve, built as the model's events come.
///
/// A stretch starts at a busy bin and runs over whole bins (idle ones included) until the model's Rc,
/// integrated over it, allows [`RESOLVE_FRAMES`] of the flow's frames; the next one starts at the next busy bin.
/// A stretch counts as above the model when the flow sent more than [`ABOVE_MODEL_FACTOR`] × that allowance
/// plus one frame: an obedient sender sends at most the allowance plus the frame it had started at the
/// stretch's start, whatever its rate, where a sender ignoring its CNPs sends far more at any rate. A sender
/// that has sent that much before the model allows the full count is above whatever follows, so its stretch
/// ends there (a model squeezed to a few Mb/s would otherwise take longer than the capture to allow it).
/// Stretches that hold a PFC-paused bin or end after a guard stop are left out, as bins are.
#[derive(Debug)]
pub(super) struct Stretches<'a> {
    observed: &'a [Observed],
    /// Which bins count; the flow's analysis learns where it ends only once the model has run.
    pub(super) window: Window,
    /// The flow's frame, bits.
    frame_bits: f64,
    /// The first bin not yet in a stretch or passed over.
    next: usize,
    open: Option<Stretch>,
    t: u64,
    rc: f64,
    tally: Tally,
}

/// A stretch being built.
#[derive(Debug, Clone, Copy)]
struct Stretch {
    start: u64,
    /// What the model allowed in it so far.
    model_bits: f64,
    /// What the flow sent in the bins of it that have ended.
    sent_bits: f64,
    /// Its end, once the model has allowed enough.
    end: Option<u64>,
    /// A bin of it was paused or ends after the guard stop.
    spoiled: bool,
}

/// What the stretches came to.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tally {
    /// Stretches compared.
    pub(super) compared: usize,
    /// Of them, those the flow sent above the model in (as [`Stretches`] defines it).
    pub(super) above: usize,
    /// |sent − allowed| summed over the compared stretches, bits, and their length, ns: their ratio is the
    /// mean error in Gb/s the fit minimises.
    pub(super) error_bits: f64,
    pub(super) span_ns: u64,
}

impl<'a> Stretches<'a> {
    pub(super) fn new(
        observed: &'a [Observed],
        window: Window,
        frame_bits: f64,
        line_mbps: f64,
    ) -> Self {
        Stretches {
            observed,
            window,
            frame_bits,
            next: 0,
            open: None,
            t: 0,
            rc: line_mbps,
            tally: Tally::default(),
        }
    }

    /// An event at `t` set Rc to `rc`.
    pub(super) fn at(&mut self, t: u64, rc: f64) {
        self.advance(t);
        self.rc = rc;
    }

    /// Integrates the current Rc up to `to`, opening and closing stretches on the way.
    fn advance(&mut self, to: u64) {
        let need = RESOLVE_FRAMES * self.frame_bits;
        let decisive = ABOVE_MODEL_FACTOR * need + self.frame_bits;
        let width = self.window.width.max(1);
        // Mb/s is bits per µs: bits per ns is a thousandth of it.
        let per_ns = self.rc / 1000.0;
        while self.t < to {
            let Some(mut st) = self.open else {
                while self
                    .observed
                    .get(self.next)
                    .is_some_and(|o| !self.window.admits(o, true))
                {
                    self.next += 1;
                }
                match self.observed.get(self.next) {
                    Some(o) if o.t_ns < to => {
                        self.t = self.t.max(o.t_ns);
                        self.open = Some(Stretch {
                            start: o.t_ns,
                            model_bits: 0.0,
                            sent_bits: 0.0,
                            end: None,
                            spoiled: false,
                        });
                    }
                    _ => self.t = to,
                }
                continue;
            };
            if st.end.is_none() && per_ns > 0.0 {
                let cross = self
                    .t
                    .saturating_add(((need - st.model_bits) / per_ns).ceil().max(1.0) as u64);
                // Reached before Rc changes again: the stretch ends with the bin it is reached in.
                if cross <= to {
                    let bins = cross.saturating_sub(st.start).div_ceil(width).max(1);
                    st.end = Some(st.start.saturating_add(bins.saturating_mul(width)));
                }
            }
            // The next instant something is decided: the end of the stretch's next busy bin, or its end.
            let bin = self
                .observed
                .get(self.next)
                .filter(|o| st.end.is_none_or(|e| o.t_ns < e));
            let bin_end = bin.map(|o| o.t_ns.saturating_add(width));
            let stop = [Some(to), st.end, bin_end]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(to);
            st.model_bits += (stop - self.t) as f64 * per_ns;
            self.t = stop;
            if let (Some(o), true) = (bin, bin_end == Some(stop)) {
                st.spoiled |= !self.window.admits(o, true);
                st.sent_bits += o.gbps * width as f64;
                self.next += 1;
                if st.spoiled || st.sent_bits > decisive {
                    self.close(st, stop);
                    continue;
                }
            }
            if st.end == Some(stop) {
                self.close(st, stop);
            } else {
                self.open = Some(st);
            }
        }
    }

    fn close(&mut self, st: Stretch, end: u64) {
        self.open = None;
        if st.spoiled || self.window.until.is_some_and(|u| end > u) {
            return;
        }
        let t = &mut self.tally;
        t.compared += 1;
        if st.sent_bits > ABOVE_MODEL_FACTOR * st.model_bits + self.frame_bits {
            t.above += 1;
        }
        t.error_bits += (st.sent_bits - st.model_bits).abs();
        t.span_ns += end - st.start;
    }

    /// The tally once the model has been integrated up to `end`; a stretch still open there never reached
    /// its allowance and is not compared.
    pub(super) fn finish(mut self, end: u64) -> Tally {
        self.advance(end);
        self.tally
    }
}
