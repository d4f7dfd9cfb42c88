//! PSN bookkeeping for one flow: what was skipped, what came late, what came twice.
//!
//! Remembering every PSN a flow carried would make memory grow with packets, so the tracker keeps only the
//! high-water mark and a bounded list of holes below it. A PSN below the mark that fills a hole arrived out of
//! order; any other PSN below the mark was already carried, so it is a retransmission. Holes still open at the
//! end are PSNs the capture never saw.
//!
//! One direction of a queue pair can carry two PSN sequences: the requests it sends, numbered from its own
//! request space, and the READ responses and atomic ACKs it returns for the peer's requests, numbered from the
//! peer's. rping, NVMe-oF targets and every application that both sends and serves READs do this. Counted as
//! one sequence, each switch between the two looks like a jump of millions of PSNs, so [`FlowPsn`] keeps the
//! two apart. The response sequence is not contiguous (the peer's SENDs and WRITEs take PSNs that no READ
//! response answers), so only what the responder guarantees counts there: the packets of one READ response
//! follow each other, and responses come in PSN order.

use std::collections::VecDeque;

use roce_wire::Opcode;

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

/// Which PSN sequence a packet belongs to, and what its opcode says about the PSNs around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// A request (SEND, WRITE, READ REQUEST, atomic, RESYNC): the next PSN of the sender's own request space.
    /// A READ REQUEST for `read_len` bytes reserves one PSN per response packet.
    Request {
        /// The READ REQUEST's DMA length (0 when its RETH was not captured); `None` for other requests.
        read_len: Option<u32>,
    },
    /// A READ response packet or an atomic ACK: a PSN of the peer's request space, answered.
    Response {
        /// The first packet of an answer (READ RESPONSE FIRST or ONLY, an atomic ACK): PSNs the peer spent on
        /// requests without such an answer may come before it.
        begins: bool,
        /// The last packet of an answer (LAST, ONLY, an atomic ACK).
        ends: bool,
    },
}

impl Numbering {
    /// How a packet with `opcode` is numbered; `reth_len` is the DMA length of its RETH, if it has one.
    /// `None` for packets no sequence counts: an ACK or NAK carries the PSN it acknowledges, and one ACK may
    /// stand for many requests or repeat for a retransmitted one; CNPs and undefined opcodes carry none.
    #[inline]
    pub fn of(opcode: Opcode, reth_len: Option<u32>) -> Option<Numbering> {
        if opcode.consumes_request_psn() {
            let read_len = opcode.is_read_request().then(|| reth_len.unwrap_or(0));
            return Some(Numbering::Request { read_len });
        }
        let op = opcode.operation();
        let (begins, ends) = if opcode.is_read_response() {
            (
                matches!(op, READ_RESPONSE_FIRST | READ_RESPONSE_ONLY),
                matches!(op, READ_RESPONSE_LAST | READ_RESPONSE_ONLY),
            )
        } else if opcode.is_ack() && op == ATOMIC_ACKNOWLEDGE {
            (true, true)
        } else {
            return None;
        };
        Some(Numbering::Response { begins, ends })
    }
}

const READ_RESPONSE_FIRST: u8 = Opcode::RC_RDMA_READ_RESPONSE_FIRST.operation();
const READ_RESPONSE_LAST: u8 = Opcode::RC_RDMA_READ_RESPONSE_LAST.operation();
const READ_RESPONSE_ONLY: u8 = Opcode::RC_RDMA_READ_RESPONSE_ONLY.operation();
const ATOMIC_ACKNOWLEDGE: u8 = Opcode::RC_ATOMIC_ACKNOWLEDGE.operation();

/// Both PSN sequences of one flow. `repr(C)` keeps the request tracker, which every request reads, first; the
/// responses' tracker is allocated only for flows that carry responses, so the common flow stays small.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct FlowPsn {
    /// The flow's own requests.
    pub requests: PsnTracker,
    /// The READ responses and atomic ACKs it returns, once it returned one.
    pub responses: Option<Box<PsnTracker>>,
}

impl FlowPsn {
    /// Records one packet in the sequence it belongs to.
    #[inline]
    pub fn observe(&mut self, psn: u32, numbering: Numbering) -> PsnEvent {
        match numbering {
            Numbering::Request { read_len } => self.requests.observe(psn, read_len),
            Numbering::Response { begins, ends } => self
                .responses
                .get_or_insert_with(Box::default)
                .observe_response(psn, begins, ends),
        }
    }

    /// PSNs skipped and never seen so far, in both sequences.
    pub fn unseen(&self) -> u64 {
        self.requests.unseen() + self.responses.as_ref().map_or(0, |r| r.unseen())
    }
}

/// A READ REQUEST's span is not known without the PMTU, so it is kept open until the next PSN shows which
/// PMTU explains it.
#[derive(Debug, Clone, Copy)]
struct ReadSpan {
    psn: u32,
    len: u32,
}

/// `repr(C)` keeps the fields every in-order packet reads (`next`, `read`, `open`) at the start, in the cache
/// line the flow table gives the tracker; the holes are touched only when PSNs go missing.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct PsnTracker {
    /// The PSN expected next (one past the highest carried).
    next: Option<u32>,
    read: Option<ReadSpan>,
    /// In a response sequence: the last packet seen began or continued an answer that has not ended, so the
    /// next one must follow it.
    open: bool,
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
        } else {
            self.late(psn)
        }
    }

    /// Records a response packet: `begins` and `ends` say where it sits in its answer.
    ///
    /// Between two answers the sequence may jump (the peer's other requests took those PSNs), inside one it
    /// may not. When a packet shows that an answer lost its start or its end, how many packets went with it
    /// is not known without the request, so one PSN is counted: the least that was lost.
    pub fn observe_response(&mut self, psn: u32, begins: bool, ends: bool) -> PsnEvent {
        let Some(next) = self.next else {
            self.next = Some(psn_add(psn, 1));
            self.open = !ends;
            return PsnEvent::InOrder;
        };
        let d = psn_diff(psn, next);
        if d < 0 {
            return self.late(psn);
        }
        let ev = match (d, self.open, begins) {
            (0, _, _) | (_, false, true) => PsnEvent::InOrder,
            // Inside an answer: exactly the PSNs skipped.
            (d, true, false) => {
                self.add_hole(next, d as u32);
                PsnEvent::Gap(d as u32)
            }
            // A new answer while the last one had not ended: its end was lost.
            (_, true, true) => {
                self.add_hole(next, 1);
                PsnEvent::Gap(1)
            }
            // The middle or end of an answer whose start was lost, just before it.
            (_, false, false) => {
                self.add_hole(psn_add(psn, PSN_MOD - 1), 1);
                PsnEvent::Gap(1)
            }
        };
        self.next = Some(psn_add(psn, 1));
        self.open = !ends;
        ev
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

    /// A PSN below the high-water mark: a hole filled, or a PSN carried again.
    #[cold]
    fn late(&mut self, psn: u32) -> PsnEvent {
        if self.fill_hole(psn) {
            PsnEvent::OutOfOrder
        } else {
            PsnEvent::Retransmission
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

    fn response(begins: bool, ends: bool) -> Numbering {
        Numbering::Response { begins, ends }
    }

    const SEND: Numbering = Numbering::Request { read_len: None };

    #[test]
    fn opcodes_choose_their_sequence() {
        let of = |op: Opcode| Numbering::of(op, Some(8192));
        assert_eq!(of(Opcode::RC_SEND_ONLY), Some(SEND));
        assert_eq!(of(Opcode::RC_FETCH_ADD), Some(SEND));
        assert_eq!(
            of(Opcode::RC_RDMA_READ_REQUEST),
            Some(Numbering::Request {
                read_len: Some(8192)
            })
        );
        // A READ REQUEST cut before its RETH still reserves at least one PSN.
        assert_eq!(
            Numbering::of(Opcode::RC_RDMA_READ_REQUEST, None),
            Some(Numbering::Request { read_len: Some(0) })
        );
        let answers = [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, true, false),
            (Opcode::RD_RDMA_READ_RESPONSE_MIDDLE, false, false),
            (Opcode::XRC_RDMA_READ_RESPONSE_LAST, false, true),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, true, true),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, true, true),
        ];
        for (op, begins, ends) in answers {
            assert_eq!(of(op), Some(response(begins, ends)), "{op:?}");
        }
        for op in [Opcode::RC_ACKNOWLEDGE, Opcode::CNP, Opcode(0x1f)] {
            assert_eq!(of(op), None, "{op:?}");
        }
    }

    /// rping's pattern: a QP sends its own SENDs and answers the peer's READs, whose requests are interleaved
    /// with SENDs and WRITEs that take PSNs of the peer's space without a READ response.
    #[test]
    fn requests_and_responses_of_one_flow_keep_their_own_sequences() {
        let mut f = FlowPsn::default();
        for i in 0..10u32 {
            assert_eq!(f.observe(PSN_MOD - 3 + i, SEND), PsnEvent::InOrder);
            assert_eq!(
                f.observe(15782 + 4 * i, response(true, true)),
                PsnEvent::InOrder
            );
        }
        // A three-packet answer, then an atomic ACK further on.
        for (p, b, e) in [
            (20000, true, false),
            (20001, false, false),
            (20002, false, true),
        ] {
            assert_eq!(f.observe(p, response(b, e)), PsnEvent::InOrder);
        }
        assert_eq!(f.observe(20010, response(true, true)), PsnEvent::InOrder);
        assert_eq!(f.unseen(), 0);
        // Each sequence still sees its own loss: one SEND, and the middle of an answer.
        assert_eq!(f.observe(8, SEND), PsnEvent::Gap(1));
        assert_eq!(f.observe(30000, response(true, false)), PsnEvent::InOrder);
        assert_eq!(f.observe(30003, response(false, true)), PsnEvent::Gap(2));
        assert_eq!(f.unseen(), 3);
        // The requester reads the lost part again: its answer fills the holes.
        assert_eq!(
            f.observe(30001, response(true, false)),
            PsnEvent::OutOfOrder
        );
        assert_eq!(
            f.observe(30002, response(false, false)),
            PsnEvent::OutOfOrder
        );
        assert_eq!(
            f.observe(30003, response(false, true)),
            PsnEvent::Retransmission
        );
        assert_eq!(f.unseen(), 1);
    }

    #[test]
    fn an_answer_that_lost_its_start_or_end_counts_one_psn() {
        let mut t = PsnTracker::default();
        assert_eq!(t.observe_response(100, true, false), PsnEvent::InOrder);
        assert_eq!(t.observe_response(101, false, false), PsnEvent::InOrder);
        // The answer's end never came: a new answer begins.
        assert_eq!(t.observe_response(110, true, true), PsnEvent::Gap(1));
        // The next answer's start never came: its last packet shows up alone.
        assert_eq!(t.observe_response(120, false, true), PsnEvent::Gap(1));
        assert_eq!(t.unseen(), 2);
        // The holes sit where the lost packets were: right after 101, right before 120.
        assert_eq!(t.observe_response(102, false, true), PsnEvent::OutOfOrder);
        assert_eq!(t.observe_response(119, true, false), PsnEvent::OutOfOrder);
        assert_eq!(t.unseen(), 0);
        // A capture that starts inside an answer is not a loss.
        let mut t = PsnTracker::default();
        assert_eq!(t.observe_response(7, false, false), PsnEvent::InOrder);
        assert_eq!(t.observe_response(8, false, true), PsnEvent::InOrder);
        assert_eq!(t.unseen(), 0);
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
