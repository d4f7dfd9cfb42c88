//! Which request flow a response fits: ACKs, NAKs, atomic ACKs and READ responses B→A to q_A acknowledge PSNs of
//! A's requests to B, so a response whose PSN lies just behind a request flow's highest PSN may belong to it.
//! Every response meets every request flow of its host pair (64 in a saturation test), so the PSN state of all
//! of them sits in one array, in a loop the compiler can run several lanes wide.

use super::super::psn::psn_diff;
use super::ACK_WINDOW;

/// The largest PSN span a READ REQUEST can open (PMTU 256 bytes); its responses fall inside.
pub(super) fn read_span(len: u32) -> u32 {
    len.div_ceil(256).max(1)
}

/// The request flows from one host to another: every response the other way is checked against each of
/// them (64 in a saturation test), so the PSN state of all of them sits in one array, in a loop the compiler
/// can run several lanes wide.
#[derive(Debug, Default)]
pub(super) struct RequestGroup {
    /// Each flow's receiver QP.
    pub(super) qps: Vec<u32>,
    /// Each flow's PSN high-water mark, and how far behind it a response's PSN may be and still fit:
    /// [`ACK_WINDOW`] plus the widest span one of its requests opened, and never half the PSN space or more
    /// (a PSN that far behind is ahead).
    psns: Vec<(u32, u32)>,
}

/// PSNs are 24 bits.
const PSN_MASK: u32 = 0xff_ffff;

/// The reach of a flow whose widest request spanned `slack` PSNs (it grows with the slack).
fn reach_of(slack: u32) -> u32 {
    ACK_WINDOW.saturating_add(slack).min(PSN_MASK / 2)
}

impl RequestGroup {
    pub(super) fn push(&mut self, qp: u32, psn: u32, span: u32) -> u32 {
        self.qps.push(qp);
        self.psns.push((psn, reach_of(span)));
        self.qps.len() as u32 - 1
    }

    fn len(&self) -> usize {
        self.qps.len()
    }

    /// Flow `i` sent a request of `span` PSNs from `psn`.
    pub(super) fn extend(&mut self, i: usize, psn: u32, span: u32) {
        let Some((top, reach)) = self.psns.get_mut(i) else {
            return;
        };
        let end = psn.wrapping_add(span - 1) & PSN_MASK;
        if psn_diff(end, *top) > 0 {
            *top = end;
        }
        *reach = (*reach).max(reach_of(span));
    }

    /// Adds to `fits`, per flow, whether a response with `psn` fits it (at most its reach behind its top),
    /// and keeps in `lags` the farthest behind a fitting response was.
    fn count_fits(&self, psn: u32, fits: &mut [u32], lags: &mut [u32]) {
        for ((n, lag), &(top, reach)) in fits.iter_mut().zip(lags).zip(&self.psns) {
            let behind = top.wrapping_sub(psn) & PSN_MASK;
            let fit = behind <= reach;
            *n += u32::from(fit);
            *lag = (*lag).max(if fit { behind } else { 0 });
        }
    }
}

/// The responses B→A to q_A (ACK/NAK/READ response).
#[derive(Debug, Default)]
pub(super) struct Responses {
    pub(super) count: u64,
    /// The request flows A→B they answer, once A sent a request to B.
    pub(super) group: Option<u32>,
    /// Per request flow A→B, in its group's order: how many responses fitted its PSNs. Counted here and
    /// turned into evidence at the end, as every response meets every request flow of the host pair. In 32
    /// bits, so that each response reads half the memory (the counts of thousands of streams do not stay in
    /// the cache), and added to `folded` before they could overflow.
    fits: Vec<u32>,
    /// Per request flow, how far behind its highest PSN the farthest fitting response was.
    lags: Vec<u32>,
    /// The counts of `fits` up to the last fold.
    folded: Vec<u64>,
    /// Responses counted in `fits` since the last fold: no count there is larger.
    since_fold: u32,
}

impl Responses {
    /// Counts a response with `psn` against the request flows of `group`.
    pub(super) fn fit(&mut self, group: &RequestGroup, psn: u32) {
        if self.since_fold == u32::MAX {
            self.folded.resize(self.fits.len(), 0);
            for (total, n) in self.folded.iter_mut().zip(&mut self.fits) {
                *total += u64::from(std::mem::take(n));
            }
            self.since_fold = 0;
        }
        if self.fits.len() < group.len() {
            self.fits.resize(group.len(), 0);
            self.lags.resize(group.len(), 0);
        }
        group.count_fits(psn, &mut self.fits, &mut self.lags);
        self.since_fold += 1;
    }

    /// Per request flow of the group, how many responses fitted it and how far behind the farthest was.
    pub(super) fn fitted(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let folded = self.folded.iter().copied().chain(std::iter::repeat(0));
        self.fits
            .iter()
            .zip(folded)
            .zip(&self.lags)
            .map(|((&n, f), &lag)| (f + u64::from(n), lag))
    }
}

#[cfg(test)]
mod tests {
    use super::{RequestGroup, Responses};

    #[test]
    fn fit_counts_go_past_32_bits() {
        let mut group = RequestGroup::default();
        group.push(0x11, 1000, 1);
        group.push(0x12, 5_000_000, 1);
        // Just below the fold, with the first flow fitted by every response so far.
        let mut r = Responses {
            fits: vec![u32::MAX - 1, 0],
            lags: vec![0, 0],
            since_fold: u32::MAX - 1,
            ..Responses::default()
        };
        for _ in 0..3 {
            r.fit(&group, 999);
        }
        let want = u64::from(u32::MAX) + 2;
        assert_eq!(r.fitted().collect::<Vec<_>>(), [(want, 1), (0, 0)]);
        // A flow that joined the group after the fold is counted from its first response.
        group.push(0x13, 999, 1);
        r.fit(&group, 999);
        assert_eq!(
            r.fitted().collect::<Vec<_>>(),
            [(want + 1, 1), (0, 0), (1, 0)]
        );
    }
}
