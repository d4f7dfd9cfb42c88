//! PFC and PAUSE accounting per tap and (source MAC, priority), by the rules of wire.md (per tap, so that
//! a pause seen at both ends of a link is not counted twice).
//!
//! A non-zero pause time pauses the priority from the frame's arrival for quanta·512 bit times at the line
//! rate of the tap that saw the frame (a quantum is a bit time of the link it paused); a later frame replaces
//! the end; a zero time (XON) ends it at once. Arithmetic is in picoseconds because a quantum at 100 Gb/s is
//! 5.12 ns: rounding each frame to whole ns would drift over a storm of thousands of frames.

use std::collections::BTreeMap;

use roce_wire::pfc::{MacControlRepr, quanta_to_ps};
use serde::Serialize;

use crate::decode::{Frame, mac_to_string};
use crate::line::LineRates;

/// 802.3x PAUSE has no priority: it stops the whole link. Tables show it as priority null.
pub type Priority = Option<u8>;

#[derive(Debug, Clone, Default)]
struct PauseState {
    frames: u64,
    xoff: u64,
    xon: u64,
    /// Picoseconds since the epoch; u128 because ns-since-epoch × 1000 overflows u64.
    paused_since: Option<u128>,
    paused_until: u128,
    paused_ps: u128,
    pauses: u64,
    /// Closed intervals (start, end) in ps: one per pause, so they grow with time, not with frames.
    closed: Vec<(u128, u128)>,
}

impl PauseState {
    /// Applies one frame's time for this priority at `t` (ps).
    fn apply(&mut self, t: u128, quanta: u16, link_bps: u64) {
        self.frames += 1;
        self.close_if_expired(t);
        if quanta == 0 {
            self.xon += 1;
            if let Some(since) = self.paused_since.take() {
                self.close(since, t);
            }
        } else {
            self.xoff += 1;
            if self.paused_since.is_none() {
                self.paused_since = Some(t);
                self.pauses += 1;
            }
            self.paused_until = t + u128::from(quanta_to_ps(quanta, link_bps));
        }
    }

    fn close_if_expired(&mut self, t: u128) {
        if let Some(since) = self.paused_since
            && self.paused_until <= t
        {
            self.close(since, self.paused_until);
            self.paused_since = None;
        }
    }

    /// A pause ends no earlier than it began: when a capture's timestamps step backwards (an XON stamped
    /// before the XOFF it answers, or a refresh stamped earlier that moved the expiry back), the interval is
    /// empty rather than inverted, which everything downstream would read as a pause of almost 2^64 ns.
    fn close(&mut self, since: u128, end: u128) {
        let end = end.max(since);
        self.paused_ps += end - since;
        self.closed.push((since, end));
    }
}

/// One row of the PFC table.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PfcRow {
    /// The tap's index over the capture.
    pub iface: u32,
    /// The tap's name, `FILE:IFACE`; filled in by [`crate::passes::Stats::finish`].
    pub tap: String,
    /// The pausing port's MAC.
    pub src_mac: String,
    /// "pfc" (802.1Qbb, per priority) or "pause" (802.3x, whole link).
    pub kind: &'static str,
    /// The paused priority, or the whole link for PAUSE.
    pub priority: Priority,
    /// Frames that named this priority in their class-enable vector (PAUSE: every PAUSE frame).
    pub frames: u64,
    /// Frames with a non-zero time for this priority.
    pub xoff: u64,
    /// Frames with a zero time (resume) for this priority.
    pub xon: u64,
    /// Distinct pause intervals (an XOFF that found the priority running starts one).
    pub pauses: u64,
    /// Time paused at the tap's line rate (see the capture's `interfaces`), clipped to the capture's span.
    pub paused_ns: u64,
}

#[derive(Debug)]
/// Turns PFC and PAUSE frames into pause intervals and totals per tap, source and priority.
pub struct PfcPass {
    lines: LineRates,
    state: BTreeMap<(u32, [u8; 6], Priority), PauseState>,
}

impl PfcPass {
    /// `lines` gives each tap the line rate that converts its quanta (512 bit times each) into time.
    pub fn new(lines: LineRates) -> Self {
        PfcPass {
            lines,
            state: BTreeMap::new(),
        }
    }

    /// Most frames are not MAC control: for them this is one test, inlined into the caller's loop, rather
    /// than a call that saves and restores registers for nothing.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        if let Some(ctl) = &f.mac_control {
            self.control(f, ctl);
        }
    }

    #[inline(never)]
    fn control(&mut self, f: &Frame<'_>, ctl: &MacControlRepr) {
        let mac = f.src_mac.unwrap_or_default();
        let t = u128::from(f.ts_ns) * 1000;
        let link_bps = self.lines.of(f.speed_bps).bps;
        match *ctl {
            MacControlRepr::Pfc(pfc) => {
                for prio in 0..8u8 {
                    if pfc.enabled(prio) {
                        self.state
                            .entry((f.iface, mac, Some(prio)))
                            .or_default()
                            .apply(t, pfc.quanta[usize::from(prio)], link_bps);
                    }
                }
            }
            MacControlRepr::Pause { quanta } => self
                .state
                .entry((f.iface, mac, None))
                .or_default()
                .apply(t, quanta, link_bps),
            MacControlRepr::Other { .. } => {}
        }
    }

    /// The pauses still running at `now_ns` (neither resumed nor run out): (tap, source, priority, since
    /// when, ns). A live view follows a pause across its bins with this, to call it a storm once it has
    /// lasted long enough.
    pub fn running(&self, now_ns: u64) -> Vec<(u32, String, Priority, u64)> {
        let now = u128::from(now_ns) * 1000;
        self.state
            .iter()
            .filter_map(|(&(iface, mac, prio), s)| {
                let since = s.paused_since?;
                (s.paused_until >= now).then(|| (iface, mac_to_string(&mac), prio, ps_to_ns(since)))
            })
            .collect()
    }

    /// Drops the record of finished pauses, which grows with time: for a pass kept for a whole live
    /// capture that only [`PfcPass::running`] is asked of.
    pub fn forget_finished(&mut self) {
        for s in self.state.values_mut() {
            s.closed.clear();
        }
    }

    /// Takes another pass's pause state: a thread's share of the capture, whose sources no other thread held.
    pub fn absorb(&mut self, other: PfcPass) {
        self.state.extend(other.state);
    }

    /// Closes pauses still running at `end_ns`, the capture's last timestamp.
    pub fn finish(self, end_ns: u64) -> Vec<PfcRow> {
        self.finish_with_intervals(end_ns).0
    }

    /// The table and every pause interval (in ns, start inclusive), ordered by start.
    pub fn finish_with_intervals(self, end_ns: u64) -> (Vec<PfcRow>, Vec<PauseInterval>) {
        let end = u128::from(end_ns) * 1000;
        let mut intervals = Vec::new();
        let rows = self
            .state
            .into_iter()
            .map(|((iface, mac, priority), mut s)| {
                if let Some(since) = s.paused_since.take() {
                    s.close(since, s.paused_until.min(end).max(since));
                }
                let src_mac = mac_to_string(&mac);
                intervals.extend(s.closed.iter().map(|&(a, b)| PauseInterval {
                    iface,
                    src_mac: src_mac.clone(),
                    priority,
                    start_ns: ps_to_ns(a),
                    end_ns: ps_to_ns(b),
                }));
                PfcRow {
                    iface,
                    tap: String::new(),
                    src_mac,
                    kind: if priority.is_some() { "pfc" } else { "pause" },
                    priority,
                    frames: s.frames,
                    xoff: s.xoff,
                    xon: s.xon,
                    pauses: s.pauses,
                    paused_ns: ps_to_ns(s.paused_ps),
                }
            })
            .collect();
        intervals.sort_by_key(|i| (i.start_ns, i.end_ns));
        (rows, intervals)
    }
}

fn ps_to_ns(ps: u128) -> u64 {
    u64::try_from(ps / 1000).unwrap_or(u64::MAX)
}

/// One pause of one priority (or of the whole link, for 802.3x PAUSE) from one source, as the rules of
/// wire.md derive it from the frames.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PauseInterval {
    /// The tap that saw the frames.
    pub iface: u32,
    /// The pausing port's MAC.
    pub src_mac: String,
    /// The paused priority, or the whole link.
    pub priority: Priority,
    /// When the pause began.
    pub start_ns: u64,
    /// When it ended: a resume, the quanta running out, or the capture's end.
    pub end_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use roce_capture::{LinkType, Record};
    use roce_wire::build::emit_mac_control;

    const G100: u64 = 100_000_000_000;

    /// A PAUSE of `quanta` seen at tap `iface`, which recorded `speed_bps`.
    fn pause(pass: &mut PfcPass, iface: u32, speed_bps: Option<u64>, ts_ns: u64, quanta: u16) {
        let mut buf = [0u8; 64];
        let ctl = MacControlRepr::Pause { quanta };
        let n = emit_mac_control([2, 0, 0, 0, 0, 1], None, &ctl, &mut buf).unwrap();
        let rec = Record {
            iface,
            link: LinkType::ETHERNET,
            speed_bps,
            ts_ns,
            caplen: n as u32,
            len: n as u32,
            data: &buf[..n],
            offset: 0,
        };
        pass.frame(&Decoder::default().decode(1, &rec));
    }

    #[test]
    fn quanta_are_bit_times_of_the_tap_that_saw_them() {
        let mut p = PfcPass::new(LineRates::default());
        // 1000 quanta: 5.12 µs at 100 Gb/s, 20.48 µs at 25 Gb/s, and 100 Gb/s assumed without if_speed.
        pause(&mut p, 0, Some(25_000_000_000), 0, 1000);
        pause(&mut p, 1, Some(G100), 0, 1000);
        pause(&mut p, 2, None, 0, 1000);
        let paused: Vec<(u32, u64)> = p
            .finish(1_000_000)
            .iter()
            .map(|r| (r.iface, r.paused_ns))
            .collect();
        assert_eq!(paused, [(0, 20_480), (1, 5_120), (2, 5_120)]);
        // --link-speed wins over every tap's if_speed.
        let mut p = PfcPass::new(LineRates::flag(Some(50_000_000_000)));
        pause(&mut p, 0, Some(25_000_000_000), 0, 1000);
        assert_eq!(p.finish(1_000_000)[0].paused_ns, 10_240);
    }

    #[test]
    fn a_running_pause_is_seen_with_its_start() {
        let mut p = PfcPass::new(LineRates::default());
        // 65535 quanta at 100 Gb/s: 335.5 µs, refreshed every 100 µs for 1 ms.
        for i in 0..10 {
            pause(&mut p, 0, Some(G100), 1_000_000 + i * 100_000, 65535);
        }
        let running = p.running(1_950_000);
        assert_eq!(
            running,
            [(0, "02:00:00:00:00:01".to_string(), None, 1_000_000)]
        );
        // Past the last refresh's quanta, nothing runs.
        assert!(p.running(2_300_000).is_empty());
        pause(&mut p, 0, Some(G100), 3_000_000, 0);
        p.forget_finished();
        assert_eq!(p.finish(4_000_000)[0].pauses, 1);
    }

    #[test]
    fn xoff_expires_then_xon_counts_nothing_more() {
        let mut s = PauseState::default();
        // 1000 quanta at 100G = 5120 ns.
        s.apply(0, 1000, G100);
        s.apply(10_000_000, 0, G100);
        assert_eq!(s.paused_ps, 5_120_000);
        assert_eq!((s.xoff, s.xon, s.pauses), (1, 1, 1));
    }

    #[test]
    fn refresh_extends_and_xon_cuts() {
        let mut s = PauseState::default();
        s.apply(0, 1000, G100);
        s.apply(4_000_000, 1000, G100); // refreshed before expiry: until 9120 ns
        s.apply(6_000_000, 0, G100); // XON at 6000 ns
        assert_eq!(s.paused_ps, 6_000_000);
        assert_eq!(s.pauses, 1);
    }

    #[test]
    fn time_running_backwards_closes_an_empty_pause_not_an_inverted_one() {
        let mut s = PauseState::default();
        s.apply(9_000_000, 1000, G100);
        s.apply(5_000_000, 0, G100); // an XON stamped 4 µs before the XOFF
        s.apply(20_000_000, 1000, G100);
        s.apply(1_000_000, 1000, G100); // a refresh stamped earlier: the expiry moves before the start
        s.apply(30_000_000, 0, G100);
        assert!(s.closed.iter().all(|&(a, b)| a <= b), "{:?}", s.closed);
        assert_eq!(s.closed, [(9_000_000, 9_000_000), (20_000_000, 20_000_000)]);
        assert_eq!(s.paused_ps, 0);
    }
}
