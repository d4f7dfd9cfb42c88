//! A flow's state: the RC queue pair's two ends as the data sender and the data receiver see them.

use super::{PS_PER_NS, PSN_MASK};
use crate::sim::rp::{ReactionPoint, RpEvent, RpEventKind};
use crate::sim::scenario::Op;
use crate::sim::truth::{FlowTruth, GoBack};

/// The data-sending end of a flow: the requester for WRITE/SEND, the responder for READ.
#[derive(Debug)]
pub(super) struct Sender {
    pub(super) host: usize,
    pub(super) rp: ReactionPoint,
    /// The same reaction point fed the same CNPs, its byte counter moved as if the sender were backlogged:
    /// what a replay from a capture assumes, kept for the truth and never used for pacing.
    pub(super) rp_backlogged: ReactionPoint,
    pub(super) rp_on: bool,
    pub(super) next: u64,
    pub(super) max_sent: u64,
    /// Exclusive bound of what may be sent (READ: what has been requested).
    pub(super) limit: u64,
    pub(super) una: u64,
    pub(super) in_nic: bool,
    /// Earliest instant the pacer lets the next packet go.
    pub(super) pacer_at: u64,
    pub(super) last_tx: u64,
    pub(super) last_bits: u64,
    pub(super) wake_at: u64,
    /// Random extra gap drawn after the last packet, ps.
    pub(super) jitter: u64,
}

/// The data-receiving end: expected PSN, NAK state, ACK coalescing, CNP pacing.
#[derive(Debug, Default)]
pub(super) struct Receiver {
    pub(super) epsn: u64,
    pub(super) nak_pending: bool,
    /// PSN of the last out-of-sequence packet: one at or below it means the sender went back and lost again.
    pub(super) oos_last: u64,
    pub(super) since_ack: u32,
    pub(super) last_cnp: Option<u64>,
    /// READ requester: next message to request and requests not yet completed.
    pub(super) next_msg: u64,
    pub(super) reads_out: u32,
}

#[derive(Debug)]
pub(super) struct Flow {
    pub(super) op: Op,
    pub(super) src: usize,
    pub(super) dst: usize,
    pub(super) pkts_per_msg: u64,
    pub(super) requester_qp: u32,
    pub(super) responder_qp: u32,
    pub(super) start_psn: u32,
    pub(super) sport: u16,
    pub(super) va: u64,
    pub(super) rkey: u32,
    pub(super) tx: Sender,
    pub(super) rx: Receiver,
    /// The transport timer: the WRITE/SEND requester's, or the READ requester's.
    pub(super) timer: Timer,
    pub(super) truth: FlowTruth,
}

/// A restartable timer with at most one event in the heap: restarting only moves the deadline, and an event that
/// fires early re-schedules itself. Without this every ACK would leave a stale event behind for a whole timeout.
#[derive(Debug)]
pub(super) struct Timer {
    pub(super) deadline: u64,
    pub(super) pending: u64,
}

impl Flow {
    pub(super) fn data_receiver(&self) -> usize {
        if self.op == Op::Read {
            self.src
        } else {
            self.dst
        }
    }
    pub(super) fn psn(&self, seq: u64) -> u32 {
        ((u64::from(self.start_psn) + seq) & PSN_MASK) as u32
    }
    /// Runs the sender's reaction-point timers up to `now_ps`, into the truth.
    pub(super) fn rp_advance(&mut self, now_ps: u64) {
        let truth = &mut self.truth;
        self.tx.rp.advance(now_ps, &mut |e| record_rp(truth, e));
    }
    /// Runs both reaction points to the end of the run.
    pub(super) fn rp_finish(&mut self, end_ps: u64) {
        self.rp_advance(end_ps);
        let shadow = &mut self.truth.rp_backlogged;
        self.tx
            .rp_backlogged
            .advance(end_ps, &mut |e| shadow.push(e));
    }
    /// A CNP reached the sender's reaction point (and its backlogged shadow).
    pub(super) fn rp_cnp(&mut self, now_ps: u64) {
        let truth = &mut self.truth;
        self.tx.rp.on_cnp(now_ps, &mut |e| record_rp(truth, e));
        let shadow = &mut self.truth.rp_backlogged;
        self.tx
            .rp_backlogged
            .on_cnp(now_ps, &mut |e| shadow.push(e));
    }
    /// The sender's NIC started a data frame of `wire_bytes`: its byte counter moves.
    pub(super) fn rp_sent(&mut self, now_ps: u64, wire_bytes: u64) {
        let truth = &mut self.truth;
        self.tx
            .rp
            .on_sent(now_ps, wire_bytes, &mut |e| record_rp(truth, e));
    }
    /// Records in the truth that the flow rewound to `seq` at `now_ps`, and why.
    pub(super) fn went_back(&mut self, now_ps: u64, seq: u64, cause: &'static str) {
        let from_psn = self.psn(seq);
        self.truth.go_back_n.push(GoBack {
            t_ns: now_ps / PS_PER_NS,
            from_psn,
            cause,
        });
    }
}

fn record_rp(truth: &mut FlowTruth, e: RpEvent) {
    if e.kind == RpEventKind::Cut {
        truth.cuts += 1;
    }
    truth.rp.push(e);
}
