//! PFC: pause frames a switch sends when an ingress port holds too much of a lossless priority (and refreshes
//! while it still does), a host's pause storm, and the pauses a port obeys, kept for the truth.

use std::io::Write;

use roce_wire::pfc::quanta_to_ps;

use super::*;

/// XOFF quanta: the longest pause; the sender refreshes it at half time while still congested.
pub(super) const XOFF_QUANTA: u16 = 0xffff;

impl<W: Write> World<'_, W> {
    /// Sends a PFC frame for one priority out of `port`, ahead of any queued data.
    pub(super) fn send_pfc(&mut self, port: usize, prio: u8, quanta: u16) {
        let node = self.ports[port].node;
        let pkt = Packet {
            id: self.new_id(),
            kind: PacketKind::Pfc,
            flow: u32::MAX,
            seq: 0,
            payload: 0,
            len: 60,
            prio,
            ecn: 0,
            opcode: 0,
            msn: 0,
            ident: 0,
            src: port as u16,
            dst: 0,
            ingress: 0,
            pfc_mask: 1 << (prio & 7),
            pfc_quanta: quanta,
            syndrome: 0,
        };
        self.log(LogKind::Create, port, node, &pkt);
        let pt = &mut self.ports[port];
        let p = usize::from(prio & 7);
        if quanta == 0 {
            pt.xon_count[p] += 1;
        } else {
            pt.xoff_count[p] += 1;
            let half = quanta_to_ps(quanta, u64::from(pt.gbps) * 1_000_000_000) / 2;
            if self.is_switch(node) {
                self.at(self.now + half, Ev::PfcRefresh { port, prio });
            }
        }
        self.ports[port].ctrl.push_back(pkt);
        self.try_tx(port);
    }

    pub(super) fn on_pfc(&mut self, port: usize, pkt: &Packet) {
        let now = self.now;
        let pt = &mut self.ports[port];
        let dur = quanta_to_ps(pkt.pfc_quanta, u64::from(pt.gbps) * 1_000_000_000);
        let mut closed = Vec::new();
        for prio in 0..8 {
            if pkt.pfc_mask & (1 << prio) == 0 {
                continue;
            }
            if dur == 0 {
                if let Some(start) = pt.pause_open[prio].take() {
                    closed.push((prio, start));
                }
                pt.paused_until[prio] = now;
            } else {
                if pt.pause_open[prio].is_none() || pt.paused_until[prio] <= now {
                    if let Some(start) = pt.pause_open[prio].take() {
                        closed.push((prio, start));
                    }
                    pt.pause_open[prio] = Some(now);
                }
                pt.paused_until[prio] = now + dur;
            }
        }
        for (prio, start) in closed {
            let stop = self.ports[port].paused_until[prio].min(now);
            self.push_pause(port, prio, start, stop);
        }
        self.try_tx(port);
    }

    pub(super) fn close_expired_pauses(&mut self, port: usize) {
        for prio in 0..8 {
            let pt = &self.ports[port];
            if let Some(start) = pt.pause_open[prio]
                && pt.paused_until[prio] <= self.now
            {
                let stop = pt.paused_until[prio];
                self.ports[port].pause_open[prio] = None;
                self.push_pause(port, prio, start, stop);
            }
        }
    }

    pub(super) fn push_pause(&mut self, port: usize, prio: usize, start: u64, stop: u64) {
        self.internals.pauses.push((port, prio as u8, start, stop));
        let pt = &self.ports[port];
        self.pauses.push(PauseTruth {
            node: self.node_name(pt.node),
            port: self.node_name(self.ports[pt.peer].node),
            prio: prio as u8,
            start_ns: start / PS_PER_NS,
            end_ns: stop.div_ceil(PS_PER_NS),
        });
    }

    pub(super) fn storm(&mut self, host: usize) {
        let Some(s) = self.sc.hosts[host].storm else {
            return;
        };
        let port = self.node_ports[host][0];
        if self.now >= s.end_ns * PS_PER_NS {
            self.send_pfc(port, s.prio, 0);
            return;
        }
        self.send_pfc(port, s.prio, XOFF_QUANTA);
        let half = quanta_to_ps(
            XOFF_QUANTA,
            u64::from(self.ports[port].gbps) * 1_000_000_000,
        ) / 2;
        let next = (self.now + half).min(s.end_ns * PS_PER_NS);
        self.at(next, Ev::Storm { host });
    }
}
