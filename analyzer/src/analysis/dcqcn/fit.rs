//! The knob fit: the alpha gain and cut factor, the two knobs that shape a cut most, that bring a flow's model
//! closest to the rate it was seen to send.

use rustc_hash::FxHashMap;

use roce_core::dcqcn::{DcqcnError, Knobs, Profile};

use super::Options;
use super::grid::Grid;
use super::report::{Fit, FlowDcqcn};
use super::stretches::Stretches;
use super::window::Window;

/// CNPs of a flow the fit looks at, from its first: the model and the observed rate are compared up to the
/// last of them. Beyond some thousands of cuts more CNPs do not move the fit, and the candidates' replays stay
/// bounded however long a flow was congested.
pub const FIT_CNPS: usize = 50_000;

/// Alpha gains and cut factors the fit tries: the ConnectX defaults and their neighbours.
const FIT_G: [u32; 8] = [1023, 1021, 1019, 1015, 1007, 991, 959, 895];
const FIT_GD: [u32; 5] = [9, 10, 11, 12, 13];

/// The knob pair that brings the model closest to the observed rate.
///
/// Coordinate descent over the grid rather than all 40 pairs: from the grid point nearest the given knobs,
/// every cut factor with the gain held, then every gain with the best cut factor held, until neither moves
/// (most flows settle in two sweeps, about 15 replays). Each replay keeps only its stretches' tally, and
/// stops at the flow's [`FIT_CNPS`]th CNP.
pub(super) fn fit_knobs(
    cnps: &[u64],
    f: &FlowDcqcn,
    grid: Grid,
    end: u64,
    (opts, given): (&Options, &Knobs),
) -> Result<Option<Fit>, DcqcnError> {
    if !matches!(opts.profile, Profile::ConnectX) {
        return Ok(None);
    }
    let cnps = &cnps[..cnps.len().min(FIT_CNPS)];
    // Up to the last CNP looked at, plus the recovery after it; and never past where the model stopped.
    let horizon = if cnps.len() < f.cnp_ts_ns.len() {
        cnps.last()
            .map(|&t| t.saturating_add(opts.reaction_window_ns))
    } else {
        None
    };
    let until = match (horizon, f.summary.model_stopped_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let window = Window {
        width: grid.width,
        first_cnp: cnps[0],
        until,
    };
    let replay_end = until.unwrap_or(end).min(end);
    let last = f
        .observed
        .last()
        .map_or(0, |o| o.t_ns.saturating_add(grid.width));
    let line_mbps = opts.line_of(f.summary.iface).mbps();
    let error = |knobs: &Knobs| -> Result<Option<(f64, usize)>, DcqcnError> {
        let mut st = Stretches::new(&f.observed, window, f.frame_bits, line_mbps);
        let stopped = opts.run_model((knobs, line_mbps), cnps, replay_end, |e| {
            st.at(e.t_ns, e.rc_mbps)
        })?;
        if stopped.is_some_and(|s| until.is_none_or(|u| s < u)) {
            // Not modeled over the same stretch of time as the others, so its error would not compare.
            return Ok(None);
        }
        let t = st.finish(until.map_or(last, |u| u.min(last)));
        let error = if t.span_ns > 0 {
            t.error_bits / t.span_ns as f64
        } else {
            0.0
        };
        Ok(Some((error, t.compared)))
    };
    let Some((given_error, n)) = error(given)? else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(None);
    }
    let nearest = |grid: &[u32], v: u32| -> usize {
        (0..grid.len())
            .min_by_key(|&i| grid[i].abs_diff(v))
            .unwrap_or(0)
    };
    let mut tried: FxHashMap<(usize, usize), Option<f64>> = FxHashMap::default();
    let mut eval = |gi: usize, di: usize| -> Result<Option<f64>, DcqcnError> {
        if let Some(e) = tried.get(&(gi, di)) {
            return Ok(*e);
        }
        let knobs = Knobs {
            dce_tcp_g: FIT_G[gi],
            rpg_gd: FIT_GD[di],
            ..given.clone()
        };
        let e = error(&knobs)?.map(|(e, _)| e);
        tried.insert((gi, di), e);
        Ok(e)
    };
    let mut at = (
        nearest(&FIT_G, given.dce_tcp_g),
        nearest(&FIT_GD, given.rpg_gd),
    );
    let mut best = (f64::INFINITY, at);
    for _ in 0..FIT_G.len() + FIT_GD.len() {
        let before = best.1;
        for di in 0..FIT_GD.len() {
            if let Some(e) = eval(at.0, di)?
                && e < best.0 - 1e-12
            {
                best = (e, (at.0, di));
            }
        }
        at = best.1;
        for gi in 0..FIT_G.len() {
            if let Some(e) = eval(gi, at.1)?
                && e < best.0 - 1e-12
            {
                best = (e, (gi, at.1));
            }
        }
        at = best.1;
        if at == before {
            break;
        }
    }
    let candidates = tried.len() + 1;
    // The given knobs win ties: a fit only reports a pair that does better.
    let (error_gbps, dce_tcp_g, rpg_gd) = if best.0 < given_error - 1e-12 {
        (best.0, FIT_G[best.1.0], FIT_GD[best.1.1])
    } else {
        (given_error, given.dce_tcp_g, given.rpg_gd)
    };
    Ok(Some(Fit {
        dce_tcp_g,
        rpg_gd,
        error_gbps,
        given_error_gbps: given_error,
        stretches_compared: n,
        candidates,
    }))
}
