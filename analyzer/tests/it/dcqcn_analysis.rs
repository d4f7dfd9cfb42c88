//! The DCQCN analysis on a capture whose sender really was paced by the model: the analysis must find the
//! pairing, follow the rate, and fit back the knobs the sender used.

use analyzer::analysis::dcqcn::{DcqcnPass, DcqcnReport, Options};
use roce_capture::blocks;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType};
use roce_core::dcqcn::{Knobs, Profile, Rp};
use roce_core::decode::Decoder;
use roce_core::passes::pairing::Method;
use roce_wire::ext::AethRepr;
use roce_wire::{BthRepr, ExtHeaders, Opcode};

const LINE_MBPS: f64 = 100_000.0;
const PAYLOAD: usize = 4096;
const SENDER_QP: u32 = 0x51;
const RECEIVER_QP: u32 = 0x7a;

fn frame(src: u8, dst: u8, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    crate::common::v4_frame(src, dst, 2, bth, ext, payload)
}

fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(opcode, dest_qp, psn)
}

/// 3 ms of a backlogged sender paced at the model's Rc, CNPs at `cnps_us`, an ACK every 16 packets.
fn paced_capture(knobs: &Knobs, cnps_us: &[u64]) -> Vec<u8> {
    pcap_of(&paced_frames(knobs, cnps_us, (1, 2)))
}

/// A pcap of `frames` (timestamp, bytes), in the order given.
fn pcap_of(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    for (ts, f) in frames {
        out.write_packet(*ts, f, f.len() as u32).unwrap();
    }
    out.into_inner().unwrap()
}

/// Two paced flows: hosts 1 → 2 with all of [`CNPS_US`], 3 → 4 with its first three.
fn two_flows() -> Vec<u8> {
    let knobs = Knobs::default();
    let mut frames = paced_frames(&knobs, &CNPS_US, (1, 2));
    frames.extend(paced_frames(&knobs, &CNPS_US[..3], (3, 4)));
    frames.sort_by_key(|(ts, _)| *ts);
    pcap_of(&frames)
}

/// The frames of [`paced_capture`] with their timestamps, in order, between the hosts `(sender, receiver)`.
fn paced_frames(knobs: &Knobs, cnps_us: &[u64], hosts: (u8, u8)) -> Vec<(u64, Vec<u8>)> {
    let (tx, rx) = hosts;
    let mut rp = Rp::new(Profile::ConnectX, knobs, LINE_MBPS).unwrap();
    let mut out = Vec::new();
    let t0 = 1_000_000_000u64;
    let payload = vec![0u8; PAYLOAD];
    let mut t = 0u64;
    let mut psn = 1000u32;
    let mut next_cnp = 0;
    let mut sink = |_| {};
    while t < 3_000_000 {
        while next_cnp < cnps_us.len() && cnps_us[next_cnp] * 1000 <= t {
            let tc = cnps_us[next_cnp] * 1000;
            rp.on_cnp(tc, &mut sink);
            let cnp = frame(
                rx,
                tx,
                BthRepr::cnp(SENDER_QP),
                ExtHeaders::default(),
                &[0; 16],
            );
            out.push((t0 + tc, cnp));
            next_cnp += 1;
        }
        rp.advance(t, &mut sink);
        let data = frame(
            tx,
            rx,
            bth(Opcode::RC_RDMA_WRITE_MIDDLE, RECEIVER_QP, psn),
            ExtHeaders::default(),
            &payload,
        );
        let bits = data.len() as f64 * 8.0;
        out.push((t0 + t, data));
        if psn.is_multiple_of(16) {
            let ack = ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: 0x1f,
                    msn: psn,
                }),
                ..ExtHeaders::default()
            };
            let a = frame(
                rx,
                tx,
                bth(Opcode::RC_ACKNOWLEDGE, SENDER_QP, psn),
                ack,
                &[],
            );
            out.push((t0 + t + 500, a));
        }
        psn += 1;
        // Pacing gap: the frame's bits at Rc (Mb/s = bits per µs).
        t += (bits / rp.rc_mbps() * 1000.0).ceil() as u64;
    }
    out.sort_by_key(|(ts, _)| *ts);
    out
}

fn analyse(bytes: Vec<u8>, opts: &Options) -> DcqcnReport {
    let mut r = CaptureReader::from_reader("paced", Box::new(std::io::Cursor::new(bytes))).unwrap();
    let dec = Decoder::default();
    let mut pass = DcqcnPass::new(opts.bin_ns);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&dec.decode(n, &rec));
    }
    pass.finish(opts).unwrap()
}

const CNPS_US: [u64; 6] = [100, 150, 200, 1000, 1040, 2000];

#[test]
fn model_follows_a_sender_paced_by_it() {
    let knobs = Knobs::default();
    let opts = Options {
        bin_ns: Some(20_000),
        ..Options::default()
    };
    let report = analyse(paced_capture(&knobs, &CNPS_US), &opts);
    assert_eq!(report.flows.len(), 1, "{:?}", report.unpaired_cnps);
    let f = &report.flows[0];
    assert_eq!(
        (f.sender_qp, f.pairing),
        (Some(SENDER_QP), Some(Method::ReverseTraffic))
    );
    assert_eq!(f.cnps, CNPS_US.len() as u64);
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
        .filter(|o| o.t_ns >= 1_000_000_000 + 120_000 && o.gbps > 0.0)
    {
        let rc = f
            .model
            .iter()
            .take_while(|m| m.t_ns <= o.t_ns)
            .last()
            .map_or(100.0, |m| m.rc_gbps);
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
    let fit = f.fit.expect("fitted");
    assert_eq!((fit.dce_tcp_g, fit.rpg_gd), (1019, 11), "{fit:?}");
    // Observed cuts: the first burst's low point is a real cut.
    let first = f.observed_cuts.first().expect("an observed cut");
    assert!(first.ratio < 0.8 && first.ratio > 0.2, "{first:?}");
}

#[test]
fn fit_recovers_a_different_cut_factor() {
    // The sender used rpg_gd = 10 (cuts by alpha, not alpha/2); the analysis is told the default 11.
    let mut knobs = Knobs::default();
    knobs.set("rpg_gd", "10").unwrap();
    let opts = Options {
        bin_ns: Some(20_000),
        ..Options::default()
    };
    let report = analyse(paced_capture(&knobs, &CNPS_US), &opts);
    let fit = report.flows[0].fit.expect("fitted");
    assert_eq!(fit.rpg_gd, 10, "{fit:?}");
    assert!(fit.error_gbps < fit.given_error_gbps / 2.0, "{fit:?}");
}

#[test]
fn knobs_recorded_in_the_capture_are_the_default() {
    // The tracer records the sender's knobs in a pcapng custom block; the analysis must use them when the user
    // gives none. The sender used rpg_gd = 10.
    let mut knobs = Knobs::default();
    knobs.set("rpg_gd", "10").unwrap();
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    let block = blocks::encode(
        blocks::KNOBS,
        &serde_json::json!({"ts_ns": 0, "knobs": {"eth0/roce_rp/rpg_gd": "10", "eth0/roce_np/cnp_dscp": "48"}}),
    )
    .unwrap();
    w.write_custom(blocks::PEN, &block, true).unwrap();
    for (ts, f) in paced_frames(&knobs, &CNPS_US, (1, 2)) {
        w.write_packet(0, ts, &f, f.len() as u32).unwrap();
    }
    let bytes = w.into_inner().unwrap();
    let mut r =
        CaptureReader::from_reader("recorded", Box::new(std::io::Cursor::new(bytes))).unwrap();
    let dec = Decoder::default();
    let mut opts = Options {
        bin_ns: Some(20_000),
        ..Options::default()
    };
    let mut pass = DcqcnPass::new(opts.bin_ns);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&dec.decode(n, &rec));
    }
    assert_eq!(r.custom_blocks().len(), 1);
    opts.apply_recorded_knobs(r.custom_blocks());
    assert_eq!(opts.knobs.rpg_gd, 10);
    let report = pass.finish(&opts).unwrap();
    assert!(
        report.knob_source.contains("eth0"),
        "{}",
        report.knob_source
    );
    let fit = report.flows[0].fit.expect("fitted");
    // With the recorded knobs the model already explains the rate: the fit finds nothing better.
    assert_eq!(fit.rpg_gd, 10, "{fit:?}");
    assert!(fit.given_error_gbps <= fit.error_gbps + 1e-9, "{fit:?}");
}

/// Only the flows with the most CNPs are fitted, as many as `fit_flows` says; the others keep their model.
#[test]
fn the_fit_goes_to_the_flows_with_the_most_cnps() {
    let bytes = two_flows();
    for fit_flows in [0, 1, 2] {
        let opts = Options {
            bin_ns: Some(20_000),
            fit_flows,
            ..Options::default()
        };
        let report = analyse(bytes.clone(), &opts);
        let fitted: Vec<(u64, bool)> = report
            .flows
            .iter()
            .map(|f| (f.cnps, f.fit.is_some()))
            .collect();
        let want: Vec<(u64, bool)> = [(6, fit_flows >= 1), (3, fit_flows >= 2)].into();
        assert_eq!(fitted, want, "fit_flows {fit_flows}");
        assert!(report.flows.iter().all(|f| !f.model.is_empty()));
    }
}

/// About 75 years, in ns: what a bit flip in the seconds field of a pcap record can add.
const YEARS_NS: u64 = 75 * 365 * 24 * 3_600 * 1_000_000_000;

/// The frames of [`paced_frames`] and, last, one more data frame of the same flow stamped years later.
fn capture_with_a_far_frame(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut frames = frames.to_vec();
    let (ts, last) = frames.last().cloned().unwrap();
    frames.push((ts + YEARS_NS, last));
    pcap_of(&frames)
}

#[test]
fn a_timestamp_years_ahead_stops_the_model_not_the_analysis() {
    let knobs = Knobs::default();
    let frames = paced_frames(&knobs, &CNPS_US, (1, 2));
    let opts = Options {
        max_model_events: 20_000,
        fit_flows: 1,
        ..Options::default()
    };
    let normal = analyse(pcap_of(&frames), &opts);
    let far = analyse(capture_with_a_far_frame(&frames), &opts);
    let (n, f) = (&normal.flows[0], &far.flows[0]);
    assert_eq!(n.model_stopped_ns, None);
    assert!(normal.limits().is_empty(), "{:?}", normal.limits());
    let stop = f
        .model_stopped_ns
        .expect("the far frame's flow stopped at its budget");
    assert!(
        f.model.len() >= 20_000 && f.model.len() < 20_008,
        "{}",
        f.model.len()
    );
    assert!(f.model.iter().all(|p| p.t_ns <= stop));
    // Up to the normal capture's end, the model is the same; the cuts all happen in that time.
    let end = frames.last().unwrap().0;
    let early: Vec<_> = f.model.iter().filter(|p| p.t_ns <= end).copied().collect();
    assert_eq!(early, n.model);
    assert_eq!(f.cuts, n.cuts);
    assert_eq!(f.cnps, n.cnps);
    // The far frame made every automatic bin days wide, so no bin ends before the stop: nothing to compare.
    let busy = f.observed.iter().filter(|o| o.gbps > 0.0).count();
    assert_eq!(busy, 2, "the paced frames' bin and the far frame's");
    assert_eq!((f.fit, f.above_model_fraction), (None, 0.0));
    let limits = far.limits();
    assert!(
        limits
            .iter()
            .any(|l| l.contains("1 of 1 flows stopped early")),
        "{limits:?}"
    );
}

#[test]
fn a_timestamp_at_the_end_of_time_is_survived() {
    // A pcapng timestamp too large for nanoseconds saturates to u64::MAX; every bin edge and window the
    // analysis derives from it must saturate too (the fuzzer found an overflow in the observed cuts).
    let frames = paced_frames(&Knobs::default(), &CNPS_US, (1, 2));
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
            max_model_events: 2_000,
            fit_flows: 1,
            ..Options::default()
        };
        let report = analyse(bytes.clone(), &opts);
        let f = &report.flows[0];
        assert_eq!(f.cnps, CNPS_US.len() as u64);
        assert!(f.model_stopped_ns.is_some(), "{bin_ns:?}");
    }
}

#[test]
fn the_event_budget_is_shared_between_flows() {
    let bytes = two_flows();
    let whole = analyse(bytes.clone(), &Options::default());
    assert!(whole.flows.iter().all(|f| f.model_stopped_ns.is_none()));
    let most = whole.flows.iter().map(|f| f.model.len()).max().unwrap();
    let opts = Options {
        max_model_events: most,
        ..Options::default()
    };
    let shared = analyse(bytes, &opts);
    assert_eq!(shared.flows.len(), 2);
    for (s, w) in shared.flows.iter().zip(&whole.flows) {
        let stop = s.model_stopped_ns.expect("half the budget is too little");
        assert!(s.model.len() >= most / 2 && s.model.len() < most / 2 + 8);
        let want: Vec<_> = w.model.iter().filter(|p| p.t_ns <= stop).copied().collect();
        assert_eq!(s.model, want);
        // The fit still runs, over the bins that end before the stop only.
        let (sf, wf) = (s.fit.expect("fitted"), w.fit.expect("fitted"));
        assert!(
            sf.bins_compared > 0 && sf.bins_compared < wf.bins_compared,
            "{sf:?} vs {wf:?}"
        );
    }
}

#[test]
fn what_short_flows_leave_of_the_budget_goes_to_the_long_ones() {
    // Hosts 1 → 2 see CNPs from 100 µs on, so their increase timer runs for most of the 3 ms; 3 → 4 see
    // one CNP near the end and need few events.
    let knobs = Knobs::default();
    let mut frames = paced_frames(&knobs, &CNPS_US, (1, 2));
    frames.extend(paced_frames(&knobs, &[2_900], (3, 4)));
    frames.sort_by_key(|(ts, _)| *ts);
    let bytes = pcap_of(&frames);
    let whole = analyse(bytes.clone(), &Options::default());
    let need = |r: &DcqcnReport, cnps: u64| {
        let f = r.flows.iter().find(|f| f.cnps == cnps).unwrap();
        (f.model.len(), f.model_stopped_ns, f.model.clone())
    };
    let (long, long_stop, long_model) = need(&whole, CNPS_US.len() as u64);
    let (short, _, _) = need(&whole, 1);
    assert_eq!(long_stop, None);
    assert!(short * 4 < long, "short {short}, long {long}");
    // An even split of this budget is less than the long flow needs, the whole of it more.
    let max_model_events = long + short + 8;
    assert!(max_model_events / 2 < long);
    let opts = Options {
        max_model_events,
        ..Options::default()
    };
    let report = analyse(bytes, &opts);
    let (n, stop, model) = need(&report, CNPS_US.len() as u64);
    assert_eq!(
        (n, stop),
        (long, None),
        "the long flow got the short one's leftover"
    );
    assert_eq!(model, long_model);
    assert!(report.limits().is_empty(), "{:?}", report.limits());
    // With too little for both, the long flow still stops, and within the whole budget.
    let opts = Options {
        max_model_events: long,
        ..Options::default()
    };
    let report = analyse(pcap_of(&frames), &opts);
    let (n, stop, _) = need(&report, CNPS_US.len() as u64);
    assert!(stop.is_some());
    assert!(
        n > long / 2 && n + short <= long + 8,
        "{n} + {short} vs {long}"
    );
}

#[test]
fn a_fixed_bin_too_fine_for_the_span_widens_instead_of_failing() {
    let frames = paced_frames(&Knobs::default(), &CNPS_US, (1, 2));
    let opts = Options {
        bin_ns: Some(10_000),
        max_model_events: 10_000,
        ..Options::default()
    };
    // At 10 µs, 75 years would be 2.4e14 bins.
    let report = analyse(capture_with_a_far_frame(&frames), &opts);
    assert_eq!(report.requested_bin_ns, Some(10_000));
    assert!(report.bin_ns > 10_000);
    let bins: usize = report.flows.iter().map(|f| f.observed.len()).sum();
    assert!(bins <= roce_core::passes::rates::MAX_FIXED_BINS, "{bins}");
    let limits = report.limits();
    assert!(
        limits.iter().any(|l| l.contains("requested 10000 ns")),
        "{limits:?}"
    );
}
