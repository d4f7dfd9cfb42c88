//! A flow's state: the RC queue pair's two ends as the data sender and the data receiver see them.

use roce_core::dcqcn::Rp;

use super::{PS_PER_NS, PSN_MASK};
use crate::sim::scenario::Op;
use crate::sim::truth::{FlowTruth, GoBack};

/// The data-sending end of a flow: the requester for WRITE/SEND, the responder for READ.
#[derive(Debug)]
pub(super) struct Sender {
    pub(super) host: usize,
    pub(super) rp: Rp,
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
