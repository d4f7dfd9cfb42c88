//! PSN bookkeeping for one flow: what was skipped, what came late, what came twice.
//!
//! Remembering every PSN a flow carried would make memory grow with packets, so the tracker keeps only the
//! high-water mark and a bounded list of holes below it. A PSN below the mark that fills a hole arrived out of
//! order; any other PSN below the mark was already carried, so it is a retransmission. Holes still open at the
//! end are PSNs the capture never saw.

use std::collections::VecDeque;

/// PSNs are 24-bit and wrap.
const PSN_MOD: u32 = 1 << 24;
/// Holes remembered per flow. Past this the oldest hole is forgotten (still counted as never seen), so a
/// later fill of it would count as a retransmission: a flow with this many simultaneous holes is broken anyway.
pub const MAX_HOLES: usize = 64;
/// Path MTUs RoCE may use; a READ REQUEST consumes one PSN per response packet, ceil(len / PMTU).
const PMTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Signed distance from `b` to `a` in 24-bit PSN space, in [-2^23, 2^23).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & (PSN_MOD - 1);
    if d >= PSN_MOD / 2 {
        d as i32 - PSN_MOD as i32
    } else {
        d as i32
    }
}

fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & (PSN_MOD - 1)
}

/// What one packet's PSN meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsnEvent {
    /// The next PSN expected.
    InOrder,
    /// The PSN jumped ahead, leaving this many PSNs unseen (for now).
    Gap(u32),
    /// Filled a hole left earlier.
    OutOfOrder,
    /// This PSN was already carried.
    Retransmission,
}

/// A READ REQUEST's span is not known without the PMTU, so it is kept open until the next PSN shows which
/// PMTU explains it.
#[derive(Debug, Clone, Copy)]
struct ReadSpan {
    psn: u32,
    len: u32,
}

/// `repr(C)` keeps the fields every in-order packet reads (`next`, `read`) at the start, in the cache line
/// the flow table gives the tracker; the holes are touched only when PSNs go missing.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct PsnTracker {
    /// The PSN expected next (one past the highest carried).
    next: Option<u32>,
    read: Option<ReadSpan>,
    /// Open holes as (first PSN, count), oldest first.
    holes: VecDeque<(u32, u32)>,
    forgotten: u64,
}

impl PsnTracker {
    /// Records a packet with `psn` that consumes one PSN, or a READ REQUEST for `read_len` bytes.
    #[inline]
    pub fn observe(&mut self, psn: u32, read_len: Option<u32>) -> PsnEvent {
        let Some(mut next) = self.next else {
            self.advance_to(psn, read_len);
            return PsnEvent::InOrder;
        };
        if let Some(span) = self.read.take() {
            next = resolve_read(span, psn);
            self.next = Some(next);
        }
        let d = psn_diff(psn, next);
        if d == 0 {
            self.advance_to(psn, read_len);
            PsnEvent::InOrder
        } else if d > 0 {
            self.add_hole(next, d as u32);
            self.advance_to(psn, read_len);
            PsnEvent::Gap(d as u32)
        } else if self.fill_hole(psn) {
            PsnEvent::OutOfOrder
        } else {
            PsnEvent::Retransmission
        }
    }

    fn advance_to(&mut self, psn: u32, read_len: Option<u32>) {
        match read_len {
            Some(len) => {
                self.read = Some(ReadSpan { psn, len });
                self.next = Some(psn_add(psn, 1));
            }
            None => self.next = Some(psn_add(psn, 1)),
        }
    }

    #[cold]
    fn add_hole(&mut self, first: u32, count: u32) {
        if self.holes.len() == MAX_HOLES
            && let Some((_, n)) = self.holes.pop_front()
        {
            self.forgotten += u64::from(n);
        }
        self.holes.push_back((first, count));
    }

    #[cold]
    fn fill_hole(&mut self, psn: u32) -> bool {
        let Some(i) = self
            .holes
            .iter()
            .position(|&(first, n)| u32::try_from(psn_diff(psn, first)).is_ok_and(|k| k < n))
        else {
            return false;
        };
        let (first, n) = self.holes[i];
        let k = psn_diff(psn, first) as u32;
        // Split the hole around the filled PSN.
        let before = (first, k);
        let after = (psn_add(psn, 1), n - k - 1);
        self.holes.remove(i);
        let mut at = i;
        for part in [before, after] {
            if part.1 > 0 {
                self.holes.insert(at, part);
                at += 1;
            }
        }
        true
    }

    /// PSNs skipped and never seen so far.
    pub fn unseen(&self) -> u64 {
        self.forgotten + self.holes.iter().map(|&(_, n)| u64::from(n)).sum::<u64>()
    }
}

/// The PSN that follows a READ REQUEST, given the PSN that actually came next: the span that some valid PMTU
/// explains, else the shortest possible span (so a real gap after a read is still counted).
fn resolve_read(span: ReadSpan, seen: u32) -> u32 {
    let d = psn_diff(seen, span.psn);
    let spans = PMTUS.map(|m| span.len.div_ceil(m).max(1));
    if d > 0 && spans.contains(&(d as u32)) {
        return seen;
    }
    // Spans shrink as the PMTU grows; the largest span not beyond what we saw leaves the smallest gap.
    let best = spans
        .iter()
        .copied()
        .filter(|&s| i64::from(s) <= i64::from(d))
        .max()
        .unwrap_or(spans[PMTUS.len() - 1]);
    psn_add(span.psn, best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_wraps() {
        assert_eq!(psn_diff(0, PSN_MOD - 1), 1);
        assert_eq!(psn_diff(PSN_MOD - 1, 0), -1);
        assert_eq!(psn_diff(5, 5), 0);
    }

    #[test]
    fn in_order_across_wrap() {
        let mut t = PsnTracker::default();
        for i in 0..10u32 {
            assert_eq!(t.observe(psn_add(PSN_MOD - 5, i), None), PsnEvent::InOrder);
        }
        assert_eq!(t.unseen(), 0);
    }

    #[test]
    fn gap_then_fill_then_duplicate() {
        let mut t = PsnTracker::default();
        assert_eq!(t.observe(100, None), PsnEvent::InOrder);
        assert_eq!(t.observe(104, None), PsnEvent::Gap(3));
        assert_eq!(t.unseen(), 3);
        assert_eq!(t.observe(102, None), PsnEvent::OutOfOrder);
        assert_eq!(t.unseen(), 2);
        assert_eq!(t.observe(102, None), PsnEvent::Retransmission);
        assert_eq!(t.observe(101, None), PsnEvent::OutOfOrder);
        assert_eq!(t.observe(103, None), PsnEvent::OutOfOrder);
        assert_eq!(t.unseen(), 0);
        assert_eq!(t.observe(100, None), PsnEvent::Retransmission);
        assert_eq!(t.observe(105, None), PsnEvent::InOrder);
    }

    #[test]
    fn go_back_n_counts_resent_packets() {
        let mut t = PsnTracker::default();
        for p in 0..8 {
            t.observe(p, None);
        }
        let resent: Vec<_> = (3..8).map(|p| t.observe(p, None)).collect();
        assert!(resent.iter().all(|e| *e == PsnEvent::Retransmission));
        assert_eq!(t.observe(8, None), PsnEvent::InOrder);
    }

    #[test]
    fn read_request_span_by_any_pmtu() {
        let mut t = PsnTracker::default();
        // 64 KiB at PMTU 1024 consumes 64 PSNs.
        assert_eq!(t.observe(10, Some(65536)), PsnEvent::InOrder);
        assert_eq!(t.observe(74, None), PsnEvent::InOrder);
        assert_eq!(t.unseen(), 0);
        // A zero-length read consumes one PSN.
        assert_eq!(t.observe(75, Some(0)), PsnEvent::InOrder);
        assert_eq!(t.observe(76, None), PsnEvent::InOrder);
        // 4096 bytes: 1 (4096), 2 (2048), 4, 8 or 16 PSNs; a jump of 20 leaves 4 unseen.
        assert_eq!(t.observe(77, Some(4096)), PsnEvent::InOrder);
        assert_eq!(t.observe(97, None), PsnEvent::Gap(4));
    }

    #[test]
    fn holes_are_bounded() {
        let mut t = PsnTracker::default();
        let mut p = 0;
        for _ in 0..(MAX_HOLES + 10) {
            t.observe(p, None);
            p += 3;
        }
        assert!(t.holes.len() <= MAX_HOLES);
        assert_eq!(t.unseen(), 2 * (MAX_HOLES as u64 + 9));
    }
}
