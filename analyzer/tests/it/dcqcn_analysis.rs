//! The DCQCN analysis on captures of a sender paced by a reaction point: the analysis must find the pairing,
//! follow the rate, fit back the knobs the sender used, take the knobs the tracer recorded (both ends, per
//! priority), and leave PFC-paused time out of its comparisons.
//!
//! The sender is paced by the simulator's reaction point (`samples::sim::rp`), written apart from the
//! analyzer's model from the DCQCN description alone, and counting the bytes the sender really sent: were
//! the sender paced by the model it is then replayed against, the model could never be found wrong here.

use analyzer::analysis::dcqcn::{DcqcnPass, DcqcnReport, FlowDcqcn, FlowId, Options};
use roce_capture::blocks;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType};
use roce_core::dcqcn::{Event, EventKind, Knobs};
use roce_core::decode::Decoder;
use roce_core::line::LineRates;
use roce_core::passes::brief::Brief;
use roce_core::passes::pairing::Method;
use roce_core::passes::pfc::PfcPass;
use roce_core::recorded::Recorded;
use roce_wire::build::Vlan;
use roce_wire::ext::AethRepr;
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use samples::sim::rp::{ByteSource, ReactionPoint, RpKnobs};

const LINE_MBPS: f64 = 100_000.0;
const PAYLOAD: usize = 4096;
const SENDER_QP: u32 = 0x51;
const RECEIVER_QP: u32 = 0x7a;
/// Where every capture starts.
const T0: u64 = 1_000_000_000;
const US: u64 = 1_000;

fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(opcode, dest_qp, psn)
}

/// Knob values by their sysfs names, as both sides take them: the simulator's reaction point that paces a
/// [`Sender`], and the analyzer's model when a test tells it the same.
type Settings = [(&'static str, i64)];

/// The analyzer's knobs for `settings`, the rest at their defaults.
fn model_knobs(settings: &Settings) -> Knobs {
    let mut knobs = Knobs::default();
    for &(name, value) in settings {
        knobs.set(name, &value.to_string()).unwrap();
    }
    knobs
}

/// A sender backlogged for `duration_us`, paced at the Rc of the simulator's reaction point under `knobs`,
/// with CNPs arriving at `cnps_us`, an ACK every 16 packets; it sends nothing inside `silent_us` windows (a
/// PFC pause holding it).
#[derive(Debug, Clone)]
struct Sender {
    knobs: RpKnobs,
    cnps_us: Vec<u64>,
    hosts: (u8, u8),
    duration_us: u64,
    silent_us: Vec<(u64, u64)>,
    /// VLAN priority of every frame (untagged when `None`).
    pcp: Option<u8>,
    /// Whether the sender's RP acts on CNPs (`roce_rp/enable/N` on its priority).
    rp_on: bool,
    /// The most the application offers, Mb/s: the sender sends at the lower of this and Rc.
    offered_mbps: f64,
}

impl Sender {
    fn new(settings: &Settings, cnps_us: &[u64]) -> Sender {
        let mut knobs = RpKnobs::default();
        for &(name, value) in settings {
            knobs.set(name, value).unwrap();
        }
        Sender {
            knobs,
            cnps_us: cnps_us.to_vec(),
            hosts: (1, 2),
            duration_us: 3_000,
            silent_us: Vec::new(),
            pcp: None,
            rp_on: true,
            offered_mbps: LINE_MBPS,
        }
    }

    fn frame(&self, src: u8, dst: u8, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
        let vlan = self.pcp.map(|pcp| Vlan {
            pcp,
            dei: false,
            vid: 10,
        });
        crate::common::v4_frame_on(src, dst, 2, vlan, bth, ext, payload)
    }

    /// The frames with their timestamps, in order.
    fn frames(&self) -> Vec<(u64, Vec<u8>)> {
        let (tx, rx) = self.hosts;
        // The simulator keeps time in picoseconds.
        let ps = |ns: u64| ns * 1_000;
        let mut rp = ReactionPoint::new(&self.knobs, LINE_MBPS, ByteSource::Sent);
        let mut out = Vec::new();
        let payload = vec![0u8; PAYLOAD];
        let mut t = 0u64;
        let mut psn = 1000u32;
        let mut next_cnp = 0;
        let mut sink = |_| {};
        while t < self.duration_us * US {
            while next_cnp < self.cnps_us.len() && self.cnps_us[next_cnp] * US <= t {
                let tc = self.cnps_us[next_cnp] * US;
                if self.rp_on {
                    rp.on_cnp(ps(tc), &mut sink);
                }
                let cnp = self.frame(
                    rx,
                    tx,
                    BthRepr::cnp(SENDER_QP),
                    ExtHeaders::default(),
                    &[0; 16],
                );
                out.push((T0 + tc, cnp));
                next_cnp += 1;
            }
            rp.advance(ps(t), &mut sink);
            if let Some(&(_, end)) = self
                .silent_us
                .iter()
                .find(|(a, b)| (a * US..b * US).contains(&t))
            {
                t = end * US;
                continue;
            }
            let data = self.frame(
                tx,
                rx,
                bth(Opcode::RC_RDMA_WRITE_MIDDLE, RECEIVER_QP, psn),
                ExtHeaders::default(),
                &payload,
            );
            let bits = data.len() as f64 * 8.0;
            // The byte counter counts what the pacer spends of Rc on the frame.
            rp.on_sent(ps(t), data.len() as u64, &mut sink);
            out.push((T0 + t, data));
            if psn.is_multiple_of(16) {
                let ack = ExtHeaders {
                    aeth: Some(AethRepr {
                        syndrome: 0x1f,
                        msn: psn,
                    }),
                    ..ExtHeaders::default()
                };
                let a = self.frame(
                    rx,
                    tx,
                    bth(Opcode::RC_ACKNOWLEDGE, SENDER_QP, psn),
                    ack,
                    &[],
                );
                out.push((T0 + t + 500, a));
            }
            psn += 1;
            // Pacing gap: the frame's bits at Rc (Mb/s = bits per µs).
            t += (bits / rp.rate_mbps().min(self.offered_mbps) * 1000.0).ceil() as u64;
        }
        // PFC on priority 3 from the switch: XOFF (the longest pause, refreshed by the XON's end) and XON.
        for &(a, b) in &self.silent_us {
            out.push((T0 + a * US, pfc_frame(0xffff)));
            out.push((T0 + b * US, pfc_frame(0)));
        }
        out.sort_by_key(|(ts, _)| *ts);
        out
    }

    fn pcap(&self) -> Vec<u8> {
        pcap_of(&self.frames())
    }
}

/// PFC on priority 3 from a switch port.
fn pfc_frame(quanta: u16) -> Vec<u8> {
    crate::common::pfc_frame([2, 0, 0, 0, 0xee, 1], 3, quanta)
}

/// A pcap of `frames` (timestamp, bytes), in the order given.
fn pcap_of(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    for (ts, f) in frames {
        out.write_packet(*ts, f, f.len() as u32).unwrap();
    }
    out.into_inner().unwrap()
}

/// A pcapng of `frames` on one interface `eth0`, after a `KNOB` block holding `knobs` as the tracer records
/// them (`eth0/roce_rp/NAME` ...).
fn pcapng_with_knobs(frames: &[(u64, Vec<u8>)], knobs: serde_json::Value) -> Vec<u8> {
    pcapng_with_record(
        frames,
        serde_json::json!({"ts_ns": 0, "captured": ["eth0"], "knobs": knobs}),
    )
}

/// [`pcapng_with_knobs`] with the whole `KNOB` record given (its `addrs` too).
fn pcapng_with_record(frames: &[(u64, Vec<u8>)], record: serde_json::Value) -> Vec<u8> {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    let block = blocks::encode(blocks::KNOBS, &record).unwrap();
    w.write_custom(blocks::PEN, &block, true).unwrap();
    for (ts, f) in frames {
        w.write_packet(0, *ts, f, f.len() as u32).unwrap();
    }
    w.into_inner().unwrap()
}

/// Two paced flows: hosts 1 → 2 with all of [`CNPS_US`], 3 → 4 with its first three.
fn two_flows() -> Vec<u8> {
    let mut frames = Sender::new(&[], &CNPS_US).frames();
    frames.extend(
        Sender {
            hosts: (3, 4),
            ..Sender::new(&[], &CNPS_US[..3])
        }
        .frames(),
    );
    frames.sort_by_key(|(ts, _)| *ts);
    pcap_of(&frames)
}

/// The analysis as `roce-analyzer dcqcn` runs it: the DCQCN pass and, for its pauses, the PFC pass; the
/// knobs recorded in a pcapng are applied when `opts` allows.
fn analyse(bytes: Vec<u8>, opts: &Options) -> DcqcnReport {
    analyse_with_events(bytes, opts).0
}

/// [`analyse`], with every event of every flow's model as it was made.
fn analyse_with_events(bytes: Vec<u8>, opts: &Options) -> (DcqcnReport, Vec<(FlowId, Event)>) {
    let mut r = CaptureReader::from_reader("paced", Box::new(std::io::Cursor::new(bytes))).unwrap();
    let dec = Decoder::default();
    let mut pass = DcqcnPass::new(opts.bin_ns, opts.lines);
    let mut pfc = PfcPass::new(opts.lines);
    let (mut n, mut last) = (0, 0);
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        let f = dec.decode(n, &rec);
        pass.frame(&Brief::of(&f));
        pfc.frame(&f);
        last = last.max(f.ts_ns);
    }
    let mut opts = opts.clone();
    opts.apply_recorded_knobs(&Recorded::read(r.custom_blocks()));
    let (_, pauses) = pfc.finish_with_intervals(last);
    let mut events = Vec::new();
    let (report, _) = pass
        .finish_with_events(&opts, &pauses, Some(&mut |id, e| events.push((*id, *e))))
        .unwrap();
    (report, events)
}

/// The events of one flow's model.
fn events_of(events: &[(FlowId, Event)], f: &FlowDcqcn) -> Vec<Event> {
    events
        .iter()
        .filter(|(id, _)| {
            (id.sender, id.receiver, id.receiver_qp)
                == (f.summary.sender, f.summary.receiver, f.summary.receiver_qp)
        })
        .map(|(_, e)| *e)
        .collect()
}

const CNPS_US: [u64; 6] = [100, 150, 200, 1000, 1040, 2000];

fn bins20() -> Options {
    Options {
        bin_ns: Some(20_000),
        ..Options::default()
    }
}

/// The model's Rc at `t` (the last event at or before it), Gb/s.
fn model_rc_at(f: &FlowDcqcn, t: u64) -> f64 {
    f.model
        .iter()
        .take_while(|m| m.t_ns <= t)
        .last()
        .map_or(LINE_MBPS / 1000.0, |m| m.rc_gbps)
}

#[test]
fn model_follows_a_sender_paced_by_the_simulators_reaction_point() {
    let report = analyse(Sender::new(&[], &CNPS_US).pcap(), &bins20());
    assert_eq!(report.flows.len(), 1, "{:?}", report.unpaired_cnps);
    let f = &report.flows[0];
    assert_eq!(
        (f.summary.sender_qp, f.summary.pairing),
        (Some(SENDER_QP), Some(Method::ReverseTraffic))
    );
    assert_eq!(f.summary.cnps, CNPS_US.len() as u64);
    assert!(report.unpaired_cnps.is_empty());
    // Cuts: one per decrease period that saw CNPs (100, 150, 200, 1000/1040 in one or two, 2000).
    assert!(f.cuts.len() >= 5, "{:?}", f.cuts);
    // The observed rate tracks the model within 5 % in at least 95 % of the bins after the first CNP
    // (excluding the bin holding a cut, where the rate changes mid-bin).
    let mut ok = 0;
    let mut pacing_ok = 0;
    let mut total = 0;
    for o in f
        .observed
        .iter()
        .filter(|o| o.t_ns >= T0 + 120_000 && o.gbps > 0.0)
    {
        let rc = model_rc_at(f, o.t_ns);
        let changes = f
            .model
            .iter()
            .any(|m| m.t_ns > o.t_ns && m.t_ns < o.t_ns + 20_000);
        if changes {
            continue;
        }
        total += 1;
        if (o.gbps - rc).abs() <= 0.05 * rc {
            ok += 1;
        }
        // The pacing-gap rate shows the limiter too: frame bits over the gaps between frames.
        let pacing = o
            .pacing_gbps
            .expect("consecutive packets in every busy bin");
        if (pacing - rc).abs() <= 0.05 * rc {
            pacing_ok += 1;
        }
    }
    assert!(
        pacing_ok as f64 >= 0.95 * total as f64,
        "pacing: {pacing_ok} of {total} bins within 5 %"
    );
    assert!(
        total > 50 && ok as f64 >= 0.95 * total as f64,
        "{ok} of {total} bins within 5 %"
    );
    let fit = f.summary.fit.expect("fitted");
    assert_eq!((fit.dce_tcp_g, fit.rpg_gd), (1019, 11), "{fit:?}");
    // A search, not the whole grid of 40 pairs.
    assert!(fit.candidates < 30, "{fit:?}");
    // Observed cuts: the first burst's low point is a real cut.
    let first = f.observed_cuts.first().expect("an observed cut");
    assert!(first.ratio < 0.8 && first.ratio > 0.2, "{first:?}");
    // No PFC in this capture: nothing left out.
    assert_eq!(f.summary.paused_bins, 0);
    assert!(f.observed.iter().all(|o| !o.paused));
}

#[test]
fn fit_recovers_a_different_cut_factor() {
    // The sender used rpg_gd = 10 (cuts by alpha, not alpha/2); the analysis is told the default 11.
    let report = analyse(Sender::new(&[("rpg_gd", 10)], &CNPS_US).pcap(), &bins20());
    let fit = report.flows[0].summary.fit.expect("fitted");
    assert_eq!(fit.rpg_gd, 10, "{fit:?}");
    assert!(fit.error_gbps < fit.given_error_gbps / 2.0, "{fit:?}");
}

/// The fit's grid (docs/dcqcn.md): alpha gains and cut factors.
const FIT_GAINS: [u32; 8] = [895, 959, 991, 1007, 1015, 1019, 1021, 1023];
const FIT_CUTS: std::ops::RangeInclusive<u32> = 9..=13;

/// Senders whose alpha gain lies between two of the grid's. The fit searches the grid by coordinate descent
/// from the given knobs (docs/dcqcn.md), so what it must report is a grid pair that explains the rate better
/// than the given knobs, whose error is that pair's own, and that no change of one coordinate improves.
/// (It need not be the grid's best, nor a neighbour of the sender's gain: gain and cut factor trade off
/// along a valley, and for 999/11 the descent stops at 1021/12, 1.68 Gb/s, where 991/11 gives 1.19.)
#[test]
fn a_gain_between_grid_points_is_fitted_to_a_coordinate_wise_best_of_the_grid() {
    for (gain, cut) in [(1011, 10), (999, 11)] {
        let bytes = Sender::new(&[("dce_tcp_g", gain), ("rpg_gd", cut)], &CNPS_US).pcap();
        let fit = analyse(bytes.clone(), &bins20()).flows[0]
            .summary
            .fit
            .expect("fitted");
        let sender = format!("sender {gain}/{cut}: {fit:?}");
        assert!(FIT_GAINS.contains(&fit.dce_tcp_g), "{sender}");
        assert!(FIT_CUTS.contains(&fit.rpg_gd), "{sender}");
        assert!(fit.error_gbps < fit.given_error_gbps, "{sender}");
        // A grid pair's error: the model's when told that pair.
        let error = |g: u32, gd: u32| {
            let knobs = model_knobs(&[("dce_tcp_g", g.into()), ("rpg_gd", gd.into())]);
            let opts = Options { knobs, ..bins20() };
            let report = analyse(bytes.clone(), &opts);
            report.flows[0]
                .summary
                .fit
                .expect("fitted")
                .given_error_gbps
        };
        let own = error(fit.dce_tcp_g, fit.rpg_gd);
        assert!((own - fit.error_gbps).abs() < 1e-9, "{own}, {sender}");
        for gd in FIT_CUTS {
            let e = error(fit.dce_tcp_g, gd);
            assert!(e >= own - 1e-9, "rpg_gd {gd} does better ({e}), {sender}");
        }
        for g in FIT_GAINS {
            let e = error(g, fit.rpg_gd);
            assert!(e >= own - 1e-9, "dce_tcp_g {g} does better ({e}), {sender}");
        }
    }
}

#[test]
fn knobs_recorded_in_the_capture_are_the_default() {
    // The tracer records the sender's knobs in a pcapng custom block; the analysis must use them when the user
    // gives none. The sender used rpg_gd = 10.
    let frames = Sender::new(&[("rpg_gd", 10)], &CNPS_US).frames();
    let bytes = pcapng_with_knobs(
        &frames,
        serde_json::json!({"eth0/roce_rp/rpg_gd": "10", "eth0/roce_np/cnp_dscp": "48"}),
    );
    let report = analyse(bytes, &bins20());
    assert_eq!(report.knobs.rpg_gd, 10);
    assert!(
        report.knob_source.contains("eth0"),
        "{}",
        report.knob_source
    );
    let fit = report.flows[0].summary.fit.expect("fitted");
    // With the recorded knobs the model already explains the rate: the fit finds nothing better.
    assert_eq!(fit.rpg_gd, 10, "{fit:?}");
    assert!(fit.given_error_gbps <= fit.error_gbps + 1e-9, "{fit:?}");
}

/// The notification point's knobs and both sides' per-priority enables are read from the recording (they were
/// dropped), and reach the report for the checks of the receiver's CNPs.
#[test]
fn the_notification_point_knobs_are_read_not_dropped() {
    let frames = Sender::new(&[], &CNPS_US).frames();
    let bytes = pcapng_with_knobs(
        &frames,
        serde_json::json!({
            "eth0/roce_np/min_time_between_cnps": "8",
            "eth0/roce_np/cnp_dscp": "46",
            "eth0/roce_np/cnp_802p_prio": "7",
            "eth0/roce_np/enable/3": "1",
            "eth0/roce_rp/enable/3": "1",
            "eth0/roce_rp/dce_tcp_future": "2",
        }),
    );
    let report = analyse(bytes, &bins20());
    assert_eq!(
        (
            report.np.min_time_between_cnps,
            report.np.cnp_dscp,
            report.np.cnp_802p_prio
        ),
        (8, 46, 7)
    );
    assert_eq!(report.np_enable.get(3), Some(true));
    assert_eq!(report.rp_enable.get(3), Some(true));
    assert_eq!(report.ignored_knobs, ["roce_rp/dce_tcp_future"]);
}

/// NVIDIA's `rpg_max_rate`, recorded by the tracer, is the model's maximum: the recorded value was dropped and
/// the line rate stood in, so the model climbed past the rate the sender was held to.
#[test]
fn a_recorded_rpg_max_rate_caps_the_model() {
    let frames = Sender::new(&[("rpg_max_rate", 60_000)], &[100]).frames();
    let bytes = pcapng_with_knobs(
        &frames,
        serde_json::json!({"eth0/roce_rp/rpg_max_rate": "60000"}),
    );
    let report = analyse(bytes, &bins20());
    assert_eq!(report.knobs.rpg_max_rate, 60_000);
    let f = &report.flows[0];
    let incs: Vec<_> = f.model.iter().filter(|m| m.event.is_increase()).collect();
    assert!(!incs.is_empty());
    assert!(incs.iter().all(|m| m.rt_gbps <= 60.0), "{:?}", f.model);
    // The first increase moves Rc halfway to 60 Gb/s, not to the line rate.
    let cut = f.cuts.first().unwrap();
    assert!(
        (incs[0].rc_gbps - (cut.rc_after_gbps + 60.0) / 2.0).abs() < 1e-9,
        "{:?}",
        f.model
    );
}

/// `roce_rp/enable/N` = 0 on the flow's priority: the NIC ignores its CNPs (rp_cnp_ignored), so the model must
/// not cut; it used to, and then called the unthrottled sender one that ignores its limiter.
#[test]
fn a_flow_whose_rp_is_off_on_its_priority_is_not_cut() {
    let sender = Sender {
        pcp: Some(3),
        rp_on: false,
        ..Sender::new(&[], &CNPS_US)
    };
    let bytes = pcapng_with_knobs(
        &sender.frames(),
        serde_json::json!({"eth0/roce_rp/enable/3": "0", "eth0/roce_rp/enable/4": "1"}),
    );
    let report = analyse(bytes, &bins20());
    let f = &report.flows[0];
    assert_eq!(
        (f.summary.priority, f.summary.rp_enabled),
        (Some(3), Some(false))
    );
    assert_eq!(f.summary.cnps, CNPS_US.len() as u64);
    assert!(f.cuts.is_empty(), "{:?}", f.cuts);
    assert_eq!(f.summary.above_model_fraction, 0.0);
    // The same capture on priority 4, where the RP is on: cut as usual.
    let sender = Sender {
        pcp: Some(4),
        ..Sender::new(&[], &CNPS_US)
    };
    let bytes = pcapng_with_knobs(
        &sender.frames(),
        serde_json::json!({"eth0/roce_rp/enable/3": "0", "eth0/roce_rp/enable/4": "1"}),
    );
    let f = &analyse(bytes, &bins20()).flows[0];
    assert_eq!(f.summary.rp_enabled, Some(true));
    assert!(!f.cuts.is_empty());
}

/// A flow that recovers is released at the maximum (NVIDIA's `rpg_max_rate`), so congested again later it is
/// cut by half, as its NIC (and the simulator's) did; kept engaged by default, the model cut it by 0.2 %.
#[test]
fn a_recovered_flow_congested_again_is_cut_by_half() {
    let sender = Sender {
        duration_us: 8_000,
        ..Sender::new(&[], &[100, 6_000])
    };
    let report = analyse(sender.pcap(), &bins20());
    let f = &report.flows[0];
    assert!(
        f.model
            .iter()
            .any(|m| m.event == EventKind::Released && m.t_ns < T0 + 6_000 * US),
        "{:?}",
        f.model
    );
    assert_eq!(f.cuts.len(), 2, "{:?}", f.cuts);
    let second = f.cuts.get(1).unwrap();
    let kept = second.rc_after_gbps / second.rc_before_gbps;
    assert!((kept - 0.51).abs() < 0.01, "{second:?}");
    // The sender's NIC did the same: the observed rate after the second burst halves too.
    let seen = f
        .observed_cuts
        .iter()
        .find(|c| c.t_ns >= T0 + 6_000 * US)
        .expect("an observed cut after the second CNP");
    assert!(seen.ratio < 0.7, "{seen:?}");
    assert!(
        f.summary.above_model_fraction < 0.05,
        "{}",
        f.summary.above_model_fraction
    );
}

/// PFC holds the sender from 110 to 150 µs, right after a CNP at 100 µs. The bins that overlap the pause show
/// the pause, not the rate limiter: they must stay out of the observed cut (whose low point was the paused
/// bin, a quarter of the rate before) and of the model comparisons.
#[test]
fn pfc_paused_bins_are_left_out_of_the_comparisons() {
    let sender = Sender {
        silent_us: vec![(110, 150)],
        ..Sender::new(&[], &[100])
    };
    let report = analyse(sender.pcap(), &bins20());
    let f = &report.flows[0];
    let paused: Vec<u64> = f
        .observed
        .iter()
        .filter(|o| o.paused)
        .map(|o| (o.t_ns - T0) / US)
        .collect();
    // The busy bins that overlap 110..150 µs (the one at 120 µs carried nothing, so it is not in the series).
    assert_eq!(paused, [100, 140]);
    assert_eq!(f.summary.paused_bins, 2);
    let cut = f.observed_cuts.first().expect("an observed cut");
    assert!(
        cut.lag_ns >= 60_000,
        "the low point is after the pause: {cut:?}"
    );
    assert!((cut.ratio - 0.51).abs() < 0.08, "{cut:?}");
    let fit = f.summary.fit.expect("fitted");
    let busy_unpaused = f
        .observed
        .iter()
        .filter(|o| o.t_ns >= T0 + 100 * US && o.gbps > 0.0 && !o.paused)
        .count();
    // At 50 Gb/s a bin holds far more than the frames a stretch needs: one stretch per bin, the paused left out.
    assert_eq!(fit.stretches_compared, busy_unpaused);
    assert_eq!(f.summary.stretches_compared, busy_unpaused);
}

/// Only the flows with the most CNPs are fitted, as many as `fit_flows` says; the others keep their model.
#[test]
fn the_fit_goes_to_the_flows_with_the_most_cnps() {
    let bytes = two_flows();
    for fit_flows in [0, 1, 2] {
        let opts = Options {
            fit_flows,
            ..bins20()
        };
        let report = analyse(bytes.clone(), &opts);
        let fitted: Vec<(u64, bool)> = report
            .flows
            .iter()
            .map(|f| (f.summary.cnps, f.summary.fit.is_some()))
            .collect();
        let want: Vec<(u64, bool)> = [(6, fit_flows >= 1), (3, fit_flows >= 2)].into();
        assert_eq!(fitted, want, "fit_flows {fit_flows}");
        assert!(report.flows.iter().all(|f| !f.model.is_empty()));
    }
}

/// About 75 years, in ns: what a bit flip in the seconds field of a pcap record can add.
const YEARS_NS: u64 = 75 * 365 * 24 * 3_600 * 1_000_000_000;

/// The frames of a [`Sender`] and, last, one more data frame of the same flow stamped years later.
fn capture_with_a_far_frame(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut frames = frames.to_vec();
    let (ts, last) = frames.last().cloned().unwrap();
    frames.push((ts + YEARS_NS, last));
    pcap_of(&frames)
}

/// Years between two frames cost the model nothing: a released limiter has no timers to walk.
#[test]
fn a_timestamp_years_ahead_costs_the_model_nothing() {
    let frames = Sender::new(&[], &CNPS_US).frames();
    let opts = Options {
        fit_flows: 1,
        ..Options::default()
    };
    let (normal, n_events) = analyse_with_events(pcap_of(&frames), &opts);
    let (far, f_events) = analyse_with_events(capture_with_a_far_frame(&frames), &opts);
    let (n, f) = (&normal.flows[0], &far.flows[0]);
    assert_eq!(
        (n.summary.model_stopped_ns, f.summary.model_stopped_ns),
        (None, None)
    );
    assert!(far.limits().is_empty(), "{:?}", far.limits());
    // Up to the normal capture's end the models are the same; the far one then finishes the recovery and
    // releases the limiter, and nothing happens in the years after.
    let end = frames.last().unwrap().0;
    let (n_ev, f_ev) = (events_of(&n_events, n), events_of(&f_events, f));
    let early: Vec<_> = f_ev.iter().filter(|e| e.t_ns <= end).copied().collect();
    assert_eq!(early, n_ev);
    let last = f_ev.last().unwrap();
    assert_eq!(last.kind, EventKind::Released);
    assert!(last.t_ns < end + 100_000_000, "{last:?}");
    assert_eq!(f.cuts, n.cuts);
    assert_eq!(f.summary.cnps, n.summary.cnps);
}

#[test]
fn a_timestamp_at_the_end_of_time_is_survived() {
    // A pcapng timestamp too large for nanoseconds saturates to u64::MAX; every bin edge and window the
    // analysis derives from it must saturate too (the fuzzer found an overflow in the observed cuts).
    let frames = Sender::new(&[], &CNPS_US).frames();
    let mut ng = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    ng.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    for (ts, f) in &frames {
        ng.write_packet(0, *ts, f, f.len() as u32).unwrap();
    }
    let (_, last) = frames.last().unwrap();
    ng.write_packet(0, u64::MAX, last, last.len() as u32)
        .unwrap();
    let bytes = ng.into_inner().unwrap();
    for bin_ns in [None, Some(1_000_000_000)] {
        let opts = Options {
            bin_ns,
            fit_flows: 1,
            ..Options::default()
        };
        let report = analyse(bytes.clone(), &opts);
        let f = &report.flows[0];
        assert_eq!(f.summary.cnps, CNPS_US.len() as u64);
        assert!(!f.cuts.is_empty());
    }
}

/// The guard stops a model that would take more steps than it allows, and says so loudly; up to the stop the
/// model is the whole one.
#[test]
fn the_guard_stops_a_model_out_loud() {
    let bytes = Sender::new(&[], &CNPS_US).pcap();
    let (whole, w_events) = analyse_with_events(bytes.clone(), &Options::default());
    let w = events_of(&w_events, &whole.flows[0]);
    assert!(w.len() > 20);
    let opts = Options {
        max_model_steps: Some(10),
        ..Options::default()
    };
    let (cut, c_events) = analyse_with_events(bytes, &opts);
    let c = &cut.flows[0];
    let stop = c.summary.model_stopped_ns.expect("stopped");
    let want: Vec<_> = w.iter().filter(|e| e.t_ns <= stop).copied().collect();
    assert_eq!(events_of(&c_events, c), want);
    let limits = cut.limits();
    assert!(
        limits
            .iter()
            .any(|l| l.contains("CUT SHORT") && l.contains("1 OF 1 FLOWS")),
        "{limits:?}"
    );
}

#[test]
fn a_fixed_bin_too_fine_for_the_span_widens_instead_of_failing() {
    let frames = Sender::new(&[], &CNPS_US).frames();
    let opts = Options {
        bin_ns: Some(10_000),
        ..Options::default()
    };
    // At 10 µs, 75 years would be 2.4e14 bins.
    let report = analyse(capture_with_a_far_frame(&frames), &opts);
    assert_eq!(report.requested_bin_ns, Some(10_000));
    assert!(report.bin_ns > 10_000);
    let bins: usize = report.flows.iter().map(|f| f.observed.len()).sum();
    assert!(bins <= roce_core::passes::rates::MAX_TOTAL_BINS, "{bins}");
    let limits = report.limits();
    assert!(
        limits.iter().any(|l| l.contains("requested 10000 ns")),
        "{limits:?}"
    );
}

/// The model series is decimated per column: it holds only events of the model, in order, and in every column
/// the first and last event and Rc's, Rt's and alpha's lowest and highest values, so a chart drawn through it
/// shows what one drawn through every event shows; and it stays at a few points per column.
#[test]
fn the_model_series_is_decimated_per_column_without_losing_what_a_chart_shows() {
    // A dense train (a CNP every 5 µs for a millisecond: cuts at every decrease check), then single ones.
    let mut cnps: Vec<u64> = (0..200).map(|k| 100 + 5 * k).collect();
    cnps.extend([9_000, 9_003, 20_000, 20_050]);
    let sender = Sender {
        duration_us: 40_000,
        ..Sender::new(&[], &cnps)
    };
    let (report, events) = analyse_with_events(sender.pcap(), &bins20());
    let f = &report.flows[0];
    let all = events_of(&events, f);
    let w = report.model_column_ns;
    assert!(
        w > 1 && all.len() > f.model.len(),
        "{} of {}",
        f.model.len(),
        all.len()
    );
    let column = |t: u64| (t - T0) / w;
    let mut from = 0;
    let mut columns = 0;
    while from < all.len() {
        let c = column(all[from].t_ns);
        let to = from
            + all[from..]
                .iter()
                .take_while(|e| column(e.t_ns) == c)
                .count();
        let (full, kept): (&[Event], Vec<_>) = (
            &all[from..to],
            f.model.iter().filter(|m| column(m.t_ns) == c).collect(),
        );
        assert!(!kept.is_empty() && kept.len() <= 8);
        assert_eq!(kept.first().unwrap().t_ns, full[0].t_ns);
        let last = full.last().unwrap();
        let k = kept.last().unwrap();
        assert_eq!(
            (k.t_ns, k.event, k.rc_gbps),
            (last.t_ns, last.kind, last.rc_mbps / 1000.0)
        );
        let extremes = |v: &mut dyn Iterator<Item = f64>| {
            v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            })
        };
        assert_eq!(
            extremes(&mut kept.iter().map(|m| m.rc_gbps)),
            extremes(&mut full.iter().map(|e| e.rc_mbps / 1000.0))
        );
        assert_eq!(
            extremes(&mut kept.iter().map(|m| m.alpha)),
            extremes(&mut full.iter().map(|e| e.alpha))
        );
        columns += 1;
        from = to;
    }
    assert!(f.model.windows(2).all(|p| p[0].t_ns <= p[1].t_ns));
    assert!(f.model.len() <= 8 * columns);
    // The flow's summary is over every event, not the series.
    assert_eq!(f.summary.model_events, all.len() as u64);
    let min_rc = all
        .iter()
        .map(|e| e.rc_mbps / 1000.0)
        .fold(f64::INFINITY, f64::min);
    let max_alpha = all.iter().map(|e| e.alpha).fold(0.0, f64::max);
    assert_eq!(
        (f.summary.min_rc_gbps, f.summary.max_alpha),
        (Some(min_rc), Some(max_alpha))
    );
}

/// The aggregate of the report's flows is the sum of their busy bins, bin by bin.
#[test]
fn the_aggregate_sums_the_flows_bin_by_bin() {
    let report = analyse(two_flows(), &bins20());
    assert_eq!(report.flows.len(), 2);
    let mut want: std::collections::BTreeMap<u64, f64> = Default::default();
    for f in &report.flows {
        for o in &f.observed {
            *want.entry(o.t_ns).or_default() += o.gbps;
        }
    }
    let got: Vec<(u64, f64)> = report.aggregate.iter().map(|a| (a.t_ns, a.gbps)).collect();
    assert_eq!(got.len(), want.len());
    for ((t, g), (wt, wg)) in got.iter().zip(&want) {
        assert_eq!(t, wt);
        assert!((g - wg).abs() < 1e-9, "{t}: {g} vs {wg}");
    }
    assert!(
        report.aggregate.iter().any(|a| a.gbps > 150.0),
        "both flows at once"
    );
}

/// `report --model-table` writes every event of every flow's model to model_events.parquet (through a scratch
/// file, never whole in memory), while model.parquet holds the decimated series.
#[test]
fn the_report_writes_every_model_event_on_request() {
    use crate::common::{analyzer, run, workspace};
    use analyzer::analysis::{self as pipeline, PipelineOptions};
    use polars::prelude::{ParquetReader, SerReader};

    let sample = workspace().join("samples/captures/incast_dcqcn.pcapng");
    let dir = tempfile::tempdir().unwrap();
    let out = run(analyzer()
        .args([
            "report",
            "--link-speed",
            "25G",
            "--no-fit",
            "--model-table",
            "-o",
        ])
        .arg(dir.path())
        .arg(&sample));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::File::open(dir.path().join("model_events.parquet")).unwrap();
    let table = ParquetReader::new(file).finish().unwrap();
    assert!(!dir.path().join(".model_events.tmp").exists());
    // The same analysis in this process, counting the events as they come.
    let mut capture = roce_capture::Capture::open_file(&sample).unwrap();
    let opts = PipelineOptions {
        dcqcn: Options {
            lines: LineRates::flag(Some(25_000_000_000)),
            fit: false,
            ..Options::default()
        },
        ..PipelineOptions::default()
    };
    let mut events = 0usize;
    let a =
        pipeline::run_with_model_events(&mut capture, &opts, |_| {}, Some(&mut |_, _| events += 1))
            .unwrap();
    assert!(events > 100, "{events}");
    // The taps are named as everywhere else: FILE:IFACE.
    let f = &a.dcqcn.flows[0];
    assert!(
        f.summary.tap.ends_with("incast_dcqcn.pcapng:sw1-r"),
        "{}",
        f.summary.tap
    );
    assert_eq!(f.summary.cnp_tap.as_deref(), Some(f.summary.tap.as_str()));
    assert_eq!(table.height(), events);
    let cols: Vec<String> = table
        .get_column_names()
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        cols,
        [
            "sender",
            "receiver",
            "receiver_qp",
            "t_ns",
            "event",
            "cause",
            "rc_before_gbps",
            "rc_gbps",
            "rt_gbps",
            "alpha"
        ]
    );
    let decimated: usize = a.dcqcn.flows.iter().map(|f| f.model.len()).sum();
    let file = std::fs::File::open(dir.path().join("model.parquet")).unwrap();
    assert_eq!(
        ParquetReader::new(file).finish().unwrap().height(),
        decimated
    );
    // A table of a row per model event is Parquet only; the small ones have their CSV too.
    assert!(!dir.path().join("model.csv").exists() && !dir.path().join("cuts.csv").exists());
    assert!(dir.path().join("dcqcn_flows.csv").exists());
}

/// A flow and its CNPs seen at two taps (a switch's ingress and egress, 300 ns apart): each CNP reaches the
/// model once, from one tap, which the report names; the model is the one-tap model.
#[test]
fn cnps_seen_at_two_taps_are_counted_once() {
    let frames = Sender::new(&[], &CNPS_US).frames();
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("in"), None)
        .unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("out"), None)
        .unwrap();
    let mut both: Vec<(u64, u32, &Vec<u8>)> = frames
        .iter()
        .flat_map(|(ts, f)| [(*ts, 0, f), (ts + 300, 1, f)])
        .collect();
    both.sort_by_key(|x| (x.0, x.1));
    for (ts, iface, f) in both {
        w.write_packet(iface, ts, f, f.len() as u32).unwrap();
    }
    let two = analyse(w.into_inner().unwrap(), &bins20());
    let one = analyse(pcap_of(&frames), &bins20());
    let (t, o) = (&two.flows[0], &one.flows[0]);
    assert_eq!(t.summary.cnps, CNPS_US.len() as u64);
    assert_eq!((t.summary.iface, t.summary.cnp_iface), (0, Some(0)));
    assert_eq!(t.cuts, o.cuts);
    assert!(two.unpaired_cnps.is_empty(), "{:?}", two.unpaired_cnps);
}

/// Knobs and CNPs that squeeze the model under 1 Gb/s and keep it there (clamp_tgt_rate: every cut also lowers
/// the target, so only the additive steps raise it): fewer than one 4 KiB frame per 10 µs bin.
const SQUEEZE: &Settings = &[("clamp_tgt_rate", 1)];

/// [`SQUEEZE`]'s CNPs: eight within one alpha update, so alpha stays near 1 and each cut about halves Rc, to
/// 0.7 Gb/s; the additive steps bring it back to 1.3 Gb/s in 6 ms.
fn squeezing_cnps() -> Vec<u64> {
    (0..8).map(|i| 100 + 5 * i).collect()
}

fn bins10() -> Options {
    Options {
        bin_ns: Some(10_000),
        ..Options::default()
    }
}

/// A sender paced exactly at a model Rc below one frame per bin: every bin that holds a frame reads 3.4 Gb/s,
/// far above Rc, and the per-bin comparison called this obedient sender one that ignores its CNPs
/// (incast_clamp's false `cnps_without_cuts`). Over stretches that hold several frames it is where the model
/// says.
#[test]
fn a_sender_paced_below_a_frame_per_bin_is_not_above_its_model() {
    let sender = Sender {
        duration_us: 6_000,
        ..Sender::new(SQUEEZE, &squeezing_cnps())
    };
    let opts = Options {
        knobs: model_knobs(SQUEEZE),
        ..bins10()
    };
    let report = analyse(sender.pcap(), &opts);
    let f = &report.flows[0];
    assert!(
        f.summary.min_rc_gbps.unwrap() < 1.0,
        "{:?}",
        f.summary.min_rc_gbps
    );
    // The quantisation the rule must see through: most busy bins after the squeeze read above 3 Gb/s.
    let late: Vec<f64> = f
        .observed
        .iter()
        .filter(|o| o.t_ns > T0 + 1_000 * US)
        .map(|o| o.gbps)
        .collect();
    assert!(
        late.iter().filter(|&&g| g > 3.0).count() * 2 > late.len(),
        "{late:?}"
    );
    assert!(
        f.summary.stretches_compared >= 5,
        "{}",
        f.summary.stretches_compared
    );
    assert!(
        f.summary.above_model_fraction < 0.1,
        "{}",
        f.summary.above_model_fraction
    );
}

/// The same CNPs to a sender whose RP ignores them, offering 2 Gb/s (a frame every 17 µs, also less than one
/// per bin): the model squeezes it under 1 Gb/s, it keeps its 2 Gb/s, and the finding must still fire.
#[test]
fn a_slow_sender_that_ignores_its_cnps_is_still_found() {
    use analyzer::analysis::{self as pipeline, PipelineOptions};
    let sender = Sender {
        duration_us: 6_000,
        rp_on: false,
        offered_mbps: 2_000.0,
        ..Sender::new(SQUEEZE, &squeezing_cnps())
    };
    let bytes = pcapng_with_knobs(
        &sender.frames(),
        serde_json::json!({"eth0/roce_rp/clamp_tgt_rate": "1"}),
    );
    let report = analyse(bytes.clone(), &bins10());
    let f = &report.flows[0];
    assert!(
        f.summary.stretches_compared >= 5,
        "{}",
        f.summary.stretches_compared
    );
    assert!(
        f.summary.above_model_fraction > 0.9,
        "{}",
        f.summary.above_model_fraction
    );
    // Through the whole analysis, as `report` runs it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ignores.pcapng");
    std::fs::write(&path, &bytes).unwrap();
    let mut reader = roce_capture::Capture::open_file(&path).unwrap();
    let mut opts = PipelineOptions::default();
    opts.dcqcn.bin_ns = Some(10_000);
    let a = pipeline::run(&mut reader, &opts, |_| {}).unwrap();
    let codes: Vec<&str> = a.findings.iter().map(|f| f.code).collect();
    assert!(codes.contains(&"cnps_without_cuts"), "{:?}", a.findings);
}

/// `enable/N` is a host's own: the sender's recorded `roce_rp/enable/3` = 0 (its tap records its addresses)
/// means its NIC ignores its CNPs, and the model does not cut it; the same knob recorded for another host says
/// nothing of this sender, so its flow is modeled (and held against what its CNPs should have done).
#[test]
fn a_hosts_enable_knobs_speak_for_that_host_only() {
    let sender = Sender {
        pcp: Some(3),
        rp_on: false,
        ..Sender::new(&[], &CNPS_US)
    };
    let record = |addr: &str| {
        serde_json::json!({"ts_ns": 0, "captured": ["eth0"],
            "knobs": {"eth0/roce_rp/enable/3": "0", "eth0/roce_np/enable/3": "0"},
            "addrs": {"eth0": [addr]}})
    };
    let own = analyse(
        pcapng_with_record(&sender.frames(), record("10.0.0.1")),
        &bins20(),
    );
    let f = &own.flows[0];
    assert_eq!(
        (f.summary.rp_enabled, f.summary.np_enabled),
        (Some(false), None)
    );
    assert!(f.cuts.is_empty(), "{:?}", f.cuts);
    let other = analyse(
        pcapng_with_record(&sender.frames(), record("10.0.0.9")),
        &bins20(),
    );
    let f = &other.flows[0];
    assert_eq!((f.summary.rp_enabled, f.summary.np_enabled), (None, None));
    assert!(!f.cuts.is_empty());
    // The receiver's own NP knob, recorded with its address.
    let np_off = analyse(
        pcapng_with_record(&sender.frames(), record("10.0.0.2")),
        &bins20(),
    );
    assert_eq!(np_off.flows[0].summary.np_enabled, Some(false));
}

/// Captures of both ends merged (one record here): the first captured interface is the receiver's, whose
/// `rpg_gd` = 9 would cut deeper, yet the flow's model runs with the sender's own recorded knobs, which paced
/// it, and says so.
#[test]
fn a_flows_model_runs_with_its_senders_own_knobs() {
    let sender = Sender::new(&[], &[100]);
    let record = serde_json::json!({"ts_ns": 0, "captured": ["eth1"],
        "knobs": {"eth0/roce_rp/rpg_gd": "11", "eth1/roce_rp/rpg_gd": "9"},
        "addrs": {"eth0": ["10.0.0.1"], "eth1": ["10.0.0.2"]}});
    let report = analyse(pcapng_with_record(&sender.frames(), record), &bins20());
    assert!(
        report.knob_source.contains("eth1"),
        "{}",
        report.knob_source
    );
    assert_eq!(report.knobs.rpg_gd, 9);
    let f = &report.flows[0];
    assert_eq!(f.summary.knobs_of, "10.0.0.1's own (eth0)");
    let cut = f.cuts.first().unwrap();
    assert!(
        (cut.rc_after_gbps / cut.rc_before_gbps - 0.51).abs() < 0.01,
        "{cut:?}"
    );
    // The fit starts from, and keeps, the sender's own knobs, which paced it.
    let fit = f.summary.fit.expect("fitted");
    assert_eq!((fit.dce_tcp_g, fit.rpg_gd), (1019, 11));
}
