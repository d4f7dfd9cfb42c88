//! The data sender: hands a flow's next packet to its NIC when the window, the READ requests and the pacer
//! allow; the pacer spaces packets by the reaction point's current rate.

use std::io::Write;

use roce_wire::Opcode;

use super::*;
use crate::sim::scenario::Op;

impl<W: Write> World<'_, W> {
    /// Hands the flow's next data packet to its NIC when the window, the request limit and the pacer allow.
    pub(super) fn try_send(&mut self, f: usize) {
        let now = self.now;
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
        let posted_every = spec.post_interval_ps;
        let start = spec.start_ns * PS_PER_NS;
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let receiver = fl.data_receiver();
        fl.rp_advance(now);
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
        // An application-limited sender: a message cannot go before the application posted it.
        let mut ready = now;
        if posted_every > 0 && new_data {
            ready = start + (tx.next / n) * posted_every;
        }
        // Pacing: the gap after the previous packet is its wire size at the current rate.
        let rc = tx.rp.rate_mbps().max(1e-3);
        let gap = (tx.last_bits as f64 * 1e6 / rc) as u64 + tx.jitter;
        tx.pacer_at = tx.last_tx + gap;
        if now < tx.pacer_at.max(ready) {
            // Rc may rise before the gap ends (the increase timer; byte events need a packet sent), so look again
            // then.
            let mut wake = tx.pacer_at.max(ready);
            if let Some(t) = tx.rp.next_increase_ps()
                && t > now
            {
                wake = wake.min(t);
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
