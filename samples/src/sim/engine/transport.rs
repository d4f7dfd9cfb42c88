//! The RC transport of the NICs: packets made at a host, what a host does with each packet it receives (ACK
//! coalescing, NAK on a PSN gap, go-back-N, the transport timer, READ requests and responses), and the
//! notification point that answers CE with CNPs.

use std::io::Write;

use roce_wire::Opcode;
use roce_wire::ext::{AethKind, NakCode};

use super::*;
use crate::sim::scenario::Op;

impl<W: Write> World<'_, W> {
    /// Makes a RoCE packet and fills in its length from the frame it will become.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make(
        &mut self,
        kind: PacketKind,
        flow: usize,
        from: usize,
        to: usize,
        seq: u64,
        opcode: Opcode,
        payload: u32,
        prio: u8,
        ecn: u8,
    ) -> Packet {
        let ident = self.ident[from];
        self.ident[from] = ident.wrapping_add(1);
        let mut p = Packet {
            id: self.new_id(),
            kind,
            flow: flow as u32,
            seq,
            payload,
            len: 0,
            prio,
            ecn,
            opcode: opcode.0,
            msn: 0,
            ident,
            src: from as u16,
            dst: to as u16,
            ingress: 0,
            pfc_mask: 0,
            pfc_quanta: 0,
            syndrome: 0,
        };
        p.len = self.roce_frame(&p).map_or(60, |f| f.len() as u32);
        p
    }

    pub(super) fn host_receive(&mut self, host: usize, pkt: Packet) {
        let f = pkt.flow as usize;
        if f >= self.flows.len() {
            return;
        }
        match pkt.kind {
            PacketKind::Data => {
                if pkt.ecn == 3 {
                    self.flows[f].truth.ce_received += 1;
                    self.maybe_cnp(host, f);
                }
                if self.flows[f].op == Op::Read {
                    self.read_response(f, &pkt);
                } else {
                    self.write_data(f, &pkt);
                }
            }
            PacketKind::ReadReq => {
                let n = self.flows[f].pkts_per_msg;
                let tx = &mut self.flows[f].tx;
                let end = (pkt.seq / n + 1) * n;
                tx.limit = if tx.limit == NEVER {
                    end
                } else {
                    tx.limit.max(end)
                };
                if pkt.seq < tx.next {
                    tx.next = pkt.seq;
                }
                self.try_send(f);
            }
            PacketKind::Ack | PacketKind::Nak => self.on_ack(f, &pkt),
            PacketKind::Cnp => {
                let fl = &mut self.flows[f];
                fl.truth.cnps_received += 1;
                if fl.tx.rp_on {
                    fl.rp_cnp(self.now);
                    self.try_send(f);
                } else {
                    fl.truth.cnps_ignored += 1;
                }
            }
            PacketKind::Pfc => {}
        }
    }

    /// NP: one CNP per flow per `min_time_between_cnps`, on the host's CNP priority and DSCP, not ECN-capable.
    pub(super) fn maybe_cnp(&mut self, host: usize, f: usize) {
        let spec = &self.sc.hosts[host];
        if !spec.np {
            return;
        }
        let gap = spec.min_time_between_cnps_ns * PS_PER_NS;
        let prio = spec.cnp_prio;
        let rx = &mut self.flows[f].rx;
        if let Some(last) = rx.last_cnp
            && self.now < last + gap
        {
            return;
        }
        rx.last_cnp = Some(self.now);
        self.flows[f].truth.cnps_sent += 1;
        let to = self.flows[f].tx.host;
        let p = self.make(PacketKind::Cnp, f, host, to, 0, Opcode::CNP, 16, prio, 0);
        self.enqueue_host(host, p);
    }

    pub(super) fn write_data(&mut self, f: usize, pkt: &Packet) {
        let spec = &self.sc.flows[f];
        let ack_every = spec.ack_every;
        let prio = spec.prio;
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let rx = &mut fl.rx;
        let last_of_msg = (pkt.seq + 1).is_multiple_of(n);
        let reply = if pkt.seq == rx.epsn {
            rx.epsn += 1;
            rx.nak_pending = false;
            rx.since_ack += 1;
            if last_of_msg {
                fl.truth.messages_completed = rx.epsn / n;
            }
            if last_of_msg || rx.since_ack >= ack_every {
                rx.since_ack = 0;
                Some((PacketKind::Ack, pkt.seq))
            } else {
                None
            }
        } else if pkt.seq > rx.epsn {
            // One NAK per gap; a new one only when the sender has visibly gone back since and lost again.
            let again = pkt.seq <= rx.oos_last;
            rx.oos_last = pkt.seq;
            if rx.nak_pending && !again {
                None
            } else {
                rx.nak_pending = true;
                Some((PacketKind::Nak, rx.epsn))
            }
        } else if last_of_msg {
            Some((PacketKind::Ack, rx.epsn - 1))
        } else {
            None
        };
        let Some((kind, seq)) = reply else {
            return;
        };
        let msn = (rx.epsn / n) as u32;
        let (from, to) = (fl.dst, fl.src);
        let syndrome = if kind == PacketKind::Nak {
            fl.truth.naks_sent += 1;
            AethKind::Nak(NakCode::PsnSequenceError).syndrome()
        } else {
            fl.truth.acks_sent += 1;
            AethKind::Ack { credits: 31 }.syndrome()
        };
        let mut p = self.make(kind, f, from, to, seq, Opcode::RC_ACKNOWLEDGE, 0, prio, 2);
        p.msn = msn;
        p.syndrome = syndrome;
        self.enqueue_host(from, p);
    }

    pub(super) fn on_ack(&mut self, f: usize, pkt: &Packet) {
        let now = self.now;
        let fl = &mut self.flows[f];
        let tx = &mut fl.tx;
        let progressed;
        if pkt.kind == PacketKind::Ack {
            progressed = pkt.seq + 1 > tx.una;
            if progressed {
                tx.una = pkt.seq + 1;
            }
        } else {
            progressed = pkt.seq > tx.una;
            tx.una = tx.una.max(pkt.seq);
            if tx.next > pkt.seq {
                tx.next = pkt.seq;
                fl.went_back(now, pkt.seq, "nak");
            }
        }
        let tx = &mut fl.tx;
        if tx.next < tx.una {
            tx.next = tx.una;
        }
        fl.truth.messages_completed = tx.una / fl.pkts_per_msg;
        if progressed || pkt.kind == PacketKind::Nak {
            self.arm_rto(f);
        }
        self.try_send(f);
    }

    /// Starts (or restarts) the flow's transport timer when `armed`, else stops it.
    pub(super) fn set_timer(&mut self, f: usize, armed: bool) {
        let timeout = self.sc.flows[f].timeout_ns * PS_PER_NS;
        let now = self.now;
        let t = &mut self.flows[f].timer;
        if !armed {
            t.deadline = NEVER;
            return;
        }
        t.deadline = now + timeout;
        if t.pending == NEVER {
            t.pending = t.deadline;
            let at = t.deadline;
            self.at(at, Ev::Rto { flow: f });
        }
    }

    pub(super) fn arm_rto(&mut self, f: usize) {
        let tx = &self.flows[f].tx;
        let armed = tx.una < tx.max_sent;
        self.set_timer(f, armed);
    }

    pub(super) fn rto(&mut self, f: usize) {
        let now = self.now;
        let t = &mut self.flows[f].timer;
        t.pending = NEVER;
        if t.deadline == NEVER {
            return;
        }
        if now < t.deadline {
            t.pending = t.deadline;
            let at = t.deadline;
            self.at(at, Ev::Rto { flow: f });
            return;
        }
        t.deadline = NEVER;
        if self.flows[f].op == Op::Read {
            let fl = &mut self.flows[f];
            if fl.rx.reads_out == 0 {
                return;
            }
            let from = fl.rx.epsn;
            fl.went_back(now, from, "timeout");
            self.send_read_request(f, from);
            return;
        }
        let fl = &mut self.flows[f];
        let tx = &mut fl.tx;
        if tx.una >= tx.max_sent {
            return;
        }
        tx.next = tx.una;
        let una = tx.una;
        fl.went_back(now, una, "timeout");
        self.arm_rto(f);
        self.try_send(f);
    }

    /// READ requester: asks for messages while fewer than `max_reads` are outstanding.
    pub(super) fn issue_reads(&mut self, f: usize) {
        let spec = &self.sc.flows[f];
        let (max_reads, stop, messages) = (spec.max_reads, spec.stop_ns * PS_PER_NS, spec.messages);
        loop {
            let fl = &self.flows[f];
            if fl.rx.reads_out >= max_reads
                || self.now >= stop
                || (messages > 0 && fl.rx.next_msg >= messages)
            {
                return;
            }
            let seq = fl.rx.next_msg * fl.pkts_per_msg;
            let fl = &mut self.flows[f];
            fl.rx.next_msg += 1;
            fl.rx.reads_out += 1;
            self.send_read_request(f, seq);
        }
    }

    pub(super) fn send_read_request(&mut self, f: usize, seq: u64) {
        let prio = self.sc.flows[f].prio;
        let (from, to) = (self.flows[f].src, self.flows[f].dst);
        let p = self.make(
            PacketKind::ReadReq,
            f,
            from,
            to,
            seq,
            Opcode::RC_RDMA_READ_REQUEST,
            0,
            prio,
            2,
        );
        self.enqueue_host(from, p);
        self.set_timer(f, true);
    }

    pub(super) fn read_response(&mut self, f: usize, pkt: &Packet) {
        let now = self.now;
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let rx = &mut fl.rx;
        if pkt.seq == rx.epsn {
            rx.epsn += 1;
            rx.nak_pending = false;
            if rx.epsn.is_multiple_of(n) {
                rx.reads_out = rx.reads_out.saturating_sub(1);
                fl.truth.messages_completed += 1;
                self.issue_reads(f);
            }
            let armed = self.flows[f].rx.reads_out > 0;
            self.set_timer(f, armed);
        } else if pkt.seq > rx.epsn && !rx.nak_pending {
            rx.nak_pending = true;
            let from = rx.epsn;
            fl.went_back(now, from, "read_gap");
            self.send_read_request(f, from);
        }
    }
}
