//! The data sender: hands a flow's next packet to its NIC when the window, the READ requests and the pacer
//! allow; the pacer spaces packets by the reaction point's current rate.

use std::io::Write;

use roce_core::dcqcn::{Event, EventKind};
use roce_wire::Opcode;

use super::*;
use crate::sim::scenario::Op;

/// How often a paced sender re-reads its reaction point while waiting (an increase takes effect at most this late).
const RP_POLL_PS: u64 = 2_000_000;

impl<W: Write> World<'_, W> {
    /// Hands the flow's next data packet to its NIC when the window, the request limit and the pacer allow.
    pub(super) fn try_send(&mut self, f: usize) {
        let now = self.now;
        let now_ns = now / PS_PER_NS;
        let spec = &self.sc.flows[f];
        if self.flows[f].op == Op::Read && now >= spec.start_ns * PS_PER_NS {
            let fl = &self.flows[f];
            if fl.rx.next_msg == 0 && fl.rx.reads_out == 0 {
                self.issue_reads(f);
            }
        }
        let spec = &self.sc.flows[f];
        let (mtu, msg_bytes, window, stop, prio) = (
            u64::from(spec.mtu),
            u64::from(spec.message_bytes),
            u64::from(spec.window_packets),
            spec.stop_ns * PS_PER_NS,
            spec.prio,
        );
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let receiver = fl.data_receiver();
        {
            let truth = &mut fl.truth;
            let mut push = |e: Event| record_rp(truth, e);
            fl.tx.rp.advance(now_ns, &mut push);
        }
        let tx = &mut fl.tx;
        if tx.in_nic || tx.next >= tx.limit {
            return;
        }
        if fl.op != Op::Read && tx.next - tx.una >= window {
            return;
        }
        let new_data = tx.next >= tx.max_sent;
        // A READ responder serves whatever was asked; only the requester stops asking.
        if fl.op != Op::Read && new_data && tx.next.is_multiple_of(n) && now >= stop {
            return;
        }
        // Pacing: the gap after the previous packet is its wire size at the current rate.
        let rc = tx.rp.rc_mbps().max(1e-3);
        let gap = (tx.last_bits as f64 * 1e6 / rc) as u64 + tx.jitter;
        tx.pacer_at = tx.last_tx + gap;
        if now < tx.pacer_at {
            let mut wake = tx.pacer_at;
            // Rc may rise before the gap ends; look again at the model's next event, but not more often than every
            // RP_POLL_PS, since most of those events are alpha ticks that leave Rc alone.
            if let Some(t) = tx.rp.next_event_ns() {
                wake = wake.min((t * PS_PER_NS).max(now + RP_POLL_PS));
            }
            if tx.wake_at > wake || tx.wake_at <= now {
                tx.wake_at = wake;
                self.at(wake, Ev::FlowWake { flow: f });
            }
            return;
        }
        let seq = tx.next;
        let k = seq % n;
        let payload = if k + 1 == n {
            (msg_bytes - k * mtu) as u32
        } else {
            mtu as u32
        };
        let opcode = match (fl.op, n == 1, k == 0, k + 1 == n) {
            (Op::Write, true, _, _) => Opcode::RC_RDMA_WRITE_ONLY,
            (Op::Write, _, true, _) => Opcode::RC_RDMA_WRITE_FIRST,
            (Op::Write, _, _, true) => Opcode::RC_RDMA_WRITE_LAST,
            (Op::Write, _, _, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
            (Op::Send, true, _, _) => Opcode::RC_SEND_ONLY,
            (Op::Send, _, true, _) => Opcode::RC_SEND_FIRST,
            (Op::Send, _, _, true) => Opcode::RC_SEND_LAST,
            (Op::Send, _, _, _) => Opcode::RC_SEND_MIDDLE,
            (Op::Read, true, _, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (Op::Read, _, true, _) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (Op::Read, _, _, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            (Op::Read, _, _, _) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let (from, to) = (tx.host, receiver);
        tx.next += 1;
        let retx = !new_data;
        tx.max_sent = tx.max_sent.max(tx.next);
        tx.in_nic = true;
        fl.truth.data_packets_sent += 1;
        fl.truth.data_payload_bytes_sent += u64::from(payload);
        if retx {
            fl.truth.retransmitted_packets += 1;
        }
        let mut p = self.make(PacketKind::Data, f, from, to, seq, opcode, payload, prio, 2);
        // Responses carry the MSN of the message they answer.
        p.msn = ((seq / n + 1) & PSN_MASK) as u32;
        let jitter = self.sc.hosts[from].jitter_ns * PS_PER_NS;
        let jitter = if jitter > 0 {
            self.rng.below(jitter + 1)
        } else {
            0
        };
        let tx = &mut self.flows[f].tx;
        tx.jitter = jitter;
        tx.last_tx = now;
        tx.last_bits = (u64::from(p.len) + WIRE_OVERHEAD) * 8;
        let arm = self.flows[f].op != Op::Read && self.flows[f].timer.deadline == NEVER;
        self.enqueue_host(from, p);
        if arm {
            self.arm_rto(f);
        }
    }
}

pub(super) fn record_rp(truth: &mut FlowTruth, e: Event) {
    if e.kind == EventKind::Cut {
        truth.cuts += 1;
    }
    truth.rp.push(RpPoint {
        t_ns: e.t_ns,
        kind: e.kind,
        rc_mbps: e.rc_mbps,
        rt_mbps: e.rt_mbps,
        alpha: e.alpha,
    });
}
