//! Ports: a node's end of a full-duplex link. A port serializes one frame at a time, MAC control first, then
//! its highest priority that PFC does not hold; a frame reaches the other end one propagation delay after its
//! last bit left.

use std::collections::VecDeque;
use std::io::Write;

use super::*;

#[derive(Debug, Default)]
pub(super) struct Port {
    pub(super) node: usize,
    pub(super) peer: usize,
    pub(super) gbps: u32,
    pub(super) delay_ps: u64,
    pub(super) queues: [VecDeque<Packet>; 8],
    pub(super) qbytes: [u64; 8],
    pub(super) ctrl: VecDeque<Packet>,
    pub(super) busy: bool,
    pub(super) in_flight: Option<Packet>,
    pub(super) paused_until: [u64; 8],
    pub(super) pause_open: [Option<u64>; 8],
    pub(super) wake_at: u64,
    /// Switch only: bytes that entered on this port and still sit in the buffer, per priority.
    pub(super) ing_bytes: [u64; 8],
    pub(super) xoff_sent: [bool; 8],
    pub(super) xoff_count: [u64; 8],
    pub(super) xon_count: [u64; 8],
    pub(super) tap: Option<u32>,
    pub(super) series: [Option<usize>; 8],
    pub(super) last_sample: [u64; 8],
}

impl Port {
    fn ser_ps(&self, len: u32) -> u64 {
        (u64::from(len) + WIRE_OVERHEAD) * 8_000 / u64::from(self.gbps.max(1))
    }
}

impl<W: Write> World<'_, W> {
    pub(super) fn try_tx(&mut self, port: usize) {
        if self.ports[port].busy {
            return;
        }
        let now = self.now;
        let mut pkt = if let Some(p) = self.ports[port].ctrl.pop_front() {
            p
        } else {
            let pt = &mut self.ports[port];
            let mut found = None;
            let mut wake = NEVER;
            for prio in (0..8).rev() {
                if pt.queues[prio].is_empty() {
                    continue;
                }
                if pt.paused_until[prio] > now {
                    wake = wake.min(pt.paused_until[prio]);
                    continue;
                }
                found = Some(prio);
                break;
            }
            let Some(prio) = found else {
                if wake != NEVER && pt.wake_at != wake {
                    pt.wake_at = wake;
                    self.at(wake, Ev::PortWake { port });
                }
                return;
            };
            let Some(p) = pt.queues[prio].pop_front() else {
                return;
            };
            pt.qbytes[prio] -= u64::from(p.len);
            p
        };
        let node = self.ports[port].node;
        if self.is_switch(node) && pkt.kind != PacketKind::Pfc {
            self.release_buffer(node, &pkt);
            self.trail_dequeue(&pkt);
            if !self.switch_spec(node).mark_at.at_enqueue() {
                // The depth the packet leaves behind.
                let depth = self.ports[port].qbytes[usize::from(pkt.prio & 7)];
                self.mark(node, depth, &mut pkt);
            }
        }
        self.log(LogKind::TxStart, port, node, &pkt);
        self.totals.frames_transmitted += 1;
        let pt = &mut self.ports[port];
        pt.busy = true;
        let ser = pt.ser_ps(pkt.len);
        pt.in_flight = Some(pkt);
        self.at(now + ser, Ev::TxDone { port });
        if !self.is_switch(node) && pkt.kind == PacketKind::Data {
            let f = pkt.flow as usize;
            if let Some(fl) = self.flows.get_mut(f)
                && fl.tx.host == node
            {
                fl.rp_sent(now, u64::from(pkt.len) + WIRE_OVERHEAD);
                fl.tx.in_nic = false;
                self.try_send(f);
            }
        }
    }

    pub(super) fn tx_done(&mut self, port: usize) {
        let pt = &mut self.ports[port];
        pt.busy = false;
        let Some(pkt) = pt.in_flight.take() else {
            return;
        };
        let peer = pt.peer;
        let delay = pt.delay_ps;
        if let Some(tap) = pt.tap {
            self.capture(tap as usize, &pkt);
        }
        self.at(self.now + delay, Ev::Arrive { port: peer, pkt });
        self.try_tx(port);
    }

    pub(super) fn enqueue_host(&mut self, host: usize, pkt: Packet) {
        let port = self.node_ports[host][0];
        self.log(LogKind::Create, port, host, &pkt);
        self.totals.packets_created += 1;
        let pt = &mut self.ports[port];
        let prio = usize::from(pkt.prio & 7);
        pt.qbytes[prio] += u64::from(pkt.len);
        pt.queues[prio].push_back(pkt);
        self.try_tx(port);
    }
}
