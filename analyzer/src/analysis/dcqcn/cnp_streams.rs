//! Which tap each CNP stream is taken from, so that a CNP mirrored at two taps reaches the model once.

use rustc_hash::FxHashMap;

use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::Pairing;

use crate::analysis::tap_preference;

/// The CNP streams by tap: each stream is taken from one tap, so that a CNP seen at two taps (a switch's
/// ingress and egress, say) is one CNP. The times come from the pairing's logs, which waited on disk while the
/// capture was read, one stream at a time.
#[derive(Debug)]
pub(super) struct CnpStreams<'a> {
    pairing: &'a Pairing,
    /// Stream → (tap, CNPs there).
    by_key: FxHashMap<FlowKey, Vec<(u32, u64)>>,
}

impl<'a> CnpStreams<'a> {
    pub(super) fn new(pairing: &'a Pairing) -> CnpStreams<'a> {
        let mut by_key: FxHashMap<FlowKey, Vec<(u32, u64)>> = FxHashMap::default();
        for ((iface, key), n) in pairing.cnp_streams() {
            by_key.entry(key).or_default().push((iface, n));
        }
        CnpStreams { pairing, by_key }
    }

    /// The stream `key` at the tap that saw most of its CNPs (`prefer` on a tie, else the lowest index), and
    /// its CNPs there; the copies at other taps go with it.
    pub(super) fn take(&mut self, key: &FlowKey, prefer: u32) -> Option<(u32, u64)> {
        let taps = self.by_key.remove(key)?;
        taps.into_iter()
            .max_by_key(|&(iface, n)| (n, iface == prefer, std::cmp::Reverse(iface)))
    }

    /// The streams no flow took, each at its tap with most CNPs.
    pub(super) fn rest(self) -> impl Iterator<Item = (FlowKey, u32, Vec<u64>)> + 'a {
        let pairing = self.pairing;
        self.by_key.into_iter().filter_map(move |(key, taps)| {
            taps.into_iter()
                .max_by_key(|&(iface, n)| tap_preference(iface, n))
                .map(|(iface, _)| (key, iface, pairing.cnp_times(iface, &key)))
        })
    }
}
