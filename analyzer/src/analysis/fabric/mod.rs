//! The hosts side by side: which node pair is slow, and why.
//!
//! Every other analysis answers per QP, per CNP stream, per priority or per queue; a saturation test's
//! question is per node pair (nccl-tests' "bus bandwidth differs between node pairs": which pair is the slow
//! one, and is it the network?). This module folds the tables the streaming passes already make (the flows,
//! CNP and PFC tables of `stats`, each flow's data packets from the rates pass, which MAC is which host) into
//! a row per host, a row per ordered host pair that carried data, and the pairs that run well below the
//! median pair with the evidence that explains each. It runs after the read, on tables whose size is set by
//! flows, taps and pauses, never by packets.
//!
//! The steps, a file each: [`once`] counts each flow once however many taps saw it, [`pauses`] places each
//! pause on the hosts it stopped, [`slowest`] ranks the pairs and names their reasons. docs/fabric.md defines
//! every field; the Spark job (spark/rocetrace_job.py) computes `hosts` and `pairs` by the same definitions.

mod once;
mod pass;
mod pauses;
mod slowest;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

use roce_core::passes::StatsReport;
use roce_core::passes::pfc::PauseInterval;
use roce_core::passes::rates::FlowSeries;

pub use pass::read;
pub use slowest::{CE_REASON, PAUSE_REASON, Reason, SLOW_BELOW, SlowPair};

/// What the fabric analysis is computed from: the passes' tables after the read.
#[derive(Debug, Clone, Copy)]
pub struct FabricInputs<'a> {
    /// The flows, CNP and PFC tables and the capture's span and taps.
    pub stats: &'a StatsReport,
    /// Every PFC/PAUSE interval behind the PFC table's `paused_ns`.
    pub intervals: &'a [PauseInterval],
    /// (MAC, IP) of every MAC that carried one source IP in its RoCE frames (`HostsPass`).
    pub hosts: &'a [(String, IpAddr)],
    /// Each flow's data packets (those with payload) per tap, from the rates pass.
    pub series: &'a [FlowSeries],
}

/// The answer: hosts, pairs, and the slow pairs with their reasons.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FabricReport {
    /// The capture's span, first frame to last: every rate is bytes over it.
    pub span_ns: u64,
    /// One row per host (an IP address) seen in RoCE frames, by address.
    pub hosts: Vec<HostRow>,
    /// One row per ordered host pair that carried RoCE data, by (src, dst).
    pub pairs: Vec<PairRow>,
    /// The median of the pairs' `gbps` (the mean of the two middle ones for an even count); null without a
    /// pair with a rate.
    pub median_gbps: Option<f64>,
    /// A pair is slow below this share of the median; within it, the pairs run alike.
    pub slow_below: f64,
    /// The slow pairs, slowest first, each with the evidence that explains it.
    pub slowest: Vec<SlowPair>,
    /// The taps taken for a host's own link (every RoCE frame there came from that host or went to it):
    /// where a pause can be tied to the host it stopped.
    pub links: Vec<HostLink>,
    /// Pauses seen at a tap that is no host's link, from a MAC that is no host's: a switch pausing a switch,
    /// which stops whatever crosses that link in one direction, and a capture cannot say which pairs that is.
    pub unplaced_pauses: Vec<UnplacedPause>,
}

/// One host: what it sent and received, and what slowed it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostRow {
    /// The host's address (a NIC port: a server with several RoCE ports is a host per port).
    pub host: IpAddr,
    /// The MAC its RoCE frames came from (several joined by `,`); null when none carried its address alone.
    pub mac: Option<String>,
    /// Data bytes it sent (each packet once), ×8 over the capture's span; null for a span of zero.
    pub tx_gbps: Option<f64>,
    /// Data bytes sent to it, likewise.
    pub rx_gbps: Option<f64>,
    /// CNPs it sent (as a notification point: its received data was CE-marked), each counted once.
    pub cnps_sent: u64,
    /// CNPs sent to it (as a reaction point: they cut its rate), each counted once.
    pub cnps_received: u64,
    /// Distinct pauses its MAC started (PFC or PAUSE); null when its link was not tapped or its MAC is
    /// unknown, as a PFC frame never leaves the link it was sent on.
    pub pauses_sent: Option<u64>,
    /// Time the other end of its link paused the priorities it sends data on; null when its link was not
    /// tapped.
    pub paused_ns: Option<u64>,
    /// Data packets it sent again (retransmissions), each flow counted once.
    pub retransmitted: u64,
}

/// One ordered host pair that carried RoCE data (packets with payload), src sending to dst.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PairRow {
    /// The data's sender.
    pub src: IpAddr,
    /// The data's receiver.
    pub dst: IpAddr,
    /// Data flows (QPs: source, destination, destination QP) from src to dst.
    pub flows: u64,
    /// Data packets, each counted once however many taps saw it.
    pub packets: u64,
    /// Their bytes on the wire (frame lengths).
    pub bytes: u64,
    /// `bytes` ×8 over the capture's span (Gb/s); null for a span of zero.
    pub gbps: Option<f64>,
    /// Of `packets`, those CE-marked on their way, as the tap furthest along saw them.
    pub ce_packets: u64,
    /// `ce_packets` / `packets`.
    pub ce_fraction: f64,
    /// CNPs dst sent to src: each a cut of one of src's rates.
    pub cnps: u64,
    /// PSNs of the pair's requests and read responses never seen at any tap.
    pub psn_gaps: u64,
    /// Packets src sent again.
    pub retransmitted: u64,
    /// The priority of the pair's flows, when they all travel on one; null when they differ.
    pub priority: Option<u8>,
    /// Time PFC stopped the pair at its ends (src paused by its switch, or dst pausing its switch), on its
    /// priorities; null when the capture cannot tell (see docs/fabric.md).
    pub paused_ns: Option<u64>,
}

/// A tap taken for a host's own link.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostLink {
    /// The tap (`FILE:IFACE`).
    pub tap: String,
    /// The host every RoCE frame at the tap came from or went to.
    pub host: IpAddr,
}

/// The pauses of one source and priority at one tap that no host can be tied to.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UnplacedPause {
    /// The tap that saw them.
    pub tap: String,
    /// The pausing port's MAC.
    pub src_mac: String,
    /// The paused priority; null for 802.3x PAUSE (every priority).
    pub priority: Option<u8>,
    /// Distinct pauses.
    pub pauses: u64,
    /// Their time, summed.
    pub paused_ns: u64,
}

/// Computes the fabric view from the passes' tables.
pub fn analyse(inp: FabricInputs<'_>) -> FabricReport {
    let s = inp.stats;
    let span_ns = s.capture.duration_ns;
    let rate = |bytes: u64| (span_ns > 0).then(|| bytes as f64 * 8.0 / span_ns as f64);
    let placed = pauses::Placed::new(s, inp.intervals, inp.hosts);
    // CNPs per (notification point, reaction point): the data they answer went the other way.
    let cnps = once::cnps(&s.cnps);

    let mut pairs: BTreeMap<(IpAddr, IpAddr), PairRow> = BTreeMap::new();
    let mut priorities: BTreeMap<(IpAddr, IpAddr), BTreeSet<Option<u8>>> = BTreeMap::new();
    for f in once::flows(&s.flows, inp.series) {
        let (src, dst) = (f.key.src, f.key.dst);
        let p = pairs.entry((src, dst)).or_insert_with(|| PairRow {
            src,
            dst,
            flows: 0,
            packets: 0,
            bytes: 0,
            gbps: None,
            ce_packets: 0,
            ce_fraction: 0.0,
            cnps: cnps.get(&(dst, src)).copied().unwrap_or(0),
            psn_gaps: 0,
            retransmitted: 0,
            priority: None,
            paused_ns: None,
        });
        p.flows += 1;
        p.packets += f.packets;
        p.bytes += f.bytes;
        p.ce_packets += f.ce_packets;
        p.psn_gaps += f.psn_gaps;
        p.retransmitted += f.retransmitted;
        priorities
            .entry((src, dst))
            .or_default()
            .extend(f.priorities);
    }
    for (key, p) in &mut pairs {
        let prios = &priorities[key];
        p.gbps = rate(p.bytes);
        p.ce_fraction = p.ce_packets as f64 / p.packets.max(1) as f64;
        p.priority = match prios.iter().collect::<Vec<_>>()[..] {
            [only] => *only,
            _ => None,
        };
        p.paused_ns = placed.pair_paused_ns(p.src, p.dst, prios);
    }

    // Every address of a RoCE frame is a host, whether it sent data or only acknowledged it.
    let mut hosts: BTreeMap<IpAddr, Host> = BTreeMap::new();
    for a in s.flows.iter().flat_map(|f| [f.src, f.dst]) {
        hosts.entry(a).or_default();
    }
    for (&(np, rp), &n) in &cnps {
        hosts.entry(np).or_default().cnps_sent += n;
        hosts.entry(rp).or_default().cnps_received += n;
    }
    for ((src, dst), p) in &pairs {
        let h = hosts.entry(*src).or_default();
        h.tx_bytes += p.bytes;
        h.retransmitted += p.retransmitted;
        h.tx_priorities
            .extend(priorities[&(*src, *dst)].iter().copied());
        hosts.entry(*dst).or_default().rx_bytes += p.bytes;
    }
    let hosts = hosts
        .into_iter()
        .map(|(host, h)| HostRow {
            host,
            mac: placed.mac_of(host),
            tx_gbps: rate(h.tx_bytes),
            rx_gbps: rate(h.rx_bytes),
            cnps_sent: h.cnps_sent,
            cnps_received: h.cnps_received,
            pauses_sent: placed.pauses_sent(host),
            paused_ns: placed.host_paused_ns(host, &h.tx_priorities),
            retransmitted: h.retransmitted,
        })
        .collect();

    let pairs: Vec<PairRow> = pairs.into_values().collect();
    let median_gbps = slowest::median(pairs.iter().filter_map(|p| p.gbps));
    let slowest = slowest::rank(&pairs, median_gbps, span_ns);
    FabricReport {
        span_ns,
        hosts,
        pairs,
        median_gbps,
        slow_below: SLOW_BELOW,
        slowest,
        links: placed.links(),
        unplaced_pauses: placed.unplaced(),
    }
}

/// A host's sums while the pairs are gone through.
#[derive(Debug, Default)]
struct Host {
    tx_bytes: u64,
    rx_bytes: u64,
    cnps_sent: u64,
    cnps_received: u64,
    retransmitted: u64,
    /// The priorities its data travels on: the ones whose pauses stop it.
    tx_priorities: BTreeSet<Option<u8>>,
}
