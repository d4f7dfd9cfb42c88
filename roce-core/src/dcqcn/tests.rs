use super::*;
use EventKind::*;

const LINE: f64 = 100_000.0;
const US: u64 = 1_000;

fn run(knobs: &Knobs, cnps_us: &[u64], end_us: u64) -> Vec<Event> {
    let cnps: Vec<u64> = cnps_us.iter().map(|t| t * US).collect();
    replay(Profile::ConnectX, knobs, LINE, &cnps, end_us * US).unwrap()
}

/// Everything but alpha ticks, one line per event, for failure messages.
fn dump(ev: &[Event]) -> String {
    ev.iter()
        .filter(|e| e.kind != AlphaTick)
        .map(|e| {
            format!(
                "{:>12} ns {:?}/{:?} rc {:.4} (was {:.4}) rt {:.4} alpha {:.6}\n",
                e.t_ns, e.kind, e.cause, e.rc_mbps, e.rc_before_mbps, e.rt_mbps, e.alpha
            )
        })
        .collect()
}

fn is_increase(e: &Event) -> bool {
    matches!(e.kind, FastRecovery | AdditiveIncrease | HyperIncrease)
}

/// Cuts and increases only.
fn rate_changes(ev: &[Event]) -> Vec<Event> {
    ev.iter()
        .filter(|e| e.kind == Cut || is_increase(e))
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

    // One alpha tick per µs from 1 to 400 µs.
    assert_eq!(
        ev.iter().filter(|e| e.kind == AlphaTick).count(),
        400,
        "{d}"
    );
}

#[test]
fn same_instant_cnp_before_alpha_and_decrease() {
    // A CNP exactly on the 8 µs grid point: it must be seen by the alpha tick and the cut of that very instant.
    let ev = run(&Knobs::default(), &[0, 8], 10);
    let at8: Vec<Event> = ev.iter().filter(|e| e.t_ns == 8 * US).copied().collect();
    let kinds: Vec<EventKind> = at8.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [Cnp, AlphaTick, Cut], "{}", dump(&ev));
    let prev_alpha = ev
        .iter()
        .find(|e| e.kind == AlphaTick && e.t_ns == 7 * US)
        .unwrap()
        .alpha;
    let g = 5.0 / 1024.0;
    assert!(
        close(at8[1].alpha, (1.0 - g) * prev_alpha + g, 1e-15),
        "tick did not see the CNP"
    );
    let factor = at8[2].rc_mbps / at8[2].rc_before_mbps;
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
        !ev.iter().any(|e| e.t_ns == 304 * US && is_increase(e)),
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
    let cnps: Vec<u64> = (0..3000).collect();
    let ev = run(&k, &cnps, 3000);
    let max = ev.iter().map(|e| e.alpha).fold(0.0, f64::max);
    assert!(ev.iter().all(|e| e.alpha <= 1023.0 / 1024.0));
    // From 0, alpha needs ~1420 ticks with a CNP to get there: the bound must actually have been hit.
    assert_eq!(max, 1023.0 / 1024.0);
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

#[test]
fn byte_events_alone_recover_at_exact_instants() {
    let mut k = Knobs::default();
    k.set("rpg_time_reset", &u32::MAX.to_string()).unwrap();
    k.set("rpg_gd", "1").unwrap(); // cut exactly in half
    let ev = run(&k, &[0], 2_000);
    let d = dump(&ev);
    let r = rate_changes(&ev);
    assert_eq!(
        (r[0].kind, r[0].t_ns, r[0].rc_mbps),
        (Cut, 4 * US, 50_000.0),
        "{d}"
    );
    // B = 32767·64 = 2097088 bytes = 16776704 bits. At 50000 bits/µs: 335.53408 µs, rounded up to the ns.
    assert_eq!(
        (r[1].kind, r[1].cause),
        (FastRecovery, Cause::ByteCounter),
        "{d}"
    );
    assert_eq!(r[1].t_ns, 4_000 + 335_535, "{d}");
    assert_eq!(r[1].rc_mbps, 75_000.0, "{d}");
    // At 75000 bits/µs: 223.68938.. µs → 223690 ns. BC = 1 ≥ F now: additive increase (Rt capped at line).
    assert_eq!(
        (r[2].kind, r[2].t_ns),
        (AdditiveIncrease, 339_535 + 223_690),
        "{d}"
    );
    assert_eq!(r[2].rc_mbps, 87_500.0, "{d}");

    let incs: Vec<&Event> = ev.iter().filter(|e| is_increase(e)).collect();
    assert!(incs.len() > 5, "{d}");
    assert!(incs.iter().all(|e| e.cause == Cause::ByteCounter), "{d}");
    let bits = 32_767.0 * 64.0 * 8.0;
    for w in incs.windows(2) {
        let expect = (bits * 1_000.0 / w[1].rc_before_mbps).ceil() as u64;
        assert_eq!(w[1].t_ns - w[0].t_ns, expect, "{d}");
    }
}

#[test]
fn stages_fast_recovery_then_additive_then_hyper() {
    let mut k = Knobs::default();
    k.set("rate_to_set_on_first_cnp", "10000").unwrap(); // keeps Rt below line so the steps show
    k.set("rpg_threshold", "1").unwrap();
    let ev = run(&k, &[0], 20_000);
    let d = dump(&ev);
    let incs: Vec<&Event> = ev.iter().filter(|e| is_increase(e)).collect();
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
            (55 * US, AlphaTick),
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
    assert_eq!((ev[3].rc_mbps, ev[3].rt_mbps), (30_000.0, line), "{d}");
    // Second CNP: Rt = Rc = 30000, Rc = 30000·(1 − (255/256)/2), then alpha rises.
    assert!(close(ev[5].rc_mbps, 15_058.593_75, 1e-9), "{d}");
    assert_eq!(ev[5].rt_mbps, 30_000.0, "{d}");
    assert!(close(ev[5].alpha, (1.0 - g) * (1.0 - g) + g, 1e-15), "{d}");
}

#[test]
fn paper_additive_increase_after_f_timer_events() {
    let line = 40_000.0;
    let ev = replay(Profile::paper(), &Knobs::default(), line, &[0], 400 * US).unwrap();
    let d = dump(&ev);
    let incs: Vec<&Event> = ev.iter().filter(|e| is_increase(e)).collect();
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
    assert_eq!(rp.next_event_ns(), Some(2_000_000_000 + US));
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

#[test]
fn deactivate_at_line_stops_the_timers() {
    let mut k = Knobs::default();
    k.set("deactivate_at_line", "1").unwrap();
    let mut rp = Rp::new(Profile::ConnectX, &k, LINE).unwrap();
    let mut ev = Vec::new();
    rp.on_cnp(0, &mut |e| ev.push(e));
    rp.advance(100_000 * US, &mut |e| ev.push(e));
    let last = *ev.last().unwrap();
    assert_eq!(last.kind, Inactive, "{}", dump(&ev));
    assert!(!rp.is_active());
    assert_eq!(rp.rc_mbps(), LINE);
    rp.on_cnp(200_000 * US, &mut |e| ev.push(e));
    assert_eq!(ev.last().unwrap().kind, FirstCnp);

    // Default: the timers run on at line rate.
    let ev = run(&Knobs::default(), &[0], 100_000);
    assert!(ev.iter().all(|e| e.kind != Inactive));
    assert!(ev.last().unwrap().t_ns == 100_000 * US);
}

#[test]
fn knob_file_with_comments() {
    let text = "# recorded by the tracer\n\
                rpg_gd=10\n\
                \n\
                rpg_time_reset 55   # shorter timer\n\
                roce_rp/clamp_tgt_rate = 1\n";
    let k = Knobs::from_kv_text(text).unwrap();
    assert_eq!(k.rpg_gd, 10);
    assert_eq!(k.rpg_time_reset, 55);
    assert!(k.clamp_tgt_rate);
    let d = Knobs::default();
    assert_eq!(
        Knobs {
            rpg_gd: 11,
            rpg_time_reset: 300,
            clamp_tgt_rate: false,
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
        ("first_cnp_cuts", 1),
        ("deactivate_at_line", 0),
    ];
    let got: Vec<(&str, u64)> = k.list().map(|e| (e.name, e.value)).collect();
    assert_eq!(got, want);
    assert!(k.list().all(|e| !e.meaning.is_empty()));
    assert_eq!(Knobs::NAMES.len(), want.len());
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

#[test]
fn profile_names() {
    assert_eq!(Profile::from_name("ConnectX").unwrap(), Profile::ConnectX);
    assert_eq!(Profile::from_name("paper").unwrap().name(), "paper");
    assert!(Profile::from_name("dctcp").is_err());
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

/// The events a replay without alpha ticks gives must be those of the full replay minus its ticks, bit for bit:
/// the analysis relies on it, and only the speed may differ.
#[test]
fn replay_without_alpha_ticks_drops_only_the_ticks() {
    let mut frequent_bytes = Knobs::default();
    frequent_bytes.set("rpg_byte_reset", "1000").unwrap();
    let mut slow_alpha = Knobs::default();
    slow_alpha.set("dce_tcp_rtt", "7").unwrap();
    // CNPs on and between tick instants, bursts, a CNP on a decrease tick, and a long quiet tail in which
    // alpha decays until a tick leaves it unchanged (g = 1/1024: about 760 000 ticks), so that skip runs too.
    let cnps = [
        0,
        US,
        3 * US,
        4 * US + 1,
        50 * US + 7,
        52 * US,
        55 * US,
        400 * US + 1,
        1_200 * US,
        1_200 * US + 999,
    ];
    let cases = [
        (Profile::ConnectX, &Knobs::default(), 2_000 * US),
        (Profile::ConnectX, &frequent_bytes, 3_000 * US),
        (Profile::ConnectX, &slow_alpha, 3_000 * US),
        (Profile::ConnectX, &Knobs::default(), 900_000 * US),
        (Profile::paper(), &Knobs::default(), 3_000 * US),
    ];
    for (profile, knobs, end) in cases {
        let full = replay(profile, knobs, LINE, &cnps, end).unwrap();
        let want: Vec<Event> = full
            .iter()
            .filter(|e| e.kind != AlphaTick)
            .copied()
            .collect();
        let rp = Rp::new(profile, knobs, LINE).unwrap().without_alpha_ticks();
        let got = replay_on(rp, &cnps, end);
        assert!(full.len() > got.len(), "the full replay has ticks");
        assert!(got.iter().all(|e| e.kind != AlphaTick));
        assert_eq!(got, want, "{profile:?}, end {end}");
    }
    // The quiet tail reaches the point where a tick no longer changes alpha.
    let long = replay(
        Profile::ConnectX,
        &Knobs::default(),
        LINE,
        &cnps,
        900_000 * US,
    )
    .unwrap();
    let alpha = long.last().map_or(1.0, |e| e.alpha);
    assert!(alpha < 1e-300, "alpha {alpha}");
    assert_eq!(alpha * (1.0 - 1.0 / 1024.0), alpha);
}

/// Stepping an RP without ticks in small advances gives what one replay without ticks gives.
#[test]
fn small_steps_without_alpha_ticks_match_one_replay() {
    let k = Knobs::default();
    let cnps = [3 * US, 50 * US + 7, 52 * US, 400 * US + 1];
    let end = 2_000 * US;
    let quiet = || {
        Rp::new(Profile::ConnectX, &k, LINE)
            .unwrap()
            .without_alpha_ticks()
    };
    let want = replay_on(quiet(), &cnps, end);
    let got = in_steps(&mut quiet(), &cnps, end, 333);
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

/// A budgeted replay is the unbudgeted one cut at an instant: every event up to its stop, none after.
#[test]
fn replay_within_a_budget_is_a_prefix_cut_at_an_instant() {
    let cnps = [0, 3 * US, 50 * US + 7, 52 * US, 400 * US + 1, 1_200 * US];
    let end = 100_000 * US;
    for (profile, quiet) in [
        (Profile::ConnectX, true),
        (Profile::ConnectX, false),
        (Profile::paper(), true),
    ] {
        let rp = || {
            let rp = Rp::new(profile, &Knobs::default(), LINE).unwrap();
            if quiet { rp.without_alpha_ticks() } else { rp }
        };
        let full = replay_on(rp(), &cnps, end);
        assert!(full.len() > 200, "{profile:?}: {} events", full.len());
        let whole = replay_within(rp(), &cnps, end, full.len() + 1);
        assert_eq!(whole.stopped_ns, None);
        assert_eq!(whole.events, full);
        // Every budget over the first CNPs, so that stops land on each kind of instant (a CNP, a cut on its
        // grid point, a timer due at a CNP's very instant: 1,200 µs), then a sample of the rest.
        let first = full.iter().take_while(|e| e.t_ns <= 1_300 * US).count();
        assert!(first < full.len());
        for budget in (1..=first).chain((first..full.len()).step_by(full.len() / 20 + 1)) {
            let cut = replay_within(rp(), &cnps, end, budget);
            let stop = cut.stopped_ns.expect("the budget is below the full replay");
            let want: Vec<Event> = full.iter().filter(|e| e.t_ns <= stop).copied().collect();
            assert_eq!(cut.events, want, "{profile:?}, budget {budget}");
            // Only the events of the instant that crossed the budget go beyond it.
            assert!(cut.events.len() >= budget && cut.events.len() < budget + 8);
        }
    }
}

/// An end years away costs the budget, not the years: the increase timer never stops once a flow is active.
#[test]
fn replay_to_a_far_end_stops_at_the_budget() {
    let years = 75 * 365 * 24 * 3_600 * 1_000_000_000u64;
    let rp = Rp::new(Profile::ConnectX, &Knobs::default(), LINE)
        .unwrap()
        .without_alpha_ticks();
    let r = replay_within(rp, &[10 * US, 20 * US], years, 50_000);
    let stop = r.stopped_ns.expect("stopped");
    assert!(stop < years);
    assert!(r.events.len() >= 50_000 && r.events.len() < 50_008);
    assert_eq!(r.events.last().map(|e| e.t_ns), Some(stop));
}
