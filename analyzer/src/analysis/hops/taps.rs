//! The taps: what the pass must know of each (its file, for the clock it shares, and its recorded line rate),
//! and what it counts at each besides the copies it matches (packets, PSN gaps, departures, PFC pauses, CNPs).

use roce_capture::Capture;
use roce_core::decode::Kind;
use roce_core::line::LineRates;
use roce_core::passes::psn::{FlowPsn, Numbering, PsnEvent};
use roce_wire::Opcode;
use rustc_hash::FxHashMap;

use super::matching::Seen;
use super::np::NpCheck;
use super::rates::RateMap;
use super::report::TapReport;

/// What the pass needs of a tap: its file (taps of one file share a clock) and its recorded line rate.
#[derive(Debug, Clone, Copy)]
struct TapFacts {
    file: usize,
    speed_bps: Option<u64>,
}

/// What the pass needs of each tap, by tap index. Taps appear as the capture is read, so this is replaced
/// whenever new ones did; a tap's file is needed only once its first copies close.
#[derive(Debug, Clone, Default)]
pub(super) struct Taps(Vec<TapFacts>);

impl Taps {
    pub(super) fn of(taps: &[roce_capture::Tap]) -> Taps {
        Taps(
            taps.iter()
                .map(|t| TapFacts {
                    file: t.file,
                    speed_bps: t.description.speed_bps,
                })
                .collect(),
        )
    }

    /// How many taps this knows: fewer than the capture's means some appeared since.
    pub(super) fn known(&self) -> usize {
        self.0.len()
    }

    pub(super) fn file_of(&self, tap: u32) -> usize {
        self.0.get(tap as usize).map_or(tap as usize, |t| t.file)
    }

    /// The line rate of `tap`, bit/s, when one is known (`link_bps` from `--link-speed`, else the tap's
    /// `if_speed`); `None` rather than the assumed 100 Gb/s, which would make up serialization times and queue
    /// depths.
    pub(super) fn line_bps(&self, link_bps: Option<u64>, tap: u32) -> Option<u64> {
        let recorded = self.0.get(tap as usize).and_then(|t| t.speed_bps);
        let line = LineRates::flag(link_bps).of(recorded);
        (!line.assumed()).then_some(line.bps)
    }
}

/// The taps' files, when taps appeared since `known` of them were seen. The pass needs a tap's file only once
/// its first copies close, later than the batch in which it appeared.
pub(super) fn new_taps(capture: &Capture, known: &mut usize) -> Option<Taps> {
    let taps = capture.taps();
    (taps.len() != *known).then(|| {
        *known = taps.len();
        Taps::of(taps)
    })
}

/// What the pass keeps per frame besides matching: drain rates, PFC pauses, the NP check, packets and PSN
/// gaps per tap. Matching never reads it, and the report only at the end.
#[derive(Debug)]
pub(super) struct Side {
    np_min_gap_ns: u64,
    pub(super) rates: RateMap,
    psn: FxHashMap<(u32, u128, u32), FlowPsn>,
    packets: Vec<u64>,
    psn_gaps: Vec<u64>,
    pub(super) np: NpCheck,
    /// (tap, priority, time) of each PFC pause with a nonzero time.
    pub(super) pauses: Vec<(u32, u8, u64)>,
}

impl Side {
    pub(super) fn new(np_min_gap_ns: u64) -> Self {
        Side {
            np_min_gap_ns,
            rates: RateMap::default(),
            psn: FxHashMap::default(),
            packets: Vec::new(),
            psn_gaps: Vec::new(),
            np: NpCheck::default(),
            pauses: Vec::new(),
        }
    }

    /// Counts the frame, and gives its copy the gap since the frame before it towards the same next hop.
    #[inline]
    pub(super) fn seen(&mut self, s: &mut Seen) {
        let tap = s.copy.tap as usize;
        let ts = s.copy.ts;
        if tap >= self.packets.len() {
            self.packets.resize(tap + 1, 0);
            self.psn_gaps.resize(tap + 1, 0);
        }
        if s.has_mac && matches!(s.kind, Kind::Roce | Kind::Cnp | Kind::Other) {
            s.copy.gap = self
                .rates
                .get_mut(s.copy.tap, s.copy.dst_mac)
                .departure(ts, s.copy.len);
        }
        if s.paused != 0 {
            for prio in 0..8u8 {
                if s.paused & (1 << prio) != 0 && self.pauses.len() < 1_000_000 {
                    self.pauses.push((s.copy.tap, prio, ts));
                }
            }
        }
        self.np.frame(s, self.np_min_gap_ns);
        let Some(key) = s.key.as_ref() else {
            return;
        };
        self.packets[tap] += 1;
        if s.kind == Kind::Roce
            && let Some(numbering) = Numbering::of(Opcode(key.opcode), s.read_len)
        {
            let ev = self
                .psn
                .entry((s.copy.tap, key.dst, key.dest_qp))
                .or_default()
                .observe(key.psn, numbering);
            if let PsnEvent::Gap(n) = ev {
                self.psn_gaps[tap] += n as u64;
            }
        }
    }

    /// Every tap, named as the tables name it, with what was counted at it and what its file recorded of it.
    pub(super) fn tap_reports(&self, capture: &Capture) -> Vec<TapReport> {
        capture
            .taps()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let file = capture
                    .files()
                    .nth(t.file)
                    .map(|f| f.name.clone())
                    .unwrap_or_default();
                let dropped = match (t.stats.dropped_iface, t.stats.dropped_os) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                TapReport {
                    tap: t.name.clone(),
                    file,
                    interface: t.interface,
                    name: t.description.name.clone(),
                    packets: self.packets.get(i).copied().unwrap_or(0),
                    psn_gaps: self.psn_gaps.get(i).copied().unwrap_or(0),
                    isb_dropped: dropped,
                }
            })
            .collect()
    }
}
