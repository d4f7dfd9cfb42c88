//! Each CNP's comment: the flow it throttles (or why no flow could be tied to it) and what the DCQCN model
//! did with it.
//!
//! Everything comes from the analysis: the pairing (the report's flows and `unpaired_cnps`), the CNP times
//! the model was fed (`cnp_ts_ns`, those of the tap that saw most of the stream), and the model's own events,
//! gathered by [`CnpModels`] as the model makes them. A CNP frame is matched to the model's CNP by its stream
//! (addresses and QP), its tap and its time, in order: the k-th CNP of a stream at its tap is the model's
//! k-th, and its time must be the k-th time the model was fed, or the comment says that it could not be
//! matched rather than borrow a neighbour's numbers.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use roce_core::dcqcn::{Event, EventKind};
use roce_core::decode::Frame;
use roce_core::passes::flows::FlowKey;

use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn, FlowId, UnpairedCnps};
use crate::analysis::on_disk::{DiskVec, Fixed, Store};

/// What became of the cut a CNP asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// The model cut: `cut_*` say when and how far.
    Cut,
    /// The limiter was released first (an increase reached the maximum), which drops the pending cut.
    Released,
    /// Neither happened before the model ended (the capture's last frame, or its guard).
    Open,
}

/// What the model did with one CNP, from its events: the state after the CNP's own event, and the cut that
/// followed it (the first cut after it with no release in between: the decrease check it set the flag for).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CnpOutcome {
    /// The CNP's instant on the model's clock (its capture time plus `--cnp-delay`).
    t_ns: u64,
    /// Rc right after the CNP's own event, Mb/s.
    rc_mbps: f64,
    /// The CNP engaged the limiter (the model's `first_cnp`).
    first: bool,
    fate: Fate,
    cut_t_ns: u64,
    cut_before_mbps: f64,
    cut_after_mbps: f64,
}

impl Fixed for CnpOutcome {
    const SIZE: usize = 48;
    fn put(&self, out: &mut Vec<u8>) {
        let fate = match self.fate {
            Fate::Cut => 0u64,
            Fate::Released => 1,
            Fate::Open => 2,
        };
        for v in [
            self.t_ns,
            self.rc_mbps.to_bits(),
            u64::from(self.first) | (fate << 1),
            self.cut_t_ns,
            self.cut_before_mbps.to_bits(),
            self.cut_after_mbps.to_bits(),
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn get(b: &[u8]) -> Self {
        let w = |i: usize| u64::get(b.get(i * 8..).unwrap_or_default());
        let flags = w(2);
        CnpOutcome {
            t_ns: w(0),
            rc_mbps: f64::from_bits(w(1)),
            first: flags & 1 == 1,
            fate: match flags >> 1 {
                0 => Fate::Cut,
                1 => Fate::Released,
                _ => Fate::Open,
            },
            cut_t_ns: w(3),
            cut_before_mbps: f64::from_bits(w(4)),
            cut_after_mbps: f64::from_bits(w(5)),
        }
    }
}

/// Gathers, as each flow's model runs, what it did with each CNP. Fed every model event through
/// [`crate::analysis::run_with_model_events`]; a flow's outcomes go to a temporary file once its model has
/// run, so memory holds one flow's CNPs at a time.
#[derive(Debug)]
pub struct CnpModels {
    store: Arc<Store>,
    flow: Option<FlowId>,
    outcomes: Vec<CnpOutcome>,
    /// The CNPs since the last cut or release, whose cut is still to come.
    pending: Vec<usize>,
    done: FxHashMap<FlowId, DiskVec<CnpOutcome>>,
}

impl Default for CnpModels {
    fn default() -> Self {
        CnpModels {
            store: Store::new(),
            flow: None,
            outcomes: Vec::new(),
            pending: Vec::new(),
            done: FxHashMap::default(),
        }
    }
}

impl CnpModels {
    /// One event of flow `id`'s model. A flow's events come in time order, one flow after another.
    pub fn event(&mut self, id: &FlowId, e: &Event) {
        if self.flow != Some(*id) {
            self.close();
            self.flow = Some(*id);
        }
        match e.kind {
            EventKind::FirstCnp | EventKind::Cnp => {
                self.pending.push(self.outcomes.len());
                self.outcomes.push(CnpOutcome {
                    t_ns: e.t_ns,
                    rc_mbps: e.rc_mbps,
                    first: e.kind == EventKind::FirstCnp,
                    fate: Fate::Open,
                    cut_t_ns: 0,
                    cut_before_mbps: 0.0,
                    cut_after_mbps: 0.0,
                });
            }
            EventKind::Cut => {
                for i in self.pending.drain(..) {
                    if let Some(o) = self.outcomes.get_mut(i) {
                        o.fate = Fate::Cut;
                        o.cut_t_ns = e.t_ns;
                        o.cut_before_mbps = e.rc_before_mbps;
                        o.cut_after_mbps = e.rc_mbps;
                    }
                }
            }
            EventKind::Released => {
                for i in self.pending.drain(..) {
                    if let Some(o) = self.outcomes.get_mut(i) {
                        o.fate = Fate::Released;
                    }
                }
            }
            EventKind::FastRecovery | EventKind::AdditiveIncrease | EventKind::HyperIncrease => {}
        }
    }

    /// Files the outcomes of the flow whose events just ended.
    fn close(&mut self) {
        if let Some(id) = self.flow.take() {
            self.done
                .insert(id, DiskVec::new(&self.store, &self.outcomes));
        }
        self.outcomes.clear();
        self.pending.clear();
    }

    /// Every flow's outcomes, once every model has run.
    pub(super) fn finish(mut self) -> FxHashMap<FlowId, DiskVec<CnpOutcome>> {
        self.close();
        self.done
    }
}

/// Elements of a series read at a time: a few KiB per flow however many flows run side by side.
const CHUNK: usize = 64;

/// A series on disk walked from its start, a chunk at a time.
#[derive(Debug)]
struct Walk<T: Fixed> {
    series: DiskVec<T>,
    buf: Vec<T>,
    /// The index of `buf[0]` in the series.
    at: usize,
}

impl<T: Fixed> Walk<T> {
    fn new(series: DiskVec<T>) -> Self {
        Walk {
            series,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// Element `i`; `i` never goes back by more than a chunk (each is asked for once, in order).
    fn get(&mut self, i: usize) -> Option<T> {
        if i < self.at || i >= self.at + self.buf.len() {
            self.buf = self.series.chunk(i, CHUNK);
            self.at = i;
        }
        self.buf.get(i - self.at).copied()
    }
}

/// Where a CNP stream's CNPs are explained.
#[derive(Debug, Clone, Copy)]
enum Explained {
    /// Paired with the report's flow at this index; its walk is `walks[i]` of the same index.
    Paired(usize),
    /// Listed in the report's `unpaired_cnps` at this index.
    Unpaired(usize),
}

#[derive(Debug)]
struct FlowWalk {
    /// The next CNP of the stream at the model's tap.
    next: usize,
    times: Walk<u64>,
    outcomes: Option<Walk<CnpOutcome>>,
}

/// The CNP comments of a capture, frame by frame, in the order the capture is read.
#[derive(Debug)]
pub(super) struct Cnps<'a> {
    report: &'a DcqcnReport,
    streams: FxHashMap<FlowKey, Explained>,
    walks: FxHashMap<usize, FlowWalk>,
    /// Whether a first CNP asks for a cut: the paper's profile always cuts at once; ConnectX's model asks
    /// at its first CNP unless `first_cnp_cuts` is 0 (docs/dcqcn.md, rule 2).
    first_asks: bool,
    /// CNP frames that could not be matched with the model's CNPs or with any stream of the analysis.
    pub(super) unmatched: u64,
    /// CNP frames commented.
    pub(super) commented: u64,
}

impl<'a> Cnps<'a> {
    pub(super) fn new(
        report: &'a DcqcnReport,
        mut outcomes: FxHashMap<FlowId, DiskVec<CnpOutcome>>,
    ) -> Self {
        let mut streams = FxHashMap::default();
        let mut walks = FxHashMap::default();
        for (i, f) in report.flows.iter().enumerate() {
            let s = &f.summary;
            let Some(sender_qp) = s.sender_qp else {
                continue;
            };
            let key = FlowKey {
                src: s.receiver,
                dst: s.sender,
                dest_qp: sender_qp,
            };
            streams.insert(key, Explained::Paired(i));
            let id = FlowId {
                sender: s.sender,
                receiver: s.receiver,
                receiver_qp: s.receiver_qp,
            };
            walks.insert(
                i,
                FlowWalk {
                    next: 0,
                    times: Walk::new(f.cnp_ts_ns.clone()),
                    outcomes: outcomes.remove(&id).map(Walk::new),
                },
            );
        }
        for (i, u) in report.unpaired_cnps.iter().enumerate() {
            let key = FlowKey {
                src: u.src,
                dst: u.dst,
                dest_qp: u.dest_qp,
            };
            streams.entry(key).or_insert(Explained::Unpaired(i));
        }
        Cnps {
            report,
            streams,
            walks,
            first_asks: report.profile == "paper" || report.knobs.first_cnp_cuts,
            unmatched: 0,
            commented: 0,
        }
    }

    /// The comment of CNP frame `f` of stream `key`.
    pub(super) fn comment(&mut self, f: &Frame<'_>, key: FlowKey) -> String {
        self.commented += 1;
        let head = format!("rocetrace: CNP to QP 0x{:06x}", key.dest_qp);
        match self.streams.get(&key).copied() {
            Some(Explained::Paired(i)) => self.paired(f, &head, i),
            Some(Explained::Unpaired(i)) => match self.report.unpaired_cnps.get(i) {
                Some(u) => format!(
                    "{head} from {} to {}, unpaired: {}",
                    u.src,
                    u.dst,
                    why_unpaired(u)
                ),
                None => self.unknown(&head, key),
            },
            None => self.unknown(&head, key),
        }
    }

    fn unknown(&mut self, head: &str, key: FlowKey) -> String {
        self.unmatched += 1;
        format!(
            "{head} from {} to {}: the DCQCN analysis holds no stream for it",
            key.src, key.dst
        )
    }

    fn paired(&mut self, f: &Frame<'_>, head: &str, i: usize) -> String {
        let Some(flow) = self.report.flows.get(i) else {
            return head.to_owned();
        };
        let s = &flow.summary;
        let pairing = format!(
            "{head} throttles {} → {} QP 0x{:06x} (paired by {})",
            s.sender,
            s.receiver,
            s.receiver_qp,
            s.pairing.map_or("?", |m| m.key())
        );
        match (s.cnp_iface, &s.cnp_tap) {
            (Some(at), _) if at == f.iface => {}
            // A copy of the stream at another tap: the model took its CNPs where most of them were seen.
            (Some(_), Some(tap)) => {
                return format!("{pairing}; the model takes this stream's CNPs at {tap}");
            }
            // The model was fed no CNP of this stream: there is nothing of it to say.
            _ => return pairing,
        }
        let delay = self.report.cnp_delay_ns;
        let first_asks = self.first_asks;
        let Some(walk) = self.walks.get_mut(&i) else {
            return pairing;
        };
        let k = walk.next;
        walk.next += 1;
        if walk.times.get(k) != Some(f.ts_ns) {
            self.unmatched += 1;
            return format!(
                "{pairing}; the model's CNPs of this stream do not line up with the capture here, so no model \
                 state is given"
            );
        }
        if s.rp_enabled == Some(false) {
            return format!(
                "{pairing}; roce_rp/enable/{} is 0 in the sender's knobs ({}), so its model ignores this CNP",
                s.priority.map_or("?".to_owned(), |p| p.to_string()),
                s.knobs_of
            );
        }
        let model_t = f.ts_ns.saturating_add_signed(delay);
        match walk.outcomes.as_mut().and_then(|o| o.get(k)) {
            Some(o) if o.t_ns == model_t => {
                format!("{pairing}; {}", model_text(&o, flow, first_asks))
            }
            Some(_) => {
                self.unmatched += 1;
                format!(
                    "{pairing}; the model's CNPs of this stream do not line up with the capture here, so no \
                     model state is given"
                )
            }
            None => format!("{pairing}; {}", unmodelled(flow, model_t)),
        }
    }

    /// The first failure to read the models' outcomes back from their temporary file: a CNP whose outcome
    /// could not be read was commented as not modelled, which would be untrue.
    pub(super) fn read_error(&self) -> Option<std::io::Error> {
        self.walks
            .values()
            .find_map(|w| w.outcomes.as_ref().and_then(|o| o.series.take_error()))
    }

    /// Whether every CNP the model was fed met its frame: a stream whose walk stopped short means frames
    /// and model parted ways (a file that changed between the two reads).
    pub(super) fn all_met(&self) -> bool {
        self.report.flows.iter().enumerate().all(|(i, f)| {
            self.walks
                .get(&i)
                .is_none_or(|w| w.next == f.cnp_ts_ns.len())
        })
    }
}

/// What the model did with the CNP, from its outcome.
fn model_text(o: &CnpOutcome, flow: &FlowDcqcn, first_asks: bool) -> String {
    let gbps = |mbps: f64| format!("{:.2} Gb/s", mbps / 1000.0);
    if o.first && !first_asks {
        return format!(
            "model: this first CNP engaged the limiter at Rc {} and asks for no cut (first_cnp_cuts = 0)",
            gbps(o.rc_mbps)
        );
    }
    match o.fate {
        Fate::Cut => {
            let when = match o.cut_t_ns.saturating_sub(o.t_ns) {
                0 => "at once".to_owned(),
                dt => format!("{} later", duration(dt)),
            };
            format!(
                "model Rc after it {} (its cut {when}, from {})",
                gbps(o.cut_after_mbps),
                gbps(o.cut_before_mbps)
            )
        }
        Fate::Released => format!(
            "model Rc {}: the limiter was released before the cut this CNP asked for",
            gbps(o.rc_mbps)
        ),
        Fate::Open => match flow.summary.model_stopped_ns {
            Some(t) => format!(
                "model Rc {}, no cut: the model's guard stopped it at {}",
                gbps(o.rc_mbps),
                seconds(t)
            ),
            None => format!(
                "model Rc {}, no cut before the capture's last frame",
                gbps(o.rc_mbps)
            ),
        },
    }
}

/// Why the model has no event for a CNP it was fed at `model_t`.
fn unmodelled(flow: &FlowDcqcn, model_t: u64) -> String {
    match flow.summary.model_stopped_ns {
        Some(t) if model_t >= t => format!("not modelled: the model's guard stopped at {}", seconds(t)),
        _ => "not modelled: with --cnp-delay it reaches the sender after the capture's last frame, where the \
              model ends"
            .to_owned(),
    }
}

/// The reason an unpaired stream gives, in the words of docs/pairing.md.
fn why_unpaired(u: &UnpairedCnps) -> String {
    match (u.reason, u.cnps_needed, u.basis) {
        ("too_few_cnps", Some(n), _) => format!("too_few_cnps ({} of {n} CNPs needed)", u.cnps),
        ("no_evidence", _, _) => "no_evidence (no data flow the other way to tie it to)".to_owned(),
        (reason, _, Some(basis)) => format!(
            "{reason} (by {basis}; {} candidates, see the finding ambiguous_pairing)",
            u.candidates.len()
        ),
        (reason, _, None) => reason.to_owned(),
    }
}

/// A span of time in the unit that reads best: `412 ns`, `2.173 µs`, `1.250 ms`.
pub(super) fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.3} µs", ns as f64 / 1e3),
        _ => format!("{:.3} ms", ns as f64 / 1e6),
    }
}

/// An instant as seconds since the epoch, to the nanosecond, as the findings write it.
pub(super) fn seconds(t: u64) -> String {
    format!("{}.{:09} s", t / 1_000_000_000, t % 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_core::dcqcn::Cause;

    fn ev(t_ns: u64, kind: EventKind, rc_before: f64, rc: f64) -> Event {
        Event {
            t_ns,
            kind,
            cause: Cause::Cnp,
            rc_mbps: rc,
            rt_mbps: rc,
            alpha: 0.5,
            rc_before_mbps: rc_before,
        }
    }

    fn id(qp: u32) -> FlowId {
        FlowId {
            sender: "10.0.0.1".parse().unwrap(),
            receiver: "10.0.0.5".parse().unwrap(),
            receiver_qp: qp,
        }
    }

    /// Two CNPs before one decrease check share its cut; a CNP whose cut a release cancelled says so; a
    /// CNP at the end waits; and each flow's outcomes stay its own.
    #[test]
    fn each_cnp_gets_the_cut_that_followed_it() {
        let mut m = CnpModels::default();
        let a = id(1);
        m.event(&a, &ev(100, EventKind::FirstCnp, 25_000.0, 25_000.0));
        m.event(&a, &ev(102, EventKind::Cnp, 25_000.0, 25_000.0));
        m.event(&a, &ev(104, EventKind::Cut, 25_000.0, 12_750.0));
        m.event(&a, &ev(300, EventKind::FastRecovery, 12_750.0, 18_000.0));
        m.event(&a, &ev(400, EventKind::Cnp, 24_999.0, 24_999.0));
        m.event(&a, &ev(401, EventKind::Released, 24_999.0, 25_000.0));
        m.event(&a, &ev(500, EventKind::FirstCnp, 25_000.0, 25_000.0));
        let b = id(2);
        m.event(&b, &ev(7, EventKind::FirstCnp, 100.0, 100.0));
        let done = m.finish();
        let got = done[&a].to_vec();
        assert_eq!(got.len(), 4);
        assert_eq!(
            (got[0].fate, got[0].cut_t_ns, got[0].cut_after_mbps),
            (Fate::Cut, 104, 12_750.0)
        );
        assert_eq!((got[1].fate, got[1].cut_before_mbps), (Fate::Cut, 25_000.0));
        assert!(got[0].first && !got[1].first);
        assert_eq!(got[2].fate, Fate::Released);
        assert_eq!((got[3].fate, got[3].t_ns), (Fate::Open, 500));
        assert_eq!(done[&b].to_vec().len(), 1);
    }

    #[test]
    fn outcomes_come_back_from_disk_as_written() {
        let o = CnpOutcome {
            t_ns: u64::MAX - 3,
            rc_mbps: 12_750.25,
            first: true,
            fate: Fate::Released,
            cut_t_ns: 9,
            cut_before_mbps: 1.5,
            cut_after_mbps: -0.0,
        };
        let mut b = Vec::new();
        o.put(&mut b);
        assert_eq!(b.len(), CnpOutcome::SIZE);
        assert_eq!(CnpOutcome::get(&b), o);
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(duration(0), "0 ns");
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(2_173), "2.173 µs");
        assert_eq!(duration(1_250_000), "1.250 ms");
    }
}
