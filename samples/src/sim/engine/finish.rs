//! The end of a run: the reaction points brought to the end time, open pauses closed, what is still inside the
//! network listed, and the truth assembled.

use std::io::Write;

use super::*;

impl<W: Write> World<'_, W> {
    pub(super) fn finish(mut self) -> Result<(Truth, RunInternals), SimError> {
        for f in &mut self.flows {
            f.rp_finish(self.end);
        }
        for p in 0..self.ports.len() {
            for prio in 0..8 {
                if let Some(start) = self.ports[p].pause_open[prio] {
                    let stop = self.ports[p].paused_until[prio].min(self.end);
                    self.push_pause(p, prio, start, stop);
                }
            }
        }
        for p in 0..self.ports.len() {
            let port = &self.ports[p];
            let mut resident: Vec<(u64, u32)> = Vec::new();
            resident.extend(port.in_flight.iter().map(|k| (k.id, k.len)));
            resident.extend(port.ctrl.iter().map(|k| (k.id, k.len)));
            for q in &port.queues {
                resident.extend(q.iter().map(|k| (k.id, k.len)));
            }
            self.internals.in_network.extend(resident);
        }
        // What is still on a wire sits in the heap as an arrival.
        for item in self.heap.iter() {
            if let Ev::Arrive { pkt, .. } = &item.ev {
                self.internals.in_network.push((pkt.id, pkt.len));
            }
        }
        self.internals.in_network.sort_unstable();
        self.internals.port_node = self.ports.iter().map(|p| p.node).collect();
        self.internals.port_peer = self.ports.iter().map(|p| p.peer).collect();
        self.internals.hosts = self.sc.hosts.len();
        for (s, spec) in self.sc.switches.iter().enumerate() {
            self.internals.buffer_peak.push((
                spec.name.clone(),
                spec.buffer_bytes,
                self.buffer_peak[s],
            ));
        }
        for cap in &mut self.caps {
            cap.flush()?;
        }
        let sc = self.sc;
        let taps: Vec<TapTruth> = sc
            .taps
            .iter()
            .enumerate()
            .map(|(i, t)| TapTruth {
                name: t.name.clone(),
                file: sc.file_name(t.file),
                interface: self.tap_iface[i].1,
                a: sc.node_name(sc.links[t.link].a).to_string(),
                b: sc.node_name(sc.links[t.link].b).to_string(),
                frames: self.tap_frames[i],
                alone: self.tap_alone[i],
            })
            .collect();
        let (hops, tap_queues) = self.hops_truth(&taps);
        let files = sc
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| FileTruth {
                name: sc.file_name(i),
                clock_offset_ns: f.clock_offset_ns,
                clock_drift_ppm: f.clock_drift_ppm,
                taps: sc
                    .taps
                    .iter()
                    .filter(|t| t.file == i)
                    .map(|t| t.name.clone())
                    .collect(),
            })
            .collect();
        let mut pfc_frames = Vec::new();
        for p in &self.ports {
            for prio in 0..8 {
                if p.xoff_count[prio] + p.xon_count[prio] > 0 {
                    pfc_frames.push(PfcSent {
                        node: sc.node_name(p.node).to_string(),
                        port: sc.node_name(self.ports[p.peer].node).to_string(),
                        prio: prio as u8,
                        xoff: p.xoff_count[prio],
                        xon: p.xon_count[prio],
                    });
                }
            }
        }
        self.pauses
            .sort_by(|a, b| (a.start_ns, &a.node, &a.port).cmp(&(b.start_ns, &b.node, &b.port)));
        let truth = Truth {
            scenario: sc.name.clone(),
            description: sc.description.clone(),
            findings: sc.expect_findings.clone(),
            seed: sc.seed,
            duration_ns: sc.duration_ns,
            hosts: sc
                .hosts
                .iter()
                .enumerate()
                .map(|(i, h)| HostTruth {
                    name: h.name.clone(),
                    ip: fmt_ip(host_ip(i)),
                    mac: roce_core::decode::mac_to_string(&host_mac(i)),
                    rp: h.rp,
                    np: h.np,
                })
                .collect(),
            links: sc
                .links
                .iter()
                .map(|l| LinkTruth {
                    a: sc.node_name(l.a).to_string(),
                    b: sc.node_name(l.b).to_string(),
                    gbps: l.gbps,
                    delay_ns: l.delay_ns,
                })
                .collect(),
            files,
            taps,
            hops,
            tap_queues,
            flows: self.flows.into_iter().map(|f| f.truth).collect(),
            queues: self.queues,
            pauses: self.pauses,
            pfc_frames,
            drops: self.drops,
            totals: self.totals,
        };
        Ok((truth, self.internals))
    }
}
