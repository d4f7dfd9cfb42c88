//! The line per second on the console, computed by the analyzer's own passes over the frames of that second,
//! so the live numbers and a later `roce-analyzer stats` on the file can never disagree on a definition.

use roce_capture::{LinkType, Record};
use roce_core::decode::{Decoder, Frame, Kind};
use roce_core::line::LineRates;
use roce_core::passes::cnp::{CnpPass, CnpRow};
use roce_core::passes::flows::{FlowRow, FlowsPass};
use roce_core::passes::pfc::{PfcPass, PfcRow};

/// Running totals of one reporting interval.
#[derive(Debug)]
pub struct LiveView {
    decoder: Decoder,
    lines: LineRates,
    /// Each interface's sysfs speed, as the file records it: what a frame's tap says about its line.
    speeds: Vec<Option<u64>>,
    flows: FlowsPass,
    cnps: CnpPass,
    pfc: PfcPass,
    frames: u64,
    by_kind: [u64; Kind::ALL.len()],
    last_ts: u64,
    /// Frames over the whole capture.
    pub total_frames: u64,
    /// Frames of each kind over the whole capture, in `Kind::ALL` order.
    pub total_by_kind: [u64; Kind::ALL.len()],
}

/// One interval's pass results, for the metrics.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// Frames per kind during the interval.
    pub kinds: Vec<(&'static str, u64)>,
    /// Flows seen during the interval.
    pub flows: Vec<FlowRow>,
    /// CNP streams of the interval.
    pub cnps: Vec<CnpRow>,
    /// PFC and PAUSE senders of the interval.
    pub pfc: Vec<PfcRow>,
}

/// One interval's summary: what the console line shows (and what the metrics endpoint would export).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Interval {
    /// Frames during the interval.
    pub frames: u64,
    /// RoCE throughput over the interval.
    pub roce_gbps: f64,
    /// Share of RoCE data packets marked CE, in percent.
    pub ce_percent: f64,
    /// CNPs per second.
    pub cnps_per_s: f64,
    /// PFC XOFF and PAUSE frames per second.
    pub pauses_per_s: f64,
}

impl LiveView {
    /// A view that has seen nothing yet: `lines` gives each interface its line rate for the pause time, from
    /// `speeds` (each interface's recorded speed, by index) unless `--link-speed` was given.
    pub fn new(lines: LineRates, speeds: Vec<Option<u64>>) -> Self {
        LiveView {
            // The ICRC of every frame would double the decode cost and the live line does not show it.
            decoder: Decoder {
                check_icrc: false,
                extra_port: None,
            },
            lines,
            speeds,
            flows: FlowsPass::default(),
            cnps: CnpPass::default(),
            pfc: PfcPass::new(lines),
            frames: 0,
            by_kind: [0; Kind::ALL.len()],
            last_ts: 0,
            total_frames: 0,
            total_by_kind: [0; Kind::ALL.len()],
        }
    }

    /// Counts one captured frame (`len` bytes on the wire, `data` as captured).
    pub fn frame(&mut self, link: LinkType, iface: u32, ts_ns: u64, data: &[u8], len: u32) {
        let rec = Record {
            iface,
            link,
            speed_bps: self.speeds.get(iface as usize).copied().flatten(),
            ts_ns,
            caplen: data.len() as u32,
            len,
            data,
            offset: 0,
        };
        let f: Frame<'_> = self.decoder.decode(self.total_frames + 1, &rec);
        self.decoded(&f);
    }

    /// Counts one frame decoded by the caller, who needs it too (`roce-tracer top`): decoded once.
    pub fn decoded(&mut self, f: &Frame<'_>) {
        let ts_ns = f.ts_ns;
        self.total_frames += 1;
        if let Some(slot) = self.total_by_kind.get_mut(f.kind as usize) {
            *slot += 1;
        }
        if let Some(slot) = self.by_kind.get_mut(f.kind as usize) {
            *slot += 1;
        }
        self.frames += 1;
        self.last_ts = self.last_ts.max(ts_ns);
        self.flows.frame(f);
        self.cnps.frame(f);
        self.pfc.frame(f);
    }

    /// Closes the interval of `seconds` length and starts the next.
    pub fn tick(&mut self, seconds: f64) -> (Interval, Rows) {
        let flows = std::mem::take(&mut self.flows).finish();
        let cnps = std::mem::take(&mut self.cnps).finish();
        let pfc = std::mem::replace(&mut self.pfc, PfcPass::new(self.lines)).finish(self.last_ts);
        let secs = if seconds > 0.0 { seconds } else { 1.0 };
        let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
        let packets: u64 = flows.iter().map(|f| f.packets).sum();
        let ce: u64 = flows.iter().map(|f| f.ce_packets).sum();
        let cnp_count: u64 = cnps.iter().map(|c| c.count).sum();
        let pauses: u64 = pfc
            .iter()
            .map(|p| if p.kind == "pause" { p.frames } else { p.xoff })
            .sum();
        let out = Interval {
            frames: self.frames,
            roce_gbps: bytes as f64 * 8.0 / secs / 1e9,
            ce_percent: if packets == 0 {
                0.0
            } else {
                ce as f64 * 100.0 / packets as f64
            },
            cnps_per_s: cnp_count as f64 / secs,
            pauses_per_s: pauses as f64 / secs,
        };
        self.frames = 0;
        let kinds = Kind::ALL
            .iter()
            .map(|k| {
                (
                    k.as_str(),
                    self.by_kind.get(*k as usize).copied().unwrap_or(0),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        self.by_kind = [0; Kind::ALL.len()];
        (
            out,
            Rows {
                kinds,
                flows,
                cnps,
                pfc,
            },
        )
    }
}

/// The console line.
/// What the capture lost so far, for the end of the line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Losses<'a> {
    /// Frames the engine lost, over every interface.
    pub dropped: u64,
    /// The same per ring (the eBPF engine), empty for the other engines.
    pub by_ring: &'a [u64],
    /// Frames written after a later frame (beyond the merge's window).
    pub late: u64,
}

/// The console line for an interval. With several rings, a loss also says which rings lost how many (a
/// ring that keeps losing is a CPU its reader does not keep up with); late frames are named when there
/// are any.
pub fn line(elapsed_s: u64, i: &Interval, losses: &Losses<'_>) -> String {
    line_at(&format!("{elapsed_s:>5}s"), i, losses)
}

/// The console line for an interval labelled `at` (`roce-tracer top` without a terminal labels it with
/// the bin's capture time).
pub fn line_at(at: &str, i: &Interval, losses: &Losses<'_>) -> String {
    let mut s = format!(
        "[{at}] frames {:>8}  RoCE {:>7.3} Gb/s  CE {:>5.1}%  CNP/s {:>8.0}  pauses/s {:>7.0}  drops {}",
        i.frames, i.roce_gbps, i.ce_percent, i.cnps_per_s, i.pauses_per_s, losses.dropped
    );
    if losses.by_ring.len() > 1 && losses.by_ring.iter().any(|&n| n > 0) {
        let rings: Vec<String> = losses.by_ring.iter().map(u64::to_string).collect();
        s.push_str(&format!(" (rings {})", rings.join("/")));
    }
    if losses.late > 0 {
        s.push_str(&format!("  late {}", losses.late));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::build::{IpSpec, RoceFrame};
    use roce_wire::{ExtHeaders, Opcode};

    fn frame(opcode: Opcode, ecn: u8, psn: u32) -> Vec<u8> {
        let f = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, 2],
                dscp: 26,
                ecn,
                ttl: 64,
                ident: 1,
            },
            sport: 50000,
            bth: testkit::frames::bth(opcode, 0x11, psn),
            ext: ExtHeaders::default(),
            payload: if opcode == Opcode::CNP {
                &[0; 16]
            } else {
                &[7; 1000]
            },
        };
        testkit::frames::emit(&f)
    }

    #[test]
    fn one_interval_counts_what_the_passes_see() {
        let mut v = LiveView::new(LineRates::flag(Some(100_000_000_000)), vec![None]);
        let mut bytes = 0u64;
        for psn in 0..10 {
            let ecn = if psn % 5 == 0 { 3 } else { 2 };
            let f = frame(Opcode::RC_SEND_ONLY, ecn, psn);
            bytes += f.len() as u64;
            v.frame(
                LinkType::ETHERNET,
                0,
                1_000 + u64::from(psn),
                &f,
                f.len() as u32,
            );
        }
        let cnp = frame(Opcode::CNP, 0, 0);
        v.frame(LinkType::ETHERNET, 0, 2_000, &cnp, cnp.len() as u32);
        let (i, rows) = v.tick(2.0);
        assert_eq!(rows.kinds, vec![("roce", 10), ("cnp", 1)]);
        assert_eq!(rows.flows.len(), 1);
        assert_eq!(i.frames, 11);
        assert!((i.ce_percent - 20.0).abs() < 1e-9, "{}", i.ce_percent);
        assert!((i.cnps_per_s - 0.5).abs() < 1e-9);
        assert!((i.roce_gbps - bytes as f64 * 8.0 / 2.0 / 1e9).abs() < 1e-12);
        // The next interval starts empty.
        let (next, rows) = v.tick(1.0);
        assert!(rows.kinds.is_empty() && rows.flows.is_empty());
        assert_eq!(next.frames, 0);
        assert_eq!(next.roce_gbps, 0.0);
        assert_eq!(v.total_frames, 11);
        let drops = |dropped, by_ring: &[u64], late| {
            line(
                3,
                &i,
                &Losses {
                    dropped,
                    by_ring,
                    late,
                },
            )
        };
        assert!(drops(4, &[], 0).ends_with("drops 4"));
        // One ring, or no loss: the line as it always was.
        assert!(drops(4, &[4], 0).ends_with("drops 4"));
        assert!(drops(0, &[0, 0], 0).ends_with("drops 0"));
        assert!(drops(7, &[0, 5, 2], 1).ends_with("drops 7 (rings 0/5/2)  late 1"));
    }
}
