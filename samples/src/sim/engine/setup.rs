//! Building the world from a scenario: ports per link, shortest-path routes, flows with their random QP
//! numbers and PSNs, and the capture's interfaces.

use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;

use roce_capture::LinkType;
use roce_capture::write::{PcapngWriter, SectionInfo};

use super::flow::{Receiver, Sender, Timer};
use super::*;
use crate::sim::rp::{ByteSource, ReactionPoint};
use crate::sim::scenario::Op;

impl<'s, W: Write> World<'s, W> {
    pub(in crate::sim) fn new(
        sc: &'s Scenario,
        captures: Vec<W>,
        keep_log: bool,
    ) -> Result<Self, SimError> {
        let nodes = sc.hosts.len() + sc.switches.len();
        if nodes > 250 || sc.flows.len() > 60_000 {
            return Err(SimError::TooBig);
        }
        let mut rng = Rng::new(sc.seed ^ 0x005e_ed0f_5105);
        let mut ports = Vec::new();
        let mut node_ports = vec![Vec::new(); nodes];
        let mut link_ports = Vec::new();
        for l in &sc.links {
            let pa = ports.len();
            let pb = pa + 1;
            for (node, peer) in [(l.a, pb), (l.b, pa)] {
                node_ports[node].push(ports.len());
                ports.push(Port {
                    node,
                    peer,
                    gbps: l.gbps,
                    delay_ps: l.delay_ns * PS_PER_NS,
                    wake_at: NEVER,
                    ..Port::default()
                });
            }
            link_ports.push((pa, pb));
        }
        // Shortest paths by breadth-first search from every host; ties go to the lower port index, so routes are
        // stable.
        let nh = sc.hosts.len();
        let mut routes = vec![vec![usize::MAX; nh]; sc.switches.len()];
        for h in 0..nh {
            let mut dist = vec![usize::MAX; nodes];
            dist[h] = 0;
            let mut q = VecDeque::from([h]);
            while let Some(n) = q.pop_front() {
                for &p in &node_ports[n] {
                    let m = ports[ports[p].peer].node;
                    if dist[m] == usize::MAX {
                        dist[m] = dist[n] + 1;
                        // m reaches h through its port facing n.
                        if m >= nh {
                            routes[m - nh][h] = ports[p].peer;
                        }
                        if m >= nh {
                            q.push_back(m);
                        }
                    }
                }
            }
        }
        let mut flows = Vec::new();
        for (i, f) in sc.flows.iter().enumerate() {
            let pkts_per_msg = u64::from(f.message_bytes.div_ceil(f.mtu));
            let data_sender = if f.op == Op::Read { f.dst } else { f.src };
            let line_mbps = f64::from(ports[node_ports[data_sender][0]].gbps) * 1_000.0;
            let rp = ReactionPoint::new(&sc.knobs, line_mbps, ByteSource::Sent);
            let rp_backlogged = ReactionPoint::new(&sc.knobs, line_mbps, ByteSource::Backlogged);
            let requester_qp = 0x100 + (rng.below(0xff00) as u32) * 4 + (i as u32 & 3);
            let responder_qp = 0x100 + (rng.below(0xff00) as u32) * 4 + (i as u32 & 3);
            let start_psn = rng.below(1 << 24) as u32;
            let sport = 0xc000 | rng.below(0x3fff) as u16;
            let rkey = rng.next_u64() as u32;
            let va = 0x7f00_0000_0000 + (rng.below(1 << 20) << 12);
            let limit = match f.op {
                Op::Read => 0,
                _ if f.messages == 0 => NEVER,
                _ => f.messages.saturating_mul(pkts_per_msg),
            };
            flows.push(Flow {
                op: f.op,
                src: f.src,
                dst: f.dst,
                pkts_per_msg,
                requester_qp,
                responder_qp,
                start_psn,
                sport,
                va,
                rkey,
                tx: Sender {
                    host: data_sender,
                    rp,
                    rp_backlogged,
                    rp_on: sc.hosts[data_sender].rp,
                    next: 0,
                    max_sent: 0,
                    limit,
                    una: 0,
                    in_nic: false,
                    pacer_at: f.start_ns * PS_PER_NS,
                    last_tx: 0,
                    last_bits: 0,
                    wake_at: NEVER,
                    jitter: 0,
                },
                rx: Receiver::default(),
                timer: Timer {
                    deadline: NEVER,
                    pending: NEVER,
                },
                truth: FlowTruth {
                    name: f.name.clone(),
                    op: f.op.name(),
                    src: sc.hosts[f.src].name.clone(),
                    dst: sc.hosts[f.dst].name.clone(),
                    src_ip: fmt_ip(host_ip(f.src)),
                    dst_ip: fmt_ip(host_ip(f.dst)),
                    requester_qp,
                    responder_qp,
                    start_psn,
                    mtu: f.mtu,
                    prio: f.prio,
                    dscp: f.dscp,
                    data_sender: if f.op == Op::Read {
                        "responder"
                    } else {
                        "requester"
                    },
                    data_packets_sent: 0,
                    data_payload_bytes_sent: 0,
                    retransmitted_packets: 0,
                    go_back_n: Vec::new(),
                    messages_completed: 0,
                    naks_sent: 0,
                    acks_sent: 0,
                    ce_received: 0,
                    cnps_sent: 0,
                    cnps_received: 0,
                    cnps_ignored: 0,
                    rp_enabled: sc.hosts[data_sender].rp,
                    line_mbps,
                    rp: Vec::new(),
                    rp_backlogged: Vec::new(),
                    cuts: 0,
                },
            });
        }
        // Taps see frames whether or not a capture is written, so counts agree between the two.
        for (id, t) in sc.taps.iter().enumerate() {
            let (pa, pb) = link_ports[t.link];
            ports[pa].tap = Some(id as u32);
            ports[pb].tap = Some(id as u32);
        }
        let snaplen = sc.snaplen.unwrap_or(0);
        let mut tap_iface = Vec::new();
        for (i, t) in sc.taps.iter().enumerate() {
            let iface = sc.taps[..i].iter().filter(|x| x.file == t.file).count();
            tap_iface.push((t.file, iface as u32));
        }
        let mut caps = Vec::new();
        for (file, out) in captures.into_iter().enumerate() {
            let mut w = PcapngWriter::new(
                out,
                &SectionInfo {
                    user_application: Some("roce-sim (rocetrace)".into()),
                    comment: Some(format!("scenario {} seed {}", sc.name, sc.seed)),
                    ..SectionInfo::default()
                },
            )?;
            for t in sc.taps.iter().filter(|t| t.file == file) {
                let l = &sc.links[t.link];
                let desc = format!(
                    "mirror of the link {} <-> {}",
                    sc.node_name(l.a),
                    sc.node_name(l.b)
                );
                // The tapped link's speed, as dumpcap records a NIC's: the analyzer's line rate for this tap.
                let speed_bps = u64::from(l.gbps) * 1_000_000_000;
                w.add_interface_with_speed(
                    LinkType::ETHERNET,
                    snaplen,
                    Some(&t.name),
                    Some(&desc),
                    Some(speed_bps),
                )?;
            }
            // Where the tracer puts it: after the interfaces, before the first packet.
            if let Some(record) = knobs::knob_record(sc, file) {
                let data =
                    roce_capture::blocks::encode_record(&record).map_err(std::io::Error::from)?;
                w.write_custom(roce_capture::blocks::PEN, &data, true)?;
            }
            caps.push(w);
        }
        let mut w = World {
            sc,
            now: 0,
            end: sc.duration_ns * PS_PER_NS,
            heap: BinaryHeap::new(),
            seq: 0,
            rng,
            ports,
            node_ports,
            routes,
            buffer_used: vec![0; sc.switches.len()],
            buffer_peak: vec![0; sc.switches.len()],
            flows,
            ident: vec![0; nh],
            next_id: 0,
            keep_log,
            internals: RunInternals::default(),
            queues: Vec::new(),
            pauses: Vec::new(),
            drops: Vec::new(),
            totals: Totals::default(),
            caps,
            tap_iface,
            tap_frames: vec![0; sc.taps.len()],
            tap_alone: vec![0; sc.taps.len()],
            hops: Vec::new(),
            trails: std::collections::HashMap::new(),
            snaplen,
            frame_buf: vec![0; 9_216],
            io_error: None,
        };
        for (i, f) in sc.flows.iter().enumerate() {
            w.at(f.start_ns * PS_PER_NS, Ev::FlowWake { flow: i });
        }
        for (h, spec) in sc.hosts.iter().enumerate() {
            if let Some(s) = spec.storm {
                w.at(s.start_ns * PS_PER_NS, Ev::Storm { host: h });
            }
        }
        if !sc.switches.is_empty() {
            w.at(0, Ev::Sample);
        }
        Ok(w)
    }
}
