//! The decision: from each candidate's evidence, the pair or the reason there is none.

use serde::Serialize;

use super::super::flows::FlowKey;
use super::chance;
use super::{CLEAR_MARGIN, MIN_ACTIVITY_SHARE, MIN_REVERSE_SHARE, MIN_TIMING_SHARE, Method};

/// The false-pair rate the decision accepts: a pair is made only when a flow that is not the one the stream
/// throttles would have scored the winner's evidence with at most this chance, over all the stream's
/// candidates (one wrong pair in ten thousand streams).
pub const FALSE_PAIR_RATE: f64 = 1e-4;
/// A runner-up whose evidence has a smaller chance than this (over all candidates) is no chance either: two
/// flows answer the stream alike (flows driven together, marked in the same queue), and neither is named.
pub const RUNNER_UP_CHANCE: f64 = 0.05;
/// A candidate whose windows cover at least this share of the stream's time is "always active": its hits
/// mean nothing, however many CNPs the stream has.
pub const ALWAYS_COVERED: f64 = 0.9;
/// PSNs a response may be behind a foreign flow's: the 24-bit space.
const PSN_SPACE: f64 = (1u64 << 24) as f64;

/// Evidence that the stream to (S, q_S) from R answers the flow S→R to q_R.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Evidence {
    /// CM handshakes that named both QPs.
    pub cm: u64,
    /// UD packets S→R to q_R whose DETH named q_S.
    pub deth: u64,
    /// Responses to q_S that fit the flow's PSNs, and responses to q_R that fit the requests to q_S.
    pub reverse_fit: u64,
    /// How far behind the flow's highest PSN (in PSNs) the farthest of those responses was: a foreign flow
    /// fits as closely only when its PSNs run that close to this connection's.
    pub reverse_lag: u32,
    /// CNPs of the stream within [`super::TIMING_WINDOW_NS`] after a CE mark of the flow.
    pub ce_hits: u64,
    /// CNPs of the stream within [`super::ACTIVITY_WINDOW_NS`] after the flow sent.
    pub active_hits: u64,
}

/// One candidate flow of a stream and its scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// The flow's receiver QP (the flow goes from the stream's destination to its source).
    pub receiver_qp: u32,
    #[serde(flatten)]
    /// What supported this candidate, counted by kind.
    pub evidence: Evidence,
    /// Shares: responses fitted over the responses of both directions; CNPs after a CE mark, or while the
    /// flow sent, over the stream's CNPs. Null without anything to share.
    pub reverse_share: Option<f64>,
    /// The candidate's share of the stream's CNPs that followed one of its CE marks.
    pub ce_share: Option<f64>,
    /// The candidate's share of the stream's CNPs that came while it was sending.
    pub active_share: Option<f64>,
    /// For a candidate that fits the responses: the chance that a foreign request flow's PSNs would fit them
    /// as closely, (2 · `reverse_lag` + 1) / 2^24.
    pub reverse_null: Option<f64>,
    /// The share of the stream's time (its first to its last CNP, at the tap where this candidate's evidence
    /// was strongest) that the 20 µs after this flow's CE marks cover: how often a CNP would follow one of
    /// its marks by chance.
    pub ce_null: Option<f64>,
    /// The same for the 100 µs after each of its packets.
    pub active_null: Option<f64>,
    /// The chance that a flow that is not the stream's would have scored this well, over all candidates, on
    /// the evidence compared last: a pair needs at most [`FALSE_PAIR_RATE`]. Null where not weighed.
    pub chance: Option<f64>,
    /// P(hits ≥ this candidate's | its null rate) at its best tap, times the taps that saw the stream; 1
    /// without hits.
    #[serde(skip)]
    pub(super) ce_tail: f64,
    #[serde(skip)]
    pub(super) active_tail: f64,
}

/// A stream whose candidates tied, or that lost its flow to another stream: left unpaired, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ambiguous {
    /// The stream (receiver → sender, to the sender's QP).
    pub stream: FlowKey,
    /// What decided nothing: `tie` (another candidate's evidence is no chance either), `too_few_cnps` (the
    /// best candidate's evidence could be chance: more CNPs would tell), `all_active` (the candidates send,
    /// or are marked, nearly all the time: their hits mean nothing), `weak` (enough CNPs, too few hits), or
    /// `contested` (another stream claimed the same flow on equal evidence).
    pub reason: &'static str,
    /// Which evidence was compared last (`cm_mad`, `reverse_traffic`, `timing` or `activity`).
    pub basis: &'static str,
    /// The stream's CNPs.
    pub cnps: u64,
    /// With `too_few_cnps`: how many CNPs the best candidate would need, hitting every one, at its null rate.
    pub cnps_needed: Option<u64>,
    /// Best first.
    pub candidates: Vec<Candidate>,
}

#[derive(Debug)]
pub(super) enum Decision {
    Pair {
        receiver_qp: u32,
        method: Method,
        evidence: u64,
        /// Kept in case another stream contests the flow.
        candidates: Vec<Candidate>,
    },
    Ambiguous(Ambiguous),
    None,
}

/// The best of `cands` by CM handshakes and DETHs: at least [`CLEAR_MARGIN`] times the runner-up. These name
/// both QPs, so chance plays no part. `Err` holds the candidates best first when none wins.
fn proof_winner(mut cands: Vec<Candidate>) -> Result<Candidate, Vec<Candidate>> {
    let proof = |c: &Candidate| c.evidence.cm + c.evidence.deth;
    cands.sort_by(|a, b| {
        proof(b)
            .cmp(&proof(a))
            .then(a.receiver_qp.cmp(&b.receiver_qp))
    });
    let best = cands.first().map_or(0, proof) as f64;
    let second = cands.get(1).map_or(0, proof) as f64;
    if best > 0.0 && best >= CLEAR_MARGIN * second {
        Ok(cands.swap_remove(0))
    } else {
        Err(cands)
    }
}

/// The tiers of evidence, strongest first; a weaker tier only decides among the candidates a stronger one
/// left standing. `m` is how many flows could have been the stream's (every flow the other way between the
/// two hosts), over which any one of them could score by chance; `cnps` the stream's CNPs.
pub(super) fn decide(stream: FlowKey, mut cands: Vec<Candidate>, m: usize, cnps: u64) -> Decision {
    let m = m.max(cands.len()).max(1) as f64;
    let pair = |c: &Candidate, method: Method, evidence: u64, all: Vec<Candidate>| Decision::Pair {
        receiver_qp: c.receiver_qp,
        method,
        evidence,
        candidates: all,
    };
    let ambiguous = |reason, basis: Method, cnps_needed, candidates| {
        Decision::Ambiguous(Ambiguous {
            stream,
            reason,
            basis: basis.key(),
            cnps,
            cnps_needed,
            candidates,
        })
    };
    // 1. Proof: CM handshakes or DETHs.
    if cands.iter().any(|c| c.evidence.cm + c.evidence.deth > 0) {
        let proven: Vec<Candidate> = cands
            .iter()
            .filter(|c| c.evidence.cm + c.evidence.deth > 0)
            .cloned()
            .collect();
        return match proof_winner(proven) {
            Ok(c) if c.evidence.cm >= c.evidence.deth => {
                pair(&c, Method::CmMad, c.evidence.cm, cands)
            }
            Ok(c) => pair(&c, Method::UdDeth, c.evidence.deth, cands),
            Err(v) => ambiguous("tie", Method::CmMad, None, v),
        };
    }
    // 2. Reverse traffic: the connections the responses fit. One alone is the pair when a foreign flow's PSNs
    // would rarely run that close; several fit alike (PSN spaces side by side) and separate nothing.
    for c in &mut cands {
        if c.reverse_share.is_some_and(|s| s >= MIN_REVERSE_SHARE) {
            let lag = f64::from(c.evidence.reverse_lag);
            c.reverse_null = Some(((2.0 * lag + 1.0) / PSN_SPACE).min(1.0));
        }
    }
    let fitting = cands.iter().filter(|c| c.reverse_null.is_some()).count();
    let mut reverse_factor = 1.0;
    if fitting == 1 {
        let i = cands
            .iter()
            .position(|c| c.reverse_null.is_some())
            .unwrap_or(0);
        reverse_factor = cands[i].reverse_null.unwrap_or(1.0);
        let chance = (m * reverse_factor).min(1.0);
        cands[i].chance = Some(chance);
        if chance <= FALSE_PAIR_RATE {
            let (c, n) = (cands[i].clone(), cands[i].evidence.reverse_fit);
            return pair(&c, Method::ReverseTraffic, n, cands);
        }
    }
    let in_pool = |c: &Candidate| fitting == 0 || c.reverse_null.is_some();
    // 3. CE → CNP timing; 4. activity where the capture shows no CE of any candidate (a tap at the sender).
    let basis = if cands.iter().any(|c| in_pool(c) && c.evidence.ce_hits > 0) {
        Method::Timing
    } else if cands
        .iter()
        .any(|c| in_pool(c) && c.evidence.active_hits > 0)
    {
        Method::Activity
    } else if fitting > 0 {
        let why = if fitting == 1 { "weak" } else { "tie" };
        let pool: Vec<Candidate> = cands
            .into_iter()
            .filter(|c| c.reverse_null.is_some())
            .collect();
        return ambiguous(why, Method::ReverseTraffic, None, pool);
    } else {
        return Decision::None;
    };
    let timing = basis == Method::Timing;
    for c in cands.iter_mut().filter(|c| in_pool(c)) {
        let tail = if timing { c.ce_tail } else { c.active_tail };
        c.chance = Some((m * reverse_factor * tail).min(1.0));
    }
    let share = |c: &Candidate| if timing { c.ce_share } else { c.active_share }.unwrap_or(0.0);
    // Best first: the pool by chance, then the rest.
    cands.sort_by(|a, b| {
        let key = |c: &Candidate| (!in_pool(c), c.chance.unwrap_or(1.0));
        key(a)
            .partial_cmp(&key(b))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(share(b).total_cmp(&share(a)))
            .then(a.receiver_qp.cmp(&b.receiver_qp))
    });
    let chance = |c: &Candidate| c.chance.unwrap_or(1.0);
    let best = &cands[0];
    let runner_up = cands.get(1).filter(|c| in_pool(c));
    let min_share = if timing {
        MIN_TIMING_SHARE
    } else {
        MIN_ACTIVITY_SHARE
    };
    let beats_chance = chance(best) <= FALSE_PAIR_RATE;
    let runner_close = runner_up.is_some_and(|r| {
        chance(r) < RUNNER_UP_CHANCE || (beats_chance && chance(r) <= chance(best))
    });
    let hits = |c: &Candidate| {
        if timing {
            c.evidence.ce_hits
        } else {
            c.evidence.active_hits
        }
    };
    if beats_chance && !runner_close && share(best) >= min_share {
        let c = best.clone();
        return pair(&c, basis, hits(&c), cands);
    }
    // Several flows fit the responses, so closely that a foreign flow would rarely have (their PSNs run side
    // by side): one of them is the stream's. The stream's own flow has at least `min_share` of the CNPs after
    // its marks (or while it sent); a member with so few hits that this is out of the question is ruled
    // out, and when all but one are, that one is the pair, however often it is marked or sends.
    let established = fitting >= 2
        && cands
            .iter()
            .filter_map(|c| c.reverse_null)
            .any(|null| m * null <= FALSE_PAIR_RATE);
    if established {
        let pool = fitting as f64;
        let ruled_out = |c: &Candidate| {
            let k = hits(c).min(cnps);
            pool * chance::binomial_tail(cnps, cnps - k, 1.0 - min_share) <= FALSE_PAIR_RATE
        };
        let standing: Vec<&Candidate> = cands
            .iter()
            .filter(|c| in_pool(c) && !ruled_out(c))
            .collect();
        if standing.len() == 1 && share(standing[0]) >= min_share {
            let c = standing[0].clone();
            return pair(&c, basis, hits(&c), cands);
        }
    }
    // Why not: told of the candidate with the largest share of hits, the one a plain count would name.
    let leader = cands
        .iter()
        .filter(|c| in_pool(c))
        .max_by(|a, b| {
            share(a)
                .total_cmp(&share(b))
                .then(chance(b).total_cmp(&chance(a)))
        })
        .unwrap_or(best);
    let null = if timing {
        leader.ce_null
    } else {
        leader.active_null
    }
    .unwrap_or(1.0);
    // The CNPs the best candidate would need, all hitting, for its evidence to beat chance.
    let needed = (null < 1.0)
        .then(|| (FALSE_PAIR_RATE / (m * reverse_factor)).ln() / null.ln())
        .filter(|n| n.is_finite())
        .map(|n| n.ceil().max(1.0) as u64);
    let (reason, needed) = if runner_close {
        ("tie", None)
    } else if beats_chance {
        ("weak", None)
    } else if cnps < 2 {
        ("too_few_cnps", None)
    } else if null >= ALWAYS_COVERED {
        ("all_active", None)
    } else if needed.is_some_and(|n| cnps < n) {
        ("too_few_cnps", needed)
    } else {
        ("weak", None)
    };
    ambiguous(reason, basis, needed, cands)
}
