//! The logs of CE marks and CNPs the pass keeps per flow and stream and tap, replayed at the end for the
//! pairs made, and what the notification point's check reads from them.

use crate::spill::{Spill, SpillLog, next_varint, put_varint};

/// Times in the order the pass met them, each with the pass's frame number (which orders a flow's marks
/// against a stream's CNPs, also where timestamps tie or run backwards): deltas as LEB128 varints, the time's
/// zigzagged, so an entry of a busy flow takes a few bytes, and all but the newest few hundred bytes of each
/// log wait on disk (see [`crate::spill`]) until the pairs are known.
#[derive(Debug, Default)]
pub(super) struct EventLog {
    log: SpillLog,
    last_ts: u64,
    last_seq: u64,
    /// Entries pushed.
    pub(super) len: u64,
}

impl EventLog {
    pub(super) fn push(&mut self, ts: u64, seq: u64, spill: &mut Spill) {
        self.len += 1;
        let dt = ts.wrapping_sub(self.last_ts) as i64;
        let tail = self.log.tail();
        put_varint(tail, ((dt << 1) ^ (dt >> 63)) as u64);
        put_varint(tail, seq.wrapping_sub(self.last_seq));
        self.log.entry_done(spill);
        self.last_ts = ts;
        self.last_seq = seq;
    }

    /// (time, frame number) in the order pushed.
    pub(super) fn iter<'a>(&'a self, spill: &'a Spill) -> impl Iterator<Item = (u64, u64)> + 'a {
        let mut bytes = self.log.bytes(spill);
        let (mut ts, mut seq) = (0u64, 0u64);
        std::iter::from_fn(move || {
            let z = next_varint(&mut bytes)?;
            let dt = ((z >> 1) as i64) ^ -((z & 1) as i64);
            ts = ts.wrapping_add(dt as u64);
            seq = seq.wrapping_add(next_varint(&mut bytes)?);
            Some((ts, seq))
        })
    }
}

/// The least gaps between two CNPs to one QP (`min_time_between_cnps`, µs) for which the first CE mark after
/// the gap is noted exactly: 0 (a CNP per mark), NVIDIA's default 4, the paper's 50, and steps between. A
/// notification point answers the first mark after its gap, and which one that is depends on the gap, which is
/// only known once the knobs are (after the capture is read).
pub const NP_GAPS_US: [u64; 8] = [0, 1, 2, 4, 8, 16, 32, 50];

/// For each CNP of a stream (its time), the first CE mark of the flow after each gap of [`NP_GAPS_US`] since the
/// stream's previous CNP, as ns before the CNP (`u32::MAX`: none, or further back than 4 s).
pub type NpMarks = (u64, [u32; NP_GAPS_US.len()]);

/// For each CNP of a stream at one tap, the marks of a flow there it may answer, from the two logs: after the
/// stream's previous CNP, the flow's first CE mark at or after each gap of [`NP_GAPS_US`]. A CNP before the
/// flow's first mark has none; at the first CNP after it, that first mark counts for every gap (the NP had no
/// gap to wait since the stream's previous CNP), unless it came before that previous CNP.
pub(super) fn np_marks(
    cnps: impl Iterator<Item = (u64, u64)>,
    ce: impl Iterator<Item = (u64, u64)>,
) -> Vec<NpMarks> {
    const GAPS: usize = NP_GAPS_US.len();
    let mut out = Vec::new();
    let mut ce = ce.peekable();
    let mut first_ce: Option<u64> = None;
    // Since the stream's last CNP that met the flow marked: that CNP's time and the marks found after it.
    let mut open: Option<(u64, [Option<u64>; GAPS])> = None;
    let mut prev: Option<u64> = None;
    for (t, seq) in cnps {
        while let Some((c, _)) = ce.next_if(|&(_, s)| s < seq) {
            first_ce.get_or_insert(c);
            if let Some((since, marks)) = &mut open {
                for (slot, g) in marks.iter_mut().zip(NP_GAPS_US) {
                    if slot.is_none() && c >= since.saturating_add(g * 1_000) {
                        *slot = Some(c);
                    }
                }
            }
        }
        if let Some(first) = first_ce {
            let marks = match open {
                Some((_, marks)) => marks,
                None => [Some(first).filter(|&c| prev.is_none_or(|p| c > p)); GAPS],
            };
            if marks.iter().any(Option::is_some) {
                let before = marks.map(|m| {
                    m.filter(|&c| c <= t)
                        .and_then(|c| u32::try_from(t - c).ok())
                        .unwrap_or(u32::MAX)
                });
                out.push((t, before));
            }
            open = Some((t, [None; GAPS]));
        }
        prev = Some(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{EventLog, NP_GAPS_US, NpMarks, np_marks};
    use crate::spill::Spill;
    use proptest::prelude::*;

    /// The NP marks as the pass once worked them out, frame by frame: each CE mark fills the open slots of the
    /// stream's wait, each CNP takes what the wait found and starts the next one.
    fn marks_frame_by_frame(events: &[(bool, u64)]) -> Vec<NpMarks> {
        let mut out = Vec::new();
        let (mut first_ce, mut prev) = (None::<u64>, None::<u64>);
        let mut wait: Option<(u64, [Option<u64>; NP_GAPS_US.len()])> = None;
        for &(is_cnp, t) in events {
            if !is_cnp {
                first_ce.get_or_insert(t);
                if let Some((since, marks)) = &mut wait {
                    for (slot, g) in marks.iter_mut().zip(NP_GAPS_US) {
                        if slot.is_none() && t >= *since + g * 1_000 {
                            *slot = Some(t);
                        }
                    }
                }
                continue;
            }
            if let Some(first) = first_ce {
                let marks = wait.map_or(
                    [Some(first).filter(|&c| prev.is_none_or(|p| c > p)); 8],
                    |w| w.1,
                );
                if marks.iter().any(Option::is_some) {
                    let before = marks.map(|m| match m {
                        Some(c) if c <= t && t - c <= u64::from(u32::MAX) => (t - c) as u32,
                        _ => u32::MAX,
                    });
                    out.push((t, before));
                }
                wait = Some((t, [None; 8]));
            }
            prev = Some(t);
        }
        out
    }

    proptest! {
        /// The logs replayed at the end give what the frame-by-frame way gave, also where times tie or run
        /// backwards (the frame order decides).
        #[test]
        fn replayed_logs_give_the_marks_of_the_frame_by_frame_way(
            steps in proptest::collection::vec((any::<bool>(), -3_000i64..60_000), 0..200)
        ) {
            let mut t = 10_000_000i64;
            // Blocks of the logs are cut as in a capture, and wait in memory: a case is far too small to be
            // written to a file.
            let mut spill = Spill::default();
            let (mut cnps, mut ce) = (EventLog::default(), EventLog::default());
            let mut events = Vec::new();
            for (seq, (is_cnp, dt)) in steps.into_iter().enumerate() {
                t += dt;
                events.push((is_cnp, t as u64));
                if is_cnp {
                    cnps.push(t as u64, seq as u64, &mut spill);
                } else {
                    ce.push(t as u64, seq as u64, &mut spill);
                }
            }
            prop_assert_eq!(
                np_marks(cnps.iter(&spill), ce.iter(&spill)),
                marks_frame_by_frame(&events)
            );
        }
    }

    #[test]
    fn the_log_gives_back_what_it_was_given_also_when_time_runs_backwards() {
        let given = [
            (5, 1),
            (1_000_000_007, 2),
            (3, 300),
            (u64::MAX, 301),
            (0, 1 << 40),
            (0, (1 << 40) + 1),
        ];
        let mut spill = Spill::in_memory();
        let mut log = EventLog::default();
        for (ts, seq) in given {
            log.push(ts, seq, &mut spill);
        }
        assert_eq!(log.iter(&spill).collect::<Vec<_>>(), given);
    }
}
