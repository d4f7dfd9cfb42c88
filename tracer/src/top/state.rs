//! The view's state machine: frames in, one bin of capture time after another out, with no terminal in
//! sight, so that a test can run it over a sample and hold each bin against `roce-analyzer`.
//!
//! Time is the capture's: bins are `[first + k·bin, first + (k+1)·bin)` of frame timestamps, the windows
//! `roce-analyzer stats --from +a --to +b` reads, so a replay at any speed and the analyzer on the written
//! file give the same numbers for a bin. Each bin's counts come from the passes `stats` runs (through
//! [`LiveView`], the capture's own line), fresh for the bin as a windowed `stats` starts them; the pairing
//! and the models run from the first frame on, as `roce-analyzer dcqcn --to` runs them, and a bin takes the
//! pairing and each model as they stand at its last frame.

use std::collections::VecDeque;

use roce_capture::Record;
use roce_core::dcqcn_options::Options;
use roce_core::decode::{Decoder, Kind};
use roce_core::filter::Filter;
use roce_core::passes::brief::Brief;
use roce_core::passes::flows::{FlowKey, FlowRow};
use roce_core::passes::pairing::{Method, Pairing, PairingPass};
use roce_core::passes::pfc::PfcPass;
use roce_core::recorded::Recorded;
use rustc_hash::{FxHashMap, FxHashSet};

use super::models::Models;
use super::notice::{Level, Notice, STORM_NS};
use crate::engine::Captured;
use crate::live::{Interval, LiveView, Rows};
use crate::watch::TapInfo;

/// How the view's state runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The bin width in capture time, ns.
    pub bin_ns: u64,
    /// Bins kept (for the sparklines and the flows still listed while idle).
    pub history: usize,
    /// The model's options, before the capture's recorded knobs are applied (`--link-speed` is in them).
    pub dcqcn: Options,
}

/// How a flow stands with the pairing.
#[derive(Debug, Clone, PartialEq)]
pub enum PairingNote {
    /// Tied to the CNP stream to the sender's QP, by this evidence.
    Paired {
        /// The stream: receiver → sender, to the sender's QP.
        stream: FlowKey,
        /// The kind of evidence that decided.
        method: Method,
        /// How many observations of it.
        evidence: u64,
    },
    /// A stream the flow is a candidate of was left unpaired, for this reason.
    Unpaired {
        /// The stream.
        stream: FlowKey,
        /// `tie`, `too_few_cnps`, `all_active`, `weak` or `contested` (docs/pairing.md).
        reason: &'static str,
        /// With `too_few_cnps`: how many CNPs it would take.
        cnps_needed: Option<u64>,
    },
    /// No CNP stream has named it yet.
    NoStream,
}

impl PairingNote {
    /// The note in a few words, for a narrow column.
    pub fn short(&self) -> String {
        match self {
            PairingNote::Paired { method, .. } => method.key().to_string(),
            PairingNote::Unpaired { reason, .. } => format!("unpaired: {reason}"),
            PairingNote::NoStream => "no CNPs".to_string(),
        }
    }

    /// The note in full, for the selected flow's line.
    pub fn long(&self) -> String {
        match self {
            PairingNote::Paired {
                stream,
                method,
                evidence,
            } => format!(
                "paired with the CNPs {} → {} qp {:#08x}: {} ({evidence} {})",
                stream.src,
                stream.dst,
                stream.dest_qp,
                method.key(),
                match method {
                    Method::CmMad => "CM handshakes",
                    Method::ReverseTraffic => "responses that fit its PSNs",
                    Method::UdDeth => "DETHs naming the QP",
                    Method::Timing => "CNPs right after its CE marks",
                    Method::Activity => "CNPs while it sent",
                }
            ),
            PairingNote::Unpaired {
                stream,
                reason,
                cnps_needed,
            } => {
                let more = cnps_needed.map_or(String::new(), |n| format!(", {n} CNPs would tell"));
                format!(
                    "unpaired: the CNPs {} → {} qp {:#08x} are {reason}{more} (docs/pairing.md)",
                    stream.src, stream.dst, stream.dest_qp
                )
            }
            PairingNote::NoStream => {
                "unpaired: no CNP stream to its sender names it yet (no CNPs, or none it could answer)"
                    .to_string()
            }
        }
    }
}

/// One flow in one bin.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowBin {
    /// Sender, receiver, the receiver's QP.
    pub key: FlowKey,
    /// The tap its numbers come from: the one that saw most of its packets in the bin.
    pub iface: u32,
    /// RoCE packets, wire bytes and CE-marked packets, as `stats` counts them.
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// CE-marked packets.
    pub ce_packets: u64,
    /// Its priority, as `stats` resolves it.
    pub priority: Option<u8>,
    /// CNPs of its paired stream in the bin (at the tap that saw most of them).
    pub cnps: u64,
    /// Where it stands with the pairing at the bin's last frame.
    pub pairing: PairingNote,
    /// Its model's Rc at the bin's last frame, Mb/s (a paired flow whose stream's model runs).
    pub model_mbps: Option<f64>,
}

/// One (tap, source, priority) of PFC or PAUSE in one bin.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseBin {
    /// The tap.
    pub iface: u32,
    /// Who sent the pauses.
    pub src_mac: String,
    /// The priority, `None` for 802.3x PAUSE.
    pub priority: Option<u8>,
    /// Paused time in the bin as `stats` counts it (a pause still running is cut at the bin's last frame).
    pub paused_ns: u64,
}

/// One closed bin.
#[derive(Debug, Clone)]
pub struct Bin {
    /// Its start, ns since the epoch (inclusive).
    pub start_ns: u64,
    /// Its end (exclusive).
    pub end_ns: u64,
    /// The totals the capture's line per second shows.
    pub interval: Interval,
    /// Its flows, one row each.
    pub flows: Vec<FlowBin>,
    /// Its pauses.
    pub pauses: Vec<PauseBin>,
    /// What the passes made of it, as `stats` would show it (the metrics take their counters from them).
    pub rows: Rows,
}

impl Bin {
    /// The bin's width in seconds.
    pub fn secs(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }

    /// Each priority's largest share of the bin paused (over taps and sources), `None` for PAUSE.
    pub fn pause_shares(&self) -> Vec<(Option<u8>, f64)> {
        let mut by: Vec<(Option<u8>, f64)> = Vec::new();
        let width = (self.end_ns - self.start_ns).max(1) as f64;
        for p in &self.pauses {
            let share = p.paused_ns as f64 / width;
            match by.iter_mut().find(|(q, _)| *q == p.priority) {
                Some((_, s)) => *s = s.max(share),
                None => by.push((p.priority, share)),
            }
        }
        by.sort_by_key(|(p, _)| p.map_or(8, |p| p));
        by
    }
}

/// A captured frame as the decoder reads it, at its tap.
fn record<'a>(c: &'a Captured, tap: Option<&TapInfo>) -> Record<'a> {
    Record {
        iface: c.iface,
        link: tap.map_or(roce_capture::LinkType::ETHERNET, |t| t.link),
        speed_bps: tap.and_then(|t| t.speed_bps),
        ts_ns: c.ts_ns,
        caplen: c.data.len() as u32,
        len: c.len,
        data: &c.data,
        offset: 0,
    }
}

/// The state.
#[derive(Debug)]
pub struct State {
    bin_ns: u64,
    history: usize,
    base: Options,
    opts: Options,
    taps: Vec<TapInfo>,
    decoder: Decoder,
    live: LiveView,
    pairing: PairingPass,
    paired: Pairing,
    models: Models,
    first_ns: Option<u64>,
    bin_start: u64,
    /// The current bin's last frame.
    bin_last: Option<u64>,
    now_ns: u64,
    bins: VecDeque<Bin>,
    notices: Vec<Notice>,
    filter: Option<(String, Filter)>,
    matched: FxHashSet<FlowKey>,
    /// Each flow's and CNP stream's first frame, so that a filter set now lists at once the flows it
    /// matches, before their next frame comes (on a paused replay or a quiet link, none may).
    first_frames: FxHashMap<FlowKey, Captured>,
    /// Every pause from the first frame on, across the bins, for storms; and the pauses already called one
    /// (by their start).
    pauses: PfcPass,
    storms_said: FxHashSet<(u32, String, Option<u8>, u64)>,
    /// The pauses running at the last bin's end: (tap, source, priority, since).
    running: Vec<(u32, String, Option<u8>, u64)>,
    /// Frames earlier than the open bin (a live capture's late ones): counted in the open bin.
    pub late: u64,
    /// Frames seen.
    pub frames: u64,
    /// Bins closed so far (more than are kept), so that a reader can tell which are new.
    pub closed: u64,
    /// The source ended.
    pub ended: Option<String>,
}

impl State {
    /// A state that has seen nothing.
    pub fn new(cfg: Config) -> State {
        let lines = cfg.dcqcn.lines;
        State {
            bin_ns: cfg.bin_ns.max(1),
            history: cfg.history.max(1),
            opts: cfg.dcqcn.clone(),
            base: cfg.dcqcn,
            taps: Vec::new(),
            // The ICRC is not shown, and would double the decoding's cost.
            decoder: Decoder {
                check_icrc: false,
                extra_port: None,
            },
            live: LiveView::new(lines, Vec::new()),
            pairing: PairingPass::default(),
            paired: Pairing::default(),
            models: Models::default(),
            first_ns: None,
            bin_start: 0,
            bin_last: None,
            now_ns: 0,
            bins: VecDeque::new(),
            notices: Vec::new(),
            filter: None,
            matched: FxHashSet::default(),
            first_frames: FxHashMap::default(),
            pauses: PfcPass::new(lines),
            storms_said: FxHashSet::default(),
            running: Vec::new(),
            late: 0,
            frames: 0,
            closed: 0,
            ended: None,
        }
    }

    /// The bin width, ns.
    pub fn bin_ns(&self) -> u64 {
        self.bin_ns
    }

    /// The taps so far.
    pub fn taps(&self) -> &[TapInfo] {
        &self.taps
    }

    /// Learns the taps (again, when more appear): their line rates size the models.
    pub fn set_taps(&mut self, taps: Vec<TapInfo>) {
        self.opts.tap_speeds = taps.iter().map(|t| t.speed_bps).collect();
        self.base.tap_speeds = self.opts.tap_speeds.clone();
        self.taps = taps;
    }

    /// Takes the capture's custom blocks: the recorded knobs, which the models made from now on run with.
    pub fn set_blocks(&mut self, blocks: Vec<Vec<u8>>) {
        let blocks: Vec<roce_capture::CustomBlock> = blocks
            .into_iter()
            .map(|data| roce_capture::CustomBlock {
                pen: roce_capture::blocks::PEN,
                data,
            })
            .collect();
        let recorded = Recorded::read(&blocks);
        let mut opts = self.base.clone();
        opts.apply_recorded_knobs(&recorded);
        self.opts = opts;
    }

    /// The model options in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Sets the filter (`roce_core::filter`'s language) that chooses the flows listed, or clears it: a flow
    /// is listed once one of its frames (or its CNP stream's) matched, its first frame included.
    pub fn set_filter(&mut self, filter: Option<(String, Filter)>) {
        self.matched.clear();
        if let Some((_, f)) = &filter {
            for (key, c) in &self.first_frames {
                let tap = self.taps.get(c.iface as usize);
                let rec = record(c, tap);
                if f.matches(&self.decoder.decode(0, &rec)) {
                    self.matched.insert(*key);
                }
            }
        }
        self.filter = filter;
    }

    /// The filter in force, as typed.
    pub fn filter_text(&self) -> Option<&str> {
        self.filter.as_ref().map(|(t, _)| t.as_str())
    }

    /// Whether the filter lets `flow` (or the CNPs of its stream) be listed.
    pub fn shows(&self, flow: &FlowBin) -> bool {
        if self.filter.is_none() {
            return true;
        }
        let stream = match &flow.pairing {
            PairingNote::Paired { stream, .. } | PairingNote::Unpaired { stream, .. } => {
                Some(stream)
            }
            PairingNote::NoStream => None,
        };
        self.matched.contains(&flow.key) || stream.is_some_and(|s| self.matched.contains(s))
    }

    /// The capture time the view stands at: the newest frame, or a replay's position.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The first frame's time, where the bins start.
    pub fn first_ns(&self) -> Option<u64> {
        self.first_ns
    }

    /// The closed bins, oldest first.
    pub fn bins(&self) -> &VecDeque<Bin> {
        &self.bins
    }

    /// The pauses running at the last bin's end, whatever the bin's own frames say: (tap, source, priority,
    /// since when). A bin of a storm may hold no frame at all.
    pub fn running_pauses(&self) -> &[(u32, String, Option<u8>, u64)] {
        &self.running
    }

    /// The notices so far, oldest first.
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// The model of a stream, once it had a CNP.
    pub fn model(&self, stream: &FlowKey) -> Option<&super::models::StreamModel> {
        self.models.get(stream)
    }

    /// A note from outside the frames (lost frames).
    pub fn notice(&mut self, n: Notice) {
        self.notices.push(n);
        self.trim_notices();
    }

    /// One frame, in capture order (a frame earlier than the open bin counts in it).
    pub fn frame(&mut self, c: &Captured) {
        let ts = c.ts_ns;
        if self.first_ns.is_none() {
            self.first_ns = Some(ts);
            self.bin_start = ts;
        }
        self.close_until(ts);
        if ts < self.bin_start {
            self.late += 1;
        }
        let rec = record(c, self.taps.get(c.iface as usize));
        self.frames += 1;
        let f = self.decoder.decode(self.frames, &rec);
        self.live.decoded(&f);
        self.pauses.frame(&f);
        self.pairing.frame(&Brief::of(&f));
        let key = f.ip.zip(f.bth()).map(|(ip, bth)| FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        });
        if let (Kind::Cnp, Some(k)) = (f.kind, key) {
            self.models
                .cnp(&self.opts, (k, c.iface, ts), &mut self.notices);
        }
        if let Some(k) = key
            && !self.first_frames.contains_key(&k)
        {
            self.first_frames.insert(k, c.clone());
        }
        if let (Some((_, filter)), Some(k)) = (&self.filter, key)
            && filter.matches(&f)
        {
            self.matched.insert(k);
        }
        self.bin_last = Some(self.bin_last.map_or(ts, |l| l.max(ts)));
        self.now_ns = self.now_ns.max(ts);
    }

    /// Every frame before `now_ns` has been seen (a replay's position, a live capture's clock less its
    /// delay): the bins that end by then close.
    pub fn advance(&mut self, now_ns: u64) {
        if self.first_ns.is_none() {
            return;
        }
        self.close_until(now_ns);
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// The source ended: the open bin closes as it is.
    pub fn finish(&mut self, why: String) {
        if self.first_ns.is_some() && self.ended.is_none() {
            self.close();
            self.bin_start += self.bin_ns;
        }
        self.ended = Some(why);
    }

    /// Closes every bin that ends at or before `t`; past a gap longer than the history, only the history's
    /// worth of empty bins is made.
    fn close_until(&mut self, t: u64) {
        if t < self.bin_start.saturating_add(self.bin_ns) {
            return;
        }
        self.close();
        self.bin_start += self.bin_ns;
        let missing = (t - self.bin_start) / self.bin_ns;
        let keep = self.history as u64;
        if missing > keep {
            self.bin_start += (missing - keep) * self.bin_ns;
        }
        while t >= self.bin_start + self.bin_ns {
            self.close();
            self.bin_start += self.bin_ns;
        }
    }

    fn close(&mut self) {
        let (start, end) = (self.bin_start, self.bin_start + self.bin_ns);
        let (interval, rows) = self.live.tick(self.bin_ns as f64 / 1e9);
        if let Some(last) = self.bin_last.take() {
            let before = std::mem::take(&mut self.paired);
            self.paired = self.pairing.so_far();
            for p in self.paired.pairs() {
                let (flow, stream) = (p.flow(), p.stream());
                // New, or tied to another stream: more evidence of the same kind is no news. A pair whose
                // stream carried no CNP (the acknowledgements' side of a connection) is no news either.
                if self.models.get(&stream).is_some()
                    && before
                        .of_flow(&flow)
                        .is_none_or(|b| (b.sender_qp, b.method) != (p.sender_qp, p.method))
                {
                    self.notices.push(Notice::paired(last, p));
                }
            }
            self.models.advance(&self.opts, last, &mut self.notices);
        }
        // At the bin's end, frames or not: during a storm nothing else may come.
        self.storms(end - 1);
        let flows = self.flow_bins(&rows);
        let pauses = rows
            .pfc
            .iter()
            .map(|p| PauseBin {
                iface: p.iface,
                src_mac: p.src_mac.clone(),
                priority: p.priority,
                paused_ns: p.paused_ns,
            })
            .collect();
        let bin = Bin {
            start_ns: start,
            end_ns: end,
            interval,
            flows,
            pauses,
            rows,
        };
        self.closed += 1;
        self.bins.push_back(bin);
        while self.bins.len() > self.history {
            self.bins.pop_front();
        }
        self.trim_notices();
    }

    fn trim_notices(&mut self) {
        const KEPT: usize = 200;
        if self.notices.len() > KEPT {
            self.notices.drain(..self.notices.len() - KEPT);
        }
    }

    /// A pause that has run for [`STORM_NS`] by the bin's end is a storm, said once per pause.
    fn storms(&mut self, last_ns: u64) {
        self.pauses.forget_finished();
        let running = self.pauses.running(last_ns);
        self.running = running.clone();
        self.storms_said.retain(|said| {
            running
                .iter()
                .any(|r| (&r.0, &r.1, &r.2, &r.3) == (&said.0, &said.1, &said.2, &said.3))
        });
        for (iface, mac, prio, since) in running {
            let lasted = last_ns.saturating_sub(since);
            if lasted >= STORM_NS && self.storms_said.insert((iface, mac.clone(), prio, since)) {
                let tap = self
                    .taps
                    .get(iface as usize)
                    .map_or("", |t| t.name.as_str());
                let n = Notice::storm(since + STORM_NS, tap, &mac, prio, lasted);
                self.notices.push(n);
            }
        }
    }

    /// The bin's flows, one row per flow (from the tap that saw most of it), with their pairing and model.
    fn flow_bins(&self, rows: &Rows) -> Vec<FlowBin> {
        let mut best: FxHashMap<FlowKey, &FlowRow> = FxHashMap::default();
        for r in &rows.flows {
            let k = FlowKey {
                src: r.src,
                dst: r.dst,
                dest_qp: r.dest_qp,
            };
            let e = best.entry(k).or_insert(r);
            if r.packets > e.packets {
                *e = r;
            }
        }
        let mut out: Vec<FlowBin> = best
            .into_iter()
            .map(|(key, r)| {
                let pairing = self.note(&key);
                let (cnps, model_mbps) = match &pairing {
                    PairingNote::Paired { stream, .. } => {
                        let cnps = rows
                            .cnps
                            .iter()
                            .filter(|c| c.src == stream.src && c.dst == stream.dst)
                            .filter(|c| c.dest_qp == stream.dest_qp)
                            .map(|c| c.count)
                            .max()
                            .unwrap_or(0);
                        let on = self.opts.enabled(key.src, r.priority, false);
                        let model = self.models.get(stream).filter(|_| on != Some(false));
                        (cnps, model.and_then(|m| m.rc_mbps()))
                    }
                    _ => (0, None),
                };
                FlowBin {
                    key,
                    iface: r.iface,
                    packets: r.packets,
                    bytes: r.bytes,
                    ce_packets: r.ce_packets,
                    priority: r.priority,
                    cnps,
                    pairing,
                    model_mbps,
                }
            })
            .collect();
        out.sort_by_key(|f| f.key);
        out
    }

    /// Where `flow` stands with the pairing as of the last bin.
    pub fn note(&self, flow: &FlowKey) -> PairingNote {
        if let Some(p) = self.paired.of_flow(flow) {
            return PairingNote::Paired {
                stream: p.stream(),
                method: p.method,
                evidence: p.evidence,
            };
        }
        let candidate = self.paired.ambiguous_streams().find(|a| {
            a.stream.src == flow.dst
                && a.stream.dst == flow.src
                && a.candidates.iter().any(|c| c.receiver_qp == flow.dest_qp)
        });
        match candidate {
            Some(a) => PairingNote::Unpaired {
                stream: a.stream,
                reason: a.reason,
                cnps_needed: a.cnps_needed,
            },
            None => PairingNote::NoStream,
        }
    }

    /// The notices to show, newest first, at most `n`, the problems kept longest.
    pub fn latest_notices(&self, n: usize) -> Vec<&Notice> {
        let mut out: Vec<&Notice> = self.notices.iter().rev().take(n).collect();
        if let Some(p) = self
            .notices
            .iter()
            .rev()
            .find(|x| x.level == Level::Problem)
            && !out.iter().any(|x| std::ptr::eq(*x, p))
            && n > 0
        {
            out.pop();
            out.push(p);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{ExtHeaders, Opcode};

    fn frame(src: u8, dst: u8, qp: u32, opcode: Opcode, ts_ns: u64) -> Captured {
        let bth = testkit::frames::bth(opcode, qp, 0);
        let payload: &[u8] = if opcode == Opcode::CNP {
            &[0; 16]
        } else {
            &[7; 1000]
        };
        let data = testkit::frames::v4_frame(src, dst, 2, bth, ExtHeaders::default(), payload);
        Captured {
            iface: 0,
            ts_ns,
            len: data.len() as u32,
            data,
        }
    }

    #[test]
    fn bins_close_on_capture_time_and_a_filter_lists_at_once() {
        let mut s = State::new(Config {
            bin_ns: 1_000,
            history: 3,
            dcqcn: Options::default(),
        });
        s.set_taps(vec![TapInfo {
            name: "t".into(),
            link: roce_capture::LinkType::ETHERNET,
            speed_bps: Some(25_000_000_000),
        }]);
        s.frame(&frame(1, 5, 7, Opcode::RC_SEND_ONLY, 10_000));
        s.frame(&frame(3, 5, 9, Opcode::RC_SEND_ONLY, 10_500));
        s.frame(&frame(5, 3, 4, Opcode::CNP, 10_600));
        assert!(s.bins().is_empty(), "the first bin is still open");
        // A frame 2.5 bins on closes the first bin and an empty one.
        s.frame(&frame(1, 5, 7, Opcode::RC_SEND_ONLY, 12_500));
        assert_eq!(s.bins().len(), 2);
        let first = s.bins()[0].clone();
        assert_eq!((first.start_ns, first.end_ns), (10_000, 11_000));
        assert_eq!(first.flows.len(), 2, "the CNP is no data flow");
        assert_eq!(first.rows.cnps.len(), 1);
        assert!(s.bins()[1].flows.is_empty());
        assert!(
            s.model(&FlowKey {
                src: "10.0.0.5".parse().unwrap(),
                dst: "10.0.0.3".parse().unwrap(),
                dest_qp: 4,
            })
            .is_some(),
            "the CNP's stream has its model"
        );
        // Nothing new arrives; the filter still finds 10.0.0.3's flow by its first frame.
        let f: Filter = "ip == 10.0.0.3".parse().unwrap();
        s.set_filter(Some(("ip == 10.0.0.3".into(), f)));
        let shown: Vec<_> = first
            .flows
            .iter()
            .filter(|x| s.shows(x))
            .map(|x| x.key.dest_qp)
            .collect();
        assert_eq!(shown, [9]);
        // A jump far past the history makes only the history's worth of empty bins.
        s.advance(1_000_000_000);
        assert_eq!(s.bins().len(), 3);
        assert_eq!(s.closed, 2 + 1 + 3);
        s.finish("end".into());
        assert_eq!(s.ended.as_deref(), Some("end"));
    }
}
