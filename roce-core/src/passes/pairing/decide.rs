//! The decision: from each candidate's evidence, the pair or the reason there is none.

use serde::Serialize;

use super::super::flows::FlowKey;
use super::{CLEAR_MARGIN, MIN_ACTIVITY_SHARE, MIN_REVERSE_SHARE, MIN_TIMING_SHARE, Method};

/// Evidence that the stream to (S, q_S) from R answers the flow S→R to q_R.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Evidence {
    /// CM handshakes that named both QPs.
    pub cm: u64,
    /// UD packets S→R to q_R whose DETH named q_S.
    pub deth: u64,
    /// Responses to q_S that fit the flow's PSNs, and responses to q_R that fit the requests to q_S.
    pub reverse_fit: u64,
    /// CNPs of the stream within [`TIMING_WINDOW_NS`] after a CE mark of the flow.
    pub ce_hits: u64,
    /// CNPs of the stream within [`ACTIVITY_WINDOW_NS`] after the flow sent.
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
}

/// A stream whose candidates tied, or that lost its flow to another stream: left unpaired, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ambiguous {
    /// The stream (receiver → sender, to the sender's QP).
    pub stream: FlowKey,
    /// What decided nothing: `tie` (no candidate clearly ahead), `weak` (one candidate, too little evidence),
    /// or `contested` (another stream claimed the same flow on equal evidence).
    pub reason: &'static str,
    /// Which evidence was compared last (`cm_mad`, `reverse_traffic`, `timing` or `activity`).
    pub basis: &'static str,
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

/// The clear winner by `score` among `cands`, if there is one: at least `min`, and at least
/// [`CLEAR_MARGIN`] times the runner-up. `Err` holds the candidates best first when none wins.
fn clear_winner(
    mut cands: Vec<Candidate>,
    score: impl Fn(&Candidate) -> f64,
    min: f64,
) -> Result<Candidate, Vec<Candidate>> {
    cands.sort_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then(a.receiver_qp.cmp(&b.receiver_qp))
    });
    let best = cands.first().map_or(0.0, &score);
    let second = cands.get(1).map_or(0.0, &score);
    if best > 0.0 && best >= min && best >= CLEAR_MARGIN * second {
        Ok(cands.swap_remove(0))
    } else {
        Err(cands)
    }
}

/// The tiers of evidence, strongest first; a weaker tier only decides among the candidates a stronger one
/// left standing.
pub(super) fn decide(stream: FlowKey, cands: Vec<Candidate>) -> Decision {
    let all = cands.clone();
    let pair = |c: Candidate, method: Method, evidence: u64| Decision::Pair {
        receiver_qp: c.receiver_qp,
        method,
        evidence,
        candidates: all.clone(),
    };
    let ambiguous = |reason: &'static str, basis: Method, candidates: Vec<Candidate>| {
        Decision::Ambiguous(Ambiguous {
            stream,
            reason,
            basis: basis.key(),
            candidates,
        })
    };
    // 1. Proof: CM handshakes or DETHs.
    let proof = |c: &Candidate| (c.evidence.cm + c.evidence.deth) as f64;
    if cands.iter().any(|c| proof(c) > 0.0) {
        let proven: Vec<Candidate> = cands.iter().filter(|c| proof(c) > 0.0).cloned().collect();
        return match clear_winner(proven, proof, 1.0) {
            Ok(c) if c.evidence.cm >= c.evidence.deth => {
                let n = c.evidence.cm;
                pair(c, Method::CmMad, n)
            }
            Ok(c) => {
                let n = c.evidence.deth;
                pair(c, Method::UdDeth, n)
            }
            Err(v) => ambiguous("tie", Method::CmMad, v),
        };
    }
    // 2. Reverse traffic: the connections the responses fit.
    let fitting: Vec<Candidate> = cands
        .iter()
        .filter(|c| c.reverse_share.is_some_and(|s| s >= MIN_REVERSE_SHARE))
        .cloned()
        .collect();
    let (pool, narrowed) = match fitting.len() {
        1 => {
            let c = fitting.into_iter().next().expect("one candidate");
            let n = c.evidence.reverse_fit;
            return pair(c, Method::ReverseTraffic, n);
        }
        0 => (cands, false),
        _ => (fitting, true),
    };
    // 3. CE → CNP timing; 4. activity when the capture shows no CE of any candidate.
    let ce = |c: &Candidate| c.ce_share.unwrap_or(0.0);
    let active = |c: &Candidate| c.active_share.unwrap_or(0.0);
    let (basis, result) = if pool.iter().any(|c| c.evidence.ce_hits > 0) {
        (Method::Timing, clear_winner(pool, ce, MIN_TIMING_SHARE))
    } else if pool.iter().any(|c| c.evidence.active_hits > 0) {
        (
            Method::Activity,
            clear_winner(pool, active, MIN_ACTIVITY_SHARE),
        )
    } else if narrowed {
        return ambiguous("tie", Method::ReverseTraffic, pool);
    } else {
        return Decision::None;
    };
    match result {
        Ok(c) => {
            let n = if basis == Method::Timing {
                c.evidence.ce_hits
            } else {
                c.evidence.active_hits
            };
            pair(c, basis, n)
        }
        Err(v) if v.len() == 1 => ambiguous("weak", basis, v),
        Err(v) => ambiguous("tie", basis, v),
    }
}
