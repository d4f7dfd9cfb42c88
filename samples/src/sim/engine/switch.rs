//! Switches: forwarding by the routes, admission to the shared buffer and the per-priority egress queues
//! (tail drop on lossy priorities, XOFF on lossless ones), ECN marking as the congestion point, and the queue
//! samples of the truth.

use std::io::Write;

use super::pfc::XOFF_QUANTA;
use super::*;
use crate::sim::scenario::SwitchSpec;

impl<W: Write> World<'_, W> {
    pub(super) fn arrive(&mut self, port: usize, mut pkt: Packet) {
        let node = self.ports[port].node;
        self.log(LogKind::Arrive, port, node, &pkt);
        if pkt.kind == PacketKind::Pfc {
            self.log(LogKind::Consume, port, node, &pkt);
            self.on_pfc(port, &pkt);
            return;
        }
        if !self.is_switch(node) {
            self.log(LogKind::Consume, port, node, &pkt);
            self.trail_end(&pkt);
            self.totals.packets_delivered += 1;
            self.host_receive(node, pkt);
            return;
        }
        let s = node - self.sc.hosts.len();
        let egress = self.routes[s]
            .get(usize::from(pkt.dst))
            .copied()
            .unwrap_or(usize::MAX);
        if egress == usize::MAX {
            self.drop_packet(port, egress, &pkt, "no_route");
            return;
        }
        let sw = &self.sc.switches[s];
        let prio = usize::from(pkt.prio & 7);
        let len = u64::from(pkt.len);
        let lossless = sw.pfc_mask & (1 << prio) != 0;
        if self.buffer_used[s] + len > sw.buffer_bytes {
            self.drop_packet(port, egress, &pkt, "buffer_full");
            return;
        }
        if !lossless && self.ports[egress].qbytes[prio] + len > sw.queue_limit_bytes {
            self.drop_packet(port, egress, &pkt, "tail_drop");
            return;
        }
        pkt.ingress = port as u16;
        self.buffer_used[s] += len;
        self.buffer_peak[s] = self.buffer_peak[s].max(self.buffer_used[s]);
        let xoff = sw.xoff_bytes;
        let pi = &mut self.ports[port];
        pi.ing_bytes[prio] += len;
        let over = lossless && pi.ing_bytes[prio] > xoff && !pi.xoff_sent[prio];
        let ahead = self.ports[egress].qbytes[prio];
        self.trail_enqueue(node, &pkt, ahead);
        if self.sc.switches[s].mark_at.at_enqueue() {
            self.mark(node, ahead, &mut pkt);
        }
        let pe = &mut self.ports[egress];
        pe.qbytes[prio] += len;
        pe.queues[prio].push_back(pkt);
        self.log(LogKind::Enqueue, egress, node, &pkt);
        if let Some(e) = self.internals.log.last_mut() {
            e.buffer_bytes = self.buffer_used[s];
        }
        if over {
            self.ports[port].xoff_sent[prio] = true;
            self.send_pfc(port, prio as u8, XOFF_QUANTA);
        }
        self.try_tx(egress);
    }

    /// The spec of switch `node`.
    pub(super) fn switch_spec(&self, node: usize) -> &SwitchSpec {
        &self.sc.switches[node - self.sc.hosts.len()]
    }

    /// CP: marks CE on an ECN-capable packet with the curve's probability at queue depth `q`, the depth ahead of
    /// it when it arrived or the depth it leaves behind (`mark_at`; marking at dequeue keeps the queueing delay
    /// out of the feedback loop, as the DCQCN paper recommends).
    pub(super) fn mark(&mut self, node: usize, q: u64, pkt: &mut Packet) {
        let sw = &self.sc.switches[node - self.sc.hosts.len()];
        if !sw.ecn || !(pkt.ecn == 1 || pkt.ecn == 2) {
            return;
        }
        self.trail_compared(pkt.id, q);
        let p = if q <= sw.kmin_bytes {
            0.0
        } else if q >= sw.kmax_bytes {
            1.0
        } else {
            sw.pmax * (q - sw.kmin_bytes) as f64 / (sw.kmax_bytes - sw.kmin_bytes) as f64
        };
        if p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p {
            pkt.ecn = 3;
            self.totals.ce_marked += 1;
        }
    }

    pub(super) fn release_buffer(&mut self, node: usize, pkt: &Packet) {
        let s = node - self.sc.hosts.len();
        let len = u64::from(pkt.len);
        self.buffer_used[s] -= len;
        let prio = usize::from(pkt.prio & 7);
        let ing = usize::from(pkt.ingress);
        let xon = self.sc.switches[s].xon_bytes;
        let pi = &mut self.ports[ing];
        pi.ing_bytes[prio] -= len;
        if pi.xoff_sent[prio] && pi.ing_bytes[prio] <= xon {
            pi.xoff_sent[prio] = false;
            self.send_pfc(ing, prio as u8, 0);
        }
    }

    pub(super) fn drop_packet(
        &mut self,
        ingress: usize,
        egress: usize,
        pkt: &Packet,
        reason: &'static str,
    ) {
        let node = self.ports[ingress].node;
        self.log(LogKind::Drop, ingress, node, pkt);
        self.trail_end(pkt);
        self.totals.packets_dropped += 1;
        let (flow, psn) = match self.flows.get(pkt.flow as usize) {
            Some(f) => (f.truth.name.clone(), f.psn(pkt.seq)),
            None => (String::new(), 0),
        };
        let port = self
            .ports
            .get(egress)
            .map_or_else(|| "?".into(), |p| self.node_name(self.ports[p.peer].node));
        self.drops.push(DropTruth {
            t_ns: self.now / PS_PER_NS,
            switch: self.node_name(node),
            port,
            prio: pkt.prio,
            flow,
            kind: pkt.kind.name(),
            psn,
            reason,
        });
    }

    pub(super) fn sample(&mut self) {
        let t_ns = self.now / PS_PER_NS;
        let nh = self.sc.hosts.len();
        for p in 0..self.ports.len() {
            if self.ports[p].node < nh {
                continue;
            }
            for prio in 0..8 {
                let pt = &self.ports[p];
                let q = pt.qbytes[prio];
                if q == 0 && pt.last_sample[prio] == 0 {
                    continue;
                }
                let idx = match pt.series[prio] {
                    Some(i) => i,
                    None => {
                        let i = self.queues.len();
                        self.queues.push(QueueTruth {
                            switch: self.node_name(pt.node),
                            port: self.node_name(self.ports[pt.peer].node),
                            prio: prio as u8,
                            max_bytes: 0,
                            samples: Vec::new(),
                        });
                        self.ports[p].series[prio] = Some(i);
                        i
                    }
                };
                let series = &mut self.queues[idx];
                series.samples.push([t_ns, q]);
                series.max_bytes = series.max_bytes.max(q);
                self.ports[p].last_sample[prio] = q;
            }
        }
        self.at(self.now + self.sc.queue_sample_ns * PS_PER_NS, Ev::Sample);
    }
}
