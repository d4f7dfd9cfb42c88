use super::reference::Stepwise;
use super::*;
use EventKind::*;
use proptest::prelude::*;

const LINE: f64 = 100_000.0;
const US: u64 = 1_000;

/// The knobs dcqcn.md's examples assume: its defaults, with the limiter kept at the maximum as dcqcn.md alone
/// reads (its examples run long past recovery and count on the timers running on).
fn kept() -> Knobs {
    Knobs {
        release_at_max: false,
        ..Knobs::default()
    }
}

fn run(knobs: &Knobs, cnps_us: &[u64], end_us: u64) -> Vec<Event> {
    let cnps: Vec<u64> = cnps_us.iter().map(|t| t * US).collect();
    replay(Profile::ConnectX, knobs, LINE, &cnps, end_us * US).unwrap()
}

/// One line per event, for failure messages.
fn dump(ev: &[Event]) -> String {
    ev.iter()
        .map(|e| {
            format!(
                "{:>12} ns {:?}/{:?} rc {:.4} (was {:.4}) rt {:.4} alpha {:.6}\n",
                e.t_ns, e.kind, e.cause, e.rc_mbps, e.rc_before_mbps, e.rt_mbps, e.alpha
            )
        })
        .collect()
}

/// Cuts and increases only.
fn rate_changes(ev: &[Event]) -> Vec<Event> {
    ev.iter()
        .filter(|e| e.kind == Cut || e.kind.is_increase())
        .copied()
        .collect()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn worked_check_of_the_spec() {
    let ev = run(&Knobs::default(), &[0, 50, 100], 400);
    let d = dump(&ev);
    let r = rate_changes(&ev);
    assert_eq!(r.len(), 4, "expected 3 cuts and 1 increase:\n{d}");

    // First CNP at 0 arms the decrease tick at 0 + 4 µs; the alpha ticks at 1..4 µs all decay (no CNP since).
    let c1 = r[0];
    assert_eq!((c1.kind, c1.t_ns), (Cut, 4 * US), "{d}");
    let factor = c1.rc_mbps / c1.rc_before_mbps;
    assert!(close(factor, 0.510173, 1e-6), "factor {factor}\n{d}");
    let by_formula = 1.0 - (1023.0 / 1024.0) * (1019.0f64 / 1024.0).powi(4) / 2.0;
    assert!(
        close(factor, by_formula, 1e-12),
        "factor {factor} vs {by_formula}\n{d}"
    );
    assert!(close(c1.rc_mbps, 51017.3, 0.1), "{d}");
    // Rt untouched: no increase happened before the cut.
    assert_eq!(c1.rt_mbps, LINE, "{d}");

    // The decrease grid is 4, 8, ..., 48, 52 µs (anchored at the first CNP), so the CNP at 50 is acted on at 52.
    let c2 = r[1];
    assert_eq!((c2.kind, c2.t_ns), (Cut, 52 * US), "{d}");
    assert!(close(c2.rc_mbps, 31136.9, 0.1), "{d}");

    // 100 µs is itself a grid point: the CNP comes first (rule 6), then the alpha tick and the cut at once.
    let c3 = r[2];
    assert_eq!((c3.kind, c3.t_ns), (Cut, 100 * US), "{d}");
    assert!(close(c3.rc_mbps, 21468.0, 0.1), "{d}");

    // Each cut re-arms the increase timer (4+300 and 52+300 were cancelled); the last cut leaves it at 100+300.
    // The byte counter needs 2 MB at ~21 Gb/s (about 780 µs), so the timer wins: a fast recovery to (Rc+line)/2.
    let f = r[3];
    assert_eq!(
        (f.kind, f.cause, f.t_ns),
        (FastRecovery, Cause::IncreaseTimer, 400 * US),
        "{d}"
    );
    assert!(close(f.rc_mbps, 60734.0, 0.1), "{d}");
    assert!(close(f.rc_mbps, (c3.rc_mbps + LINE) / 2.0, 1e-9), "{d}");
}

/// The worked check with the NIC's 10-bit integer alpha: the truncating updates leave alpha lower at each
/// cut (1003, 779, 598 /1024 where the real numbers give 1003.2, 798.1, 636.0), so each cut is shallower and the
/// third lands 4.3 % above the real-number model's.
#[test]
fn worked_check_with_the_fixed_point_alpha() {
    let mut fixed = Knobs::default();
    let profile = Profile::from_name("connectx-fixed", &mut fixed).unwrap();
    assert_eq!(profile.label(&fixed), "connectx-fixed");
    let cnps = [0, 50 * US, 100 * US];
    let cuts = |k: &Knobs| -> Vec<Event> {
        replay(profile, k, LINE, &cnps, 101 * US)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == Cut)
            .collect()
    };
    let (q, f) = (cuts(&fixed), cuts(&Knobs::default()));
    let d = dump(&q);
    let alphas: Vec<f64> = q.iter().map(|c| c.alpha * 1024.0).collect();
    assert_eq!(alphas, [1003.0, 779.0, 598.0], "{d}");
    // Rc = line·(1 − 1003/2048), then ·(1 − 779/2048), then ·(1 − 598/2048): exact in binary.
    assert_eq!(q[0].rc_mbps, LINE * (1.0 - 1003.0 / 2048.0), "{d}");
    assert!(close(q[1].rc_mbps, 31616.807, 1e-3), "{d}");
    assert!(close(q[2].rc_mbps, 22384.946, 1e-3), "{d}");
    let third = q[2].rc_mbps / f[2].rc_mbps - 1.0;
    assert!(close(third, 0.0427, 0.0005), "third cut {third}");
    assert!(close(f[2].rc_mbps, 21468.0, 0.1));
    // The increase timer at 400 µs: fast recovery halfway to the line rate.
    let ev = replay(profile, &fixed, LINE, &cnps, 400 * US).unwrap();
    let fr = ev.iter().find(|e| e.kind.is_increase()).unwrap();
    assert_eq!((fr.kind, fr.t_ns), (FastRecovery, 400 * US));
    assert!(close(fr.rc_mbps, 61192.5, 0.05), "{}", fr.rc_mbps);
}

#[test]
fn same_instant_cnp_before_alpha_and_decrease() {
    // A CNP exactly on the 8 µs grid point: it must be seen by the alpha tick and the cut of that very instant.
    let ev = run(&Knobs::default(), &[0, 7, 8], 10);
    let cnp7 = ev.iter().find(|e| e.t_ns == 7 * US).unwrap();
    let at8: Vec<Event> = ev.iter().filter(|e| e.t_ns == 8 * US).copied().collect();
    let kinds: Vec<EventKind> = at8.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [Cnp, Cut], "{}", dump(&ev));
    // The CNP at 7 µs is seen by the tick at 7 µs (it comes first): alpha rose there. Seen from the CNP at 8,
    // alpha is after the ticks before 8 (through 7 µs); the cut at 8 then sees the tick at 8, which rose again.
    let g = 5.0 / 1024.0;
    let rise = |a: f64| ((1.0 - g) * a + g).min(1023.0 / 1024.0);
    let before7 = cnp7.alpha;
    assert!(close(at8[0].alpha, rise(before7), 1e-15), "{}", dump(&ev));
    assert!(
        close(at8[1].alpha, rise(at8[0].alpha), 1e-15),
        "tick did not see the CNP: {}",
        dump(&ev)
    );
    let factor = at8[1].rc_mbps / at8[1].rc_before_mbps;
    assert!(
        close(factor, 1.0 - at8[1].alpha / 2.0, 1e-12),
        "cut did not use the new alpha"
    );
}

#[test]
fn same_instant_decrease_before_increase_timer() {
    // Cut at 4 µs re-arms the increase timer at 304 µs, a decrease grid point. A CNP at 301 makes a cut at 304:
    // the cut must come first and re-arm the timer, so no increase happens at 304.
    let ev = run(&Knobs::default(), &[0, 301], 700);
    let d = dump(&ev);
    let r = rate_changes(&ev);
    assert_eq!((r[1].kind, r[1].t_ns), (Cut, 304 * US), "{d}");
    assert!(
        !ev.iter()
            .any(|e| e.t_ns == 304 * US && e.kind.is_increase()),
        "{d}"
    );
    assert_eq!((r[2].kind, r[2].t_ns), (FastRecovery, 604 * US), "{d}");
}

#[test]
fn same_instant_increase_timer_before_byte_event() {
    // Rt = Rc = 25600 at the first CNP; rpg_gd = 1 makes the cut exactly 1/2, so Rc = 12800 Mb/s = 1600 B/µs
    // from 4 µs. With B = 7500·64 = 480000 bytes the byte event falls at 4 + 300 µs, together with the timer.
    let mut k = Knobs::default();
    k.set("rate_to_set_on_first_cnp", "25600").unwrap();
    k.set("rpg_gd", "1").unwrap();
    k.set("rpg_byte_reset", "7500").unwrap();
    let ev = run(&k, &[0], 304);
    let d = dump(&ev);
    let r = rate_changes(&ev);
    assert_eq!(r.len(), 3, "{d}");
    assert_eq!(
        (r[0].kind, r[0].t_ns, r[0].rc_mbps),
        (Cut, 4 * US, 12800.0),
        "{d}"
    );
    // Timer first, with T = BC = 0: fast recovery. Then the byte event, which now sees T = 1: additive increase.
    assert_eq!(
        (r[1].kind, r[1].cause, r[1].t_ns),
        (FastRecovery, Cause::IncreaseTimer, 304 * US),
        "{d}"
    );
    assert_eq!(r[1].rc_mbps, 19200.0, "{d}");
    assert_eq!(
        (r[2].kind, r[2].cause, r[2].t_ns),
        (AdditiveIncrease, Cause::ByteCounter, 304 * US),
        "{d}"
    );
    assert_eq!((r[2].rt_mbps, r[2].rc_mbps), (25605.0, 22402.5), "{d}");
}

#[test]
fn alpha_never_exceeds_1023_over_1024() {
    let mut k = Knobs::default();
    k.set("initial_alpha_value", "0").unwrap();
    // From 0, real alpha needs ~1420 ticks with a CNP to reach the bound: it must actually be hit. The
    // integer stops short, at 820/1024, where floor(1019·820/1024) + 5 = 820: truncation loses as much as a rise
    // adds (from 1023 it stays at 1023).
    for (fixed, top) in [(false, 1023.0), (true, 820.0)] {
        k.alpha_fixed_point = fixed;
        let cnps: Vec<u64> = (0..3000).collect();
        let ev = run(&k, &cnps, 3000);
        let max = ev.iter().map(|e| e.alpha).fold(0.0, f64::max);
        assert!(ev.iter().all(|e| e.alpha <= 1023.0 / 1024.0));
        assert_eq!(max, top / 1024.0, "fixed {fixed}");
    }
}

#[test]
fn rc_never_below_min_rate() {
    let mut k = Knobs::default();
    k.set("rpg_min_rate", "1000").unwrap();
    let cnps: Vec<u64> = (0..250).map(|i| i * 4).collect();
    let ev = run(&k, &cnps, 1000);
    assert!(ev.iter().all(|e| e.rc_mbps >= 1000.0), "{}", dump(&ev));
    let floored = ev
        .iter()
        .filter(|e| e.kind == Cut)
        .find(|e| e.rc_before_mbps * 0.5 < 1000.0)
        .unwrap_or_else(|| panic!("never reached the floor\n{}", dump(&ev)));
    assert_eq!(floored.rc_mbps, 1000.0);
}

#[test]
fn min_dec_fac_limits_a_single_cut() {
    let mut k = Knobs::default();
    k.set("rpg_min_dec_fac", "80").unwrap();
    let ev = run(&k, &[0, 20, 40, 60], 100);
    let cuts: Vec<Event> = ev.iter().filter(|e| e.kind == Cut).copied().collect();
    assert_eq!(cuts.len(), 4, "{}", dump(&ev));
    // alpha ≈ 1 would cut to ~0.51; the knob keeps 80 %.
    assert_eq!(cuts[0].rc_mbps, 80_000.0);
    assert!(
        cuts.iter()
            .all(|c| c.rc_mbps / c.rc_before_mbps >= 0.8 - 1e-12)
    );

    // rpg_gd = 1 makes 1 − alpha·512 hugely negative: only the 50 % floor is left.
    let mut k = Knobs::default();
    k.set("rpg_gd", "1").unwrap();
    let ev = run(&k, &[0, 20, 40], 100);
    let cuts: Vec<Event> = ev.iter().filter(|e| e.kind == Cut).copied().collect();
    assert_eq!(cuts.len(), 3);
    assert!(
        cuts.iter().all(|c| c.rc_mbps == c.rc_before_mbps * 0.5),
        "{}",
        dump(&ev)
    );
}

/// First time Rc is back to 90 % of line after the last cut.
fn time_to_90(ev: &[Event]) -> u64 {
    let last_cut = ev.iter().rfind(|e| e.kind == Cut).unwrap().t_ns;
    ev.iter()
        .find(|e| e.t_ns > last_cut && e.rc_mbps >= 0.9 * LINE)
        .unwrap_or_else(|| panic!("never recovered\n{}", dump(ev)))
        .t_ns
        - last_cut
}

#[test]
fn clamp_tgt_rate_slows_recovery() {
    let ev0 = run(&Knobs::default(), &[0, 50, 100], 1_000_000);
    let mut k = Knobs::default();
    k.set("clamp_tgt_rate", "1").unwrap();
    let ev1 = run(&k, &[0, 50, 100], 1_000_000);

    for c in ev1.iter().filter(|e| e.kind == Cut) {
        assert_eq!(c.rt_mbps, c.rc_before_mbps, "clamp: Rt <- Rc at every cut");
    }
    // Without clamping, Rt stays at line through cuts that follow no increase.
    assert!(
        ev0.iter()
            .filter(|e| e.kind == Cut)
            .all(|c| c.rt_mbps == LINE)
    );

    let (t0, t1) = (time_to_90(&ev0), time_to_90(&ev1));
    // Clamp 0: a few fast recoveries toward line (~1 ms). Clamp 1: Rt must climb from 31 Gb/s by 5/50 Mb/s steps.
    assert!(t0 < 2_000 * US, "clamp 0 took {t0} ns");
    assert!(t1 > 10 * t0, "clamp 1 took {t1} ns vs {t0} ns");
}

/// The bytes a backlogged sender sent from `from` to `to` under the model's piecewise-constant Rc, with
/// `rc_at_from` in force at `from`.
fn bytes_between(ev: &[Event], from: u64, to: u64, rc_at_from: f64) -> f64 {
    let mut t = from;
    let mut rc = rc_at_from;
    let mut sum = 0.0;
    for e in ev.iter().filter(|e| e.t_ns > from && e.t_ns <= to) {
        sum += rc * (e.t_ns - t) as f64 / 8_000.0;
        t = e.t_ns;
        rc = e.rc_mbps;
    }
    sum + rc * (to - t) as f64 / 8_000.0
}

/// dcqcn.md: a byte event when `acc` reaches B, `acc = 0`. Every byte event after a cut must lie at the first
/// whole nanosecond at which the bytes sent since that cut reach the next multiple of B: at most a nanosecond
/// late, never more, however many came before. Restarting the count at the rounded instant lost up to a
/// nanosecond of bytes at each event, and the events drifted later and later.
#[test]
fn byte_events_do_not_drift() {
    let mut k = kept();
    k.set("rpg_time_reset", &u32::MAX.to_string()).unwrap();
    // rpg_gd = 1 cuts exactly in half; a low threshold makes many events before the rate is back at line.
    k.set("rpg_gd", "1").unwrap();
    k.set("rpg_byte_reset", "1000").unwrap(); // 64,000 bytes: 5.12 µs at line, a fraction of a ns each time
    k.set("rpg_ai_rate", "0").unwrap();
    let ev = run(&k, &[0], 2_000);
    let d = dump(&ev);
    let cut = ev.iter().find(|e| e.kind == Cut).unwrap();
    let incs: Vec<&Event> = ev.iter().filter(|e| e.kind.is_increase()).collect();
    assert!(incs.len() >= 53, "{} byte events\n{d}", incs.len());
    assert!(incs.iter().all(|e| e.cause == Cause::ByteCounter), "{d}");
    let b = k.byte_threshold() as f64;
    for (n, e) in incs.iter().enumerate() {
        let want = (n + 1) as f64 * b;
        let at = bytes_between(&ev, cut.t_ns, e.t_ns, cut.rc_mbps);
        let ns_before = bytes_between(&ev, cut.t_ns, e.t_ns - 1, cut.rc_mbps);
        assert!(
            at >= want * (1.0 - 1e-12) && ns_before < want,
            "byte event {n} at {} ns: {at} bytes there, {ns_before} a ns before, want {want}\n{d}",
            e.t_ns
        );
    }
}

/// The drift of the byte events pushed increases past cuts: after a cut to half the line rate at 1 µs, byte
/// events every 19,200 bytes bring the rate back. The 42nd is due at 67,980 ns, before the cut that a CNP at
/// 68 µs makes at once (a decrease check every µs); restarting the count at each rounded instant put it at
/// 68,016 ns, after that cut, which then dropped it: 41 increases before the cut instead of 42.
#[test]
fn an_increase_beside_a_cut_is_not_lost() {
    let mut k = kept();
    k.set("rpg_time_reset", &u32::MAX.to_string()).unwrap();
    k.set("rate_reduce_monitor_period", "1").unwrap();
    k.set("rpg_gd", "1").unwrap();
    k.set("rpg_byte_reset", "300").unwrap();
    let ev = run(&k, &[0, 68], 70);
    let d = dump(&ev);
    let cuts: Vec<&Event> = ev.iter().filter(|e| e.kind == Cut).collect();
    assert_eq!(cuts.len(), 2, "{d}");
    assert_eq!((cuts[0].t_ns, cuts[0].rc_mbps), (US, 50_000.0), "{d}");
    assert_eq!(cuts[1].t_ns, 68 * US, "{d}");
    let before: Vec<&Event> = ev
        .iter()
        .filter(|e| e.kind.is_increase() && e.t_ns < 68 * US)
        .collect();
    assert_eq!(before.len(), 42, "{d}");
    assert_eq!(before[41].t_ns, 67_980, "{d}");
}

#[test]
fn stages_fast_recovery_then_additive_then_hyper() {
    let mut k = Knobs::default();
    k.set("rate_to_set_on_first_cnp", "10000").unwrap(); // keeps Rt below line so the steps show
    k.set("rpg_threshold", "1").unwrap();
    let ev = run(&k, &[0], 20_000);
    let d = dump(&ev);
    let incs: Vec<&Event> = ev.iter().filter(|e| e.kind.is_increase()).collect();
    let rank = |k: EventKind| match k {
        FastRecovery => 0,
        AdditiveIncrease => 1,
        _ => 2,
    };
    assert_eq!(incs[0].kind, FastRecovery, "{d}");
    assert!(incs.iter().any(|e| e.kind == AdditiveIncrease), "{d}");
    assert!(incs.iter().any(|e| e.kind == HyperIncrease), "{d}");
    assert!(
        incs.windows(2).all(|w| rank(w[0].kind) <= rank(w[1].kind)),
        "{d}"
    );

    // The stage follows the counters before the event: HI iff min(T, BC) > 1, AI iff max(T, BC) >= 1.
    let (mut t, mut bc) = (0u32, 0u32);
    let mut prev_rt = incs[0].rt_mbps;
    for (i, e) in incs.iter().enumerate() {
        let want = if t.min(bc) > 1 {
            HyperIncrease
        } else if t.max(bc) >= 1 {
            AdditiveIncrease
        } else {
            FastRecovery
        };
        assert_eq!(e.kind, want, "increase {i} with T={t} BC={bc}\n{d}");
        let step = match e.kind {
            HyperIncrease => 50.0,
            AdditiveIncrease => 5.0,
            _ => 0.0,
        };
        if i > 0 {
            assert!(
                close(e.rt_mbps, (prev_rt + step).min(LINE), 1e-9),
                "Rt step at {i}\n{d}"
            );
        }
        prev_rt = e.rt_mbps;
        match e.cause {
            Cause::IncreaseTimer => t += 1,
            _ => bc += 1,
        }
    }
}

#[test]
fn paper_profile_first_cut_and_increase() {
    let line = 40_000.0;
    let ev = replay(
        Profile::paper(),
        &Knobs::default(),
        line,
        &[0, 100 * US],
        120 * US,
    )
    .unwrap();
    let d = dump(&ev);
    let kinds: Vec<(u64, EventKind)> = ev.iter().map(|e| (e.t_ns, e.kind)).collect();
    assert_eq!(
        kinds,
        [
            (0, FirstCnp),
            (0, Cut),
            (55 * US, FastRecovery),
            (100 * US, Cnp),
            (100 * US, Cut)
        ],
        "{d}"
    );
    let g = 1.0 / 256.0;
    // alpha = 1: Rc = line/2, Rt = line, alpha stays (1−g)·1 + g = 1.
    assert_eq!(
        (ev[1].rc_mbps, ev[1].rt_mbps, ev[1].alpha),
        (20_000.0, line, 1.0),
        "{d}"
    );
    // 55 µs without CNP: alpha decays, then T = 1 < F: Rc = (Rt + Rc)/2.
    assert_eq!(ev[2].alpha, 1.0 - g, "{d}");
    assert_eq!((ev[2].rc_mbps, ev[2].rt_mbps), (30_000.0, line), "{d}");
    // Second CNP: Rt = Rc = 30000, Rc = 30000·(1 − (255/256)/2), then alpha rises.
    assert!(close(ev[4].rc_mbps, 15_058.593_75, 1e-9), "{d}");
    assert_eq!(ev[4].rt_mbps, 30_000.0, "{d}");
    assert!(close(ev[4].alpha, (1.0 - g) * (1.0 - g) + g, 1e-15), "{d}");
}

#[test]
fn paper_additive_increase_after_f_timer_events() {
    let line = 40_000.0;
    let ev = replay(Profile::paper(), &kept(), line, &[0], 400 * US).unwrap();
    let d = dump(&ev);
    let incs: Vec<&Event> = ev.iter().filter(|e| e.kind.is_increase()).collect();
    // Timer every 55 µs; T = 1..4 are fast recoveries, T = 5 reaches F: Rt += 40, then Rc = (Rt + Rc)/2.
    let kinds: Vec<EventKind> = incs.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds[..6],
        [
            FastRecovery,
            FastRecovery,
            FastRecovery,
            FastRecovery,
            AdditiveIncrease,
            AdditiveIncrease
        ],
        "{d}"
    );
    assert_eq!(incs[4].t_ns, 275 * US, "{d}");
    // The cut set Rt = Rc = line, so the AI step is capped at line.
    assert_eq!(incs[4].rt_mbps, line, "{d}");
    assert!(close(incs[4].rc_mbps, line - 20_000.0 / 32.0, 1e-9), "{d}");
}

#[test]
fn small_steps_give_the_same_events_as_one_replay() {
    let mut k = Knobs::default();
    k.set("rpg_byte_reset", "1000").unwrap(); // frequent byte events, so step boundaries matter
    let cnps = [3 * US, 50 * US + 7, 52 * US, 400 * US + 1, 1_200 * US];
    let end = 3_000 * US;
    let want = replay(Profile::ConnectX, &k, LINE, &cnps, end).unwrap();
    let mut rp = Rp::new(Profile::ConnectX, &k, LINE).unwrap();
    let got = in_steps(&mut rp, &cnps, end, 777);
    assert!(want.iter().any(|e| e.cause == Cause::ByteCounter));
    assert_eq!(got, want);
    assert_eq!(rp.rc_mbps(), want.last().unwrap().rc_mbps);
}

/// Drives `rp` to `end` in advances of `step` ns, each CNP given as its step reaches it.
fn in_steps(rp: &mut Rp, cnps: &[u64], end: u64, step: u64) -> Vec<Event> {
    let mut got = Vec::new();
    let mut push = |e: Event| got.push(e);
    let mut next_cnp = cnps.iter().peekable();
    let mut t = 0;
    while t < end {
        t = (t + step).min(end);
        while let Some(&&c) = next_cnp.peek() {
            if c > t {
                break;
            }
            rp.on_cnp(c, &mut push);
            next_cnp.next();
        }
        rp.advance(t, &mut push);
    }
    got
}

#[test]
fn inactive_until_first_cnp() {
    let mut rp = Rp::new(Profile::ConnectX, &Knobs::default(), LINE).unwrap();
    let mut n = 0;
    rp.advance(1_000_000_000, &mut |_| n += 1);
    assert_eq!(n, 0);
    assert!(!rp.is_active());
    assert_eq!((rp.rc_mbps(), rp.rt_mbps()), (LINE, LINE));
    assert_eq!(rp.next_event_ns(), None);
    rp.on_cnp(2_000_000_000, &mut |_| n += 1);
    assert!(rp.is_active());
    // The decrease check one period after the CNP (the alpha updates are no events).
    assert_eq!(rp.next_event_ns(), Some(2_000_000_000 + 4 * US));
}

#[test]
fn first_cnp_cuts_off_waits_for_a_second_cnp() {
    let mut k = Knobs::default();
    k.set("first_cnp_cuts", "0").unwrap();
    let ev = run(&k, &[0, 10], 20);
    let cuts: Vec<u64> = ev
        .iter()
        .filter(|e| e.kind == Cut)
        .map(|e| e.t_ns)
        .collect();
    assert_eq!(cuts, [12 * US], "{}", dump(&ev));
}

/// NVIDIA's `rpg_max_rate`: once the rate is back at the maximum the limiter is released, so a flow congested
/// again later starts over from a first CNP (alpha 1023/1024: a cut by half) rather than from an alpha that
/// decayed to almost nothing while its timers ran on at line rate (a cut by a fifth of a percent).
#[test]
fn a_recovered_flow_is_released_and_cut_by_half_when_congested_again() {
    let again = 100_000; // µs
    let ev = run(&Knobs::default(), &[0, again], again + 10);
    let d = dump(&ev);
    let released = ev.iter().position(|e| e.kind == Released).expect(&d);
    assert!(ev[released].t_ns < again * US, "{d}");
    assert_eq!(ev[released].rc_mbps, LINE, "{d}");
    // Nothing between the release and the next CNP: the timers stopped.
    assert_eq!(ev[released + 1].kind, FirstCnp, "{d}");
    let cut = ev.iter().rfind(|e| e.kind == Cut).unwrap();
    let share = 1.0 - cut.rc_mbps / cut.rc_before_mbps;
    assert!(close(share, 0.49, 0.01), "cut by {share}\n{d}");

    // Kept engaged, as dcqcn.md alone reads: alpha decayed for 100 ms, the cut is tiny.
    let ev = run(&kept(), &[0, again], again + 10);
    assert!(ev.iter().all(|e| e.kind != Released));
    let cut = ev.iter().rfind(|e| e.kind == Cut).unwrap();
    let share = 1.0 - cut.rc_mbps / cut.rc_before_mbps;
    assert!(share < 0.003, "cut by {share}");
}

/// `rpg_max_rate` caps Rt below the line rate, and the release comes at that maximum, to the line rate. A rate
/// already above the maximum (a flow that was unlimited at line rate, cut less than to the maximum) counts as
/// there at its first increase.
#[test]
fn rpg_max_rate_caps_the_target_and_releases_there() {
    let mut k = Knobs::default();
    k.set("rpg_max_rate", "40000").unwrap();
    let ev = run(&k, &[0], 1_000);
    let released = ev.iter().find(|e| e.kind == Released).unwrap();
    assert_eq!(released.t_ns, 304 * US, "{}", dump(&ev));
    k.set("rate_to_set_on_first_cnp", "20000").unwrap();
    k.set("rpg_ai_rate", "2000").unwrap();
    k.set("rpg_hai_rate", "2000").unwrap();
    let ev = run(&k, &[0, 20_000], 40_000);
    let d = dump(&ev);
    let incs: Vec<&Event> = ev.iter().filter(|e| e.kind.is_increase()).collect();
    assert!(!incs.is_empty(), "{d}");
    assert!(incs.iter().all(|e| e.rt_mbps <= 40_000.0), "{d}");
    let rel: Vec<&Event> = ev.iter().filter(|e| e.kind == Released).collect();
    assert_eq!(rel.len(), 2, "{d}");
    for r in rel {
        assert!(
            r.rc_before_mbps >= 40_000.0 - 0.5 && r.rc_before_mbps < 40_000.0,
            "{d}"
        );
        assert_eq!((r.rc_mbps, r.rt_mbps), (LINE, LINE), "{d}");
    }
    // A value above the line rate is the line rate.
    k.set("rpg_max_rate", "400000").unwrap();
    assert_eq!(k.max_rate_mbps(LINE), LINE);
}

/// With the limiter kept, a flow whose rate is back exactly at the maximum costs nothing until its next CNP:
/// a capture that ends years later (a corrupt timestamp) does not make the model walk its timers there.
#[test]
fn a_saturated_or_released_flow_costs_nothing_to_the_end_of_time() {
    let years = 75 * 365 * 24 * 3_600 * 1_000_000_000u64;
    for knobs in [Knobs::default(), kept()] {
        let rp = Rp::new(Profile::ConnectX, &knobs, LINE).unwrap();
        let mut n = 0usize;
        let stop = replay_with(rp, &[10 * US, 20 * US], years, 10_000, |_| n += 1);
        assert_eq!(stop, None, "{knobs:?}");
        assert!(n < 200, "{n} events");
    }
    // The reference walks every increase timer at line rate; the model's events are its rate changes.
    let ev = run(&kept(), &[0], 100_000);
    let last = ev.last().unwrap();
    assert_eq!((last.rc_mbps, last.rt_mbps), (LINE, LINE));
    assert!(last.t_ns < 100_000 * US);
}

/// A bounded replay is the unbounded one cut at an instant: every event up to its stop, none after.
#[test]
fn replay_within_a_budget_is_a_prefix_cut_at_an_instant() {
    let cnps: Vec<u64> = (0..60).map(|i| i * 337 * US + (i % 3) * 1_000).collect();
    let end = 100_000 * US;
    let mut k = Knobs::default();
    k.set("rpg_byte_reset", "300").unwrap();
    for profile in [Profile::ConnectX, Profile::paper()] {
        let rp = || Rp::new(profile, &k, LINE).unwrap();
        let mut full = Vec::new();
        assert_eq!(
            replay_with(rp(), &cnps, end, u64::MAX, |e| full.push(e)),
            None
        );
        assert!(full.len() > 150, "{profile:?}: {} events", full.len());
        for budget in (1..200).chain((200..full.len() as u64).step_by(97)) {
            let mut got = Vec::new();
            let Some(stop) = replay_with(rp(), &cnps, end, budget, |e| got.push(e)) else {
                continue;
            };
            let want: Vec<Event> = full.iter().filter(|e| e.t_ns <= stop).copied().collect();
            assert_eq!(got, want, "{profile:?}, budget {budget}");
        }
    }
}

#[test]
fn knob_file_with_comments() {
    let text = "# recorded by the tracer\n\
                rpg_gd=10\n\
                \n\
                rpg_time_reset 55   # shorter timer\n\
                roce_rp/clamp_tgt_rate = 1\n\
                deactivate_at_line = 0\n";
    let k = Knobs::from_kv_text(text).unwrap();
    assert_eq!(k.rpg_gd, 10);
    assert_eq!(k.rpg_time_reset, 55);
    assert!(k.clamp_tgt_rate);
    assert!(!k.release_at_max, "the old name of release_at_max");
    let d = Knobs::default();
    assert_eq!(
        Knobs {
            rpg_gd: 11,
            rpg_time_reset: 300,
            clamp_tgt_rate: false,
            release_at_max: true,
            ..k
        },
        d
    );
}

#[test]
fn knob_defaults_match_the_table() {
    let k = Knobs::default();
    let want: &[(&str, u64)] = &[
        ("dce_tcp_g", 1019),
        ("dce_tcp_rtt", 1),
        ("initial_alpha_value", 1023),
        ("rate_to_set_on_first_cnp", 0),
        ("rpg_gd", 11),
        ("rpg_min_dec_fac", 50),
        ("rpg_min_rate", 1),
        ("rate_reduce_monitor_period", 4),
        ("clamp_tgt_rate", 0),
        ("clamp_tgt_rate_after_time_inc", 1),
        ("rpg_time_reset", 300),
        ("rpg_byte_reset", 32767),
        ("rpg_threshold", 1),
        ("rpg_ai_rate", 5),
        ("rpg_hai_rate", 50),
        ("rpg_max_rate", 0),
        ("first_cnp_cuts", 1),
        ("release_at_max", 1),
        ("release_margin_kbps", 500),
        ("alpha_fixed_point", 0),
        ("alpha_decay_1024_minus_g", 0),
        ("rpg_byte_reset_unit", 64),
    ];
    let got: Vec<(&str, u64)> = k.list().map(|e| (e.name, e.value)).collect();
    assert_eq!(got, want);
    assert!(k.list().all(|e| !e.meaning.is_empty()));
    assert_eq!(Knobs::NAMES.len(), want.len());
    let np: Vec<(&str, u64)> = NpKnobs::default()
        .list()
        .map(|e| (e.name, e.value))
        .collect();
    assert_eq!(
        np,
        [
            ("min_time_between_cnps", 4),
            ("cnp_dscp", 48),
            ("cnp_802p_prio", 6)
        ]
    );
}

#[test]
fn unknown_knob_is_an_error() {
    let err = Knobs::from_kv_text("rpg_gd=11\nrpg_bogus=3\n").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DcqcnError::AtLine { line: 2, .. }), "{msg}");
    assert!(msg.contains("rpg_bogus") && msg.contains("line 2"), "{msg}");
    assert!(matches!(
        Knobs::default().set("nope", "1"),
        Err(DcqcnError::UnknownKnob { .. })
    ));
}

#[test]
fn bad_values_are_errors() {
    let mut k = Knobs::default();
    let msg = k.set("rpg_gd", "99").unwrap_err().to_string();
    assert!(
        msg.contains("rpg_gd") && msg.contains("1..=15") && msg.contains("99"),
        "{msg}"
    );
    let msg = k.set("dce_tcp_rtt", "fast").unwrap_err().to_string();
    assert!(
        msg.contains("dce_tcp_rtt") && msg.contains("1..=131071"),
        "{msg}"
    );
    assert!(k.set("clamp_tgt_rate", "2").is_err());
    assert!(k.set("rpg_min_dec_fac", "-1").is_err());
    assert_eq!(
        k,
        Knobs::default(),
        "a refused value must not change anything"
    );
    let err = Knobs::from_kv_text("\n\nrpg_gd\n").unwrap_err();
    assert!(matches!(err, DcqcnError::AtLine { line: 3, .. }), "{err}");
    // Values that bypass `set` are caught when the model is built.
    let k = Knobs {
        dce_tcp_rtt: 0,
        ..Knobs::default()
    };
    assert!(Rp::new(Profile::ConnectX, &k, LINE).is_err());
    assert!(Rp::new(Profile::ConnectX, &Knobs::default(), f64::NAN).is_err());
}

/// A NIC's whole ECN directory: RP and NP knobs, each side's per-priority enable, and files the model does not
/// read kept by name rather than dropped.
#[test]
fn an_ecn_directory_reads_into_both_ends() {
    let mut c = EcnConfig::default();
    c.apply_kv_text(
        "roce_rp/rpg_max_rate=40000\nroce_rp/enable/3=1\nroce_rp/enable/5=0\n\
         roce_np/min_time_between_cnps=0\nroce_np/cnp_dscp=46\nroce_np/cnp_802p_prio=7\n\
         roce_np/enable/3=1\nroce_rp/some_future_knob=9\nrpg_gd=10\nmin_time_between_cnps 8\n",
    )
    .unwrap();
    assert_eq!((c.rp.rpg_max_rate, c.rp.rpg_gd), (40_000, 10));
    assert_eq!(
        (c.rp_enable.get(3), c.rp_enable.get(5), c.rp_enable.get(0)),
        (Some(true), Some(false), None)
    );
    assert_eq!(c.rp_enable.disabled(), [5]);
    assert_eq!(
        (
            c.np.min_time_between_cnps,
            c.np.cnp_dscp,
            c.np.cnp_802p_prio
        ),
        (8, 46, 7)
    );
    assert_eq!(c.np_enable.get(3), Some(true));
    assert_eq!(c.ignored, ["roce_rp/some_future_knob"]);
    assert!(c.set("roce_np/cnp_dscp", "64").is_err());
    assert!(c.set("roce_rp/enable/2", "yes").is_err());
    assert!(matches!(
        c.set("bogus", "1"),
        Err(DcqcnError::UnknownKnob { .. })
    ));
}

#[test]
fn profile_names() {
    let mut k = Knobs::default();
    assert_eq!(
        Profile::from_name("ConnectX", &mut k).unwrap(),
        Profile::ConnectX
    );
    assert!(!k.alpha_fixed_point);
    assert_eq!(
        Profile::from_name("paper", &mut k).unwrap().label(&k),
        "paper"
    );
    assert!(Profile::from_name("dctcp", &mut k).is_err());
}

#[test]
fn events_serialize_for_json() {
    let ev = run(&Knobs::default(), &[0], 5);
    let cut = ev.iter().find(|e| e.kind == Cut).unwrap();
    let v = serde_json::to_value(cut).unwrap();
    assert_eq!(v["kind"], "cut");
    assert_eq!(v["cause"], "decrease_timer");
    assert_eq!(v["t_ns"], 4_000);
    let p = serde_json::to_value(Profile::ConnectX).unwrap();
    assert_eq!(p["profile"], "connectx");
    let p = serde_json::to_value(Profile::paper()).unwrap();
    assert_eq!(
        (p["profile"].as_str(), p["f"].as_u64()),
        (Some("paper"), Some(5))
    );
}

/// The alternative readings of NVIDIA's text change what they say they change.
#[test]
fn the_other_readings_of_nvidia_text() {
    // Alpha decaying by (1024 − G)/1024: four quiet µs leave almost nothing, so the first cut barely cuts.
    let mut k = Knobs::default();
    k.set("alpha_decay_1024_minus_g", "1").unwrap();
    let cut = *run(&k, &[0], 5).iter().find(|e| e.kind == Cut).unwrap();
    let want = (1023.0 / 1024.0) * (5.0f64 / 1024.0).powi(4);
    assert!(close(cut.alpha, want, 1e-18), "{}", cut.alpha);
    assert!(cut.rc_mbps > 0.999_99 * LINE);
    // rpg_byte_reset in bytes: 32,767 bytes is 2.6 µs at line, so the byte counter now beats the timer.
    let mut k = kept();
    k.set("rpg_byte_reset_unit", "1").unwrap();
    let first = *run(&k, &[0], 400)
        .iter()
        .find(|e| e.kind.is_increase())
        .unwrap();
    assert_eq!(first.cause, Cause::ByteCounter);
    assert!(first.t_ns < 20 * US, "{}", first.t_ns);
}

// ---- The event-driven model against the step-by-step reference ----

/// Drops the increases that changed nothing, which the model does not make once the rate sits at its maximum
/// (and the reference keeps making at every tick). `tol` is how small a change counts as none: 0 for the bit-exact
/// comparison, a hair for the real-number one.
fn without_no_ops(ev: &[Event], tol: f64) -> Vec<Event> {
    let mut out = Vec::new();
    let mut rt = f64::NAN;
    for e in ev {
        let no_op = e.kind.is_increase()
            && (e.rc_mbps - e.rc_before_mbps).abs() <= tol
            && (e.rt_mbps - rt).abs() <= tol;
        rt = e.rt_mbps;
        if !no_op {
            out.push(*e);
        }
    }
    out
}

/// A random case: profile and knobs, line rate, CNP train (sorted), end.
#[derive(Debug, Clone)]
struct Case {
    profile: Profile,
    knobs: Knobs,
    line: f64,
    cnps: Vec<u64>,
    end: u64,
}

fn knobs_strategy() -> impl Strategy<Value = Knobs> {
    (
        (
            prop_oneof![Just(1019u32), 900u32..=1023, 0u32..=1023],
            1u32..=8,
            0u32..=1023,
            prop_oneof![3 => Just(0u32), 1 => 1_000u32..=100_000],
            prop_oneof![Just(11u32), 1u32..=15],
            prop_oneof![Just(50u32), 0u32..=100],
            1u32..=5_000,
            prop_oneof![Just(4u32), 1u32..=60],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(300u32), 5u32..=400],
            prop_oneof![Just(32_767u32), Just(0u32), 50u32..=5_000],
            0u32..=4,
            prop_oneof![Just(5u32), 0u32..=200],
            prop_oneof![Just(50u32), 0u32..=2_000],
            prop_oneof![3 => Just(0u32), 1 => 5_000u32..=150_000],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(500u32), 0u32..=5_000],
            any::<bool>(),
            prop_oneof![4 => Just(false), 1 => Just(true)],
            prop_oneof![4 => Just(64u32), 1 => Just(1u32)],
        ),
    )
        .prop_map(|(a, b, c)| Knobs {
            dce_tcp_g: a.0,
            dce_tcp_rtt: a.1,
            initial_alpha_value: a.2,
            rate_to_set_on_first_cnp: a.3,
            rpg_gd: a.4,
            rpg_min_dec_fac: a.5,
            rpg_min_rate: a.6,
            rate_reduce_monitor_period: a.7,
            clamp_tgt_rate: b.0,
            clamp_tgt_rate_after_time_inc: b.1,
            rpg_time_reset: b.2,
            rpg_byte_reset: b.3,
            rpg_threshold: b.4,
            rpg_ai_rate: b.5,
            rpg_hai_rate: b.6,
            rpg_max_rate: b.7,
            first_cnp_cuts: c.0,
            release_at_max: c.1,
            release_margin_kbps: c.2,
            alpha_fixed_point: c.3,
            alpha_decay_1024_minus_g: c.4,
            rpg_byte_reset_unit: c.5,
        })
}

/// CNP trains with bursts, gaps on and off the µs grid, and long quiet stretches.
fn cnps_strategy() -> impl Strategy<Value = Vec<u64>> {
    let gap = prop_oneof![
        3 => 0u64..=3,
        4 => 1u64..=40,
        3 => (1u64..=60).prop_map(|n| n * US),
        2 => 1u64..=5_000,
        2 => 5_000u64..=500_000,
        1 => 500_000u64..=5_000_000,
    ];
    (0u64..=2_000, proptest::collection::vec(gap, 0..40)).prop_map(|(start, gaps)| {
        let mut t = start * US;
        let mut v = vec![t];
        for g in gaps {
            t += g;
            v.push(t);
        }
        v
    })
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        prop_oneof![8 => Just(false), 1 => Just(true)],
        knobs_strategy(),
        prop_oneof![Just(100_000.0), Just(25_000.0), Just(400_000.0)],
        cnps_strategy(),
        0u64..=20_000,
    )
        .prop_map(|(paper, knobs, line, cnps, tail_us)| Case {
            profile: if paper {
                Profile::paper()
            } else {
                Profile::ConnectX
            },
            end: cnps.last().copied().unwrap_or(0) + tail_us * US,
            knobs,
            line,
            cnps,
        })
}

/// Event by event: same instants, kinds and causes, and the same Rc, Rt and alpha to the bit (`exact`) or
/// within a relative 1e-9 (real alpha: the closed form rounds once where the steps round at every update).
fn same_events(model: &[Event], reference: &[Event], exact: bool) -> Result<(), String> {
    let show = || format!("model:\n{}\nreference:\n{}", dump(model), dump(reference));
    if model.len() != reference.len() {
        return Err(format!(
            "{} events vs {}\n{}",
            model.len(),
            reference.len(),
            show()
        ));
    }
    let near = |a: f64, b: f64| {
        if exact {
            a == b || (a.is_nan() && b.is_nan())
        } else {
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-12
        }
    };
    for (i, (m, r)) in model.iter().zip(reference).enumerate() {
        let same = (m.t_ns, m.kind, m.cause) == (r.t_ns, r.kind, r.cause)
            && near(m.rc_mbps, r.rc_mbps)
            && near(m.rt_mbps, r.rt_mbps)
            && near(m.alpha, r.alpha)
            && near(m.rc_before_mbps, r.rc_before_mbps);
        if !same {
            return Err(format!("event {i} differs: {m:?} vs {r:?}\n{}", show()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The event-driven model makes the step-by-step replay's events: to the bit with the integer alpha, within
    /// a relative 1e-9 with the real one; and it never walks a tick to do so.
    #[test]
    fn the_event_driven_model_equals_the_step_by_step_replay(c in case_strategy()) {
        let exact = c.knobs.alpha_fixed_point && matches!(c.profile, Profile::ConnectX);
        let tol = if exact { 0.0 } else { 1e-9 * c.line };
        let model = replay(c.profile, &c.knobs, c.line, &c.cnps, c.end).unwrap();
        let reference = Stepwise::new(c.profile, &c.knobs, c.line).replay(&c.cnps, c.end);
        let (m, r) = (without_no_ops(&model, tol), without_no_ops(&reference, tol));
        if let Err(e) = same_events(&m, &r, exact) {
            return Err(TestCaseError::fail(format!("{c:?}\n{e}")));
        }
    }
}
