//! The notification points' checks, gathered as the DCQCN analysis takes each CNP stream: a row per stream
//! and per receiver port, each against the least gap of the host that sent the CNPs. The checks themselves
//! are [`crate::analysis::np`]'s, which take plain times and know nothing of pairing or knobs.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use roce_core::passes::flows::FlowKey;

use super::report::{NpPort, NpStream};
use roce_core::dcqcn_options::{Options, np_gap};

/// The NP checks as the streams are taken: each stream's, and its CNPs gathered per (tap, receiver) for the
/// port checks.
pub(super) struct NpChecks<'a> {
    opts: &'a Options,
    streams: Vec<NpStream>,
    ports: FxHashMap<(u32, IpAddr), Vec<(u64, u32)>>,
}

impl<'a> NpChecks<'a> {
    pub(super) fn new(opts: &'a Options) -> NpChecks<'a> {
        NpChecks {
            opts,
            streams: Vec::new(),
            ports: FxHashMap::default(),
        }
    }

    /// Checks stream `k` at tap `iface` (`answers`: the CE mark each CNP answered, where the pairing knows
    /// it) and keeps its CNPs for the check of its receiver's port, which needs every stream first.
    pub(super) fn stream(
        &mut self,
        k: FlowKey,
        receiver_qp: Option<u32>,
        iface: u32,
        times: &[u64],
        answers: &[(u64, u64)],
    ) {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        self.ports
            .entry((iface, k.src))
            .or_default()
            .extend(sorted.iter().map(|&t| (t, k.dest_qp)));
        let (min_gap_ns, knobs_of) = np_gap(self.opts, k.src);
        self.streams.push(NpStream {
            receiver: k.src,
            sender: k.dst,
            sender_qp: k.dest_qp,
            receiver_qp,
            iface,
            tap: String::new(),
            knobs_of,
            check: crate::analysis::np::check_stream(&sorted, answers, min_gap_ns),
        });
    }

    /// The stream rows and the port rows, each in a stable order for the outputs.
    pub(super) fn finish(mut self) -> (Vec<NpStream>, Vec<NpPort>) {
        self.streams
            .sort_by_key(|n| (n.receiver, n.sender, n.sender_qp, n.iface));
        let opts = self.opts;
        let mut out: Vec<NpPort> = self
            .ports
            .into_iter()
            .map(|((iface, receiver), mut cnps)| {
                cnps.sort_unstable();
                let (min_gap_ns, knobs_of) = np_gap(opts, receiver);
                NpPort {
                    receiver,
                    iface,
                    tap: String::new(),
                    knobs_of,
                    min_gap_ns,
                    check: crate::analysis::np::check_port(&cnps, min_gap_ns),
                }
            })
            .collect();
        out.sort_by_key(|p| (p.receiver, p.iface));
        (self.streams, out)
    }
}
