//! Dense numbers for the (tap, flow) pairs a pass keeps state for, found for most frames without hashing.
//!
//! The DCQCN passes look a flow up for every data frame, thousands of flows interleaved, and the hash map's
//! lookup (hash the key, probe, compare the addresses) was a good part of their time. A NIC sends a message's
//! packets back to back, so most frames are of the flow of the frame before: that flow is tried first. Then
//! a direct-mapped table of recent flows, addressed by the destination QP's low bits, answers; its answer is
//! checked against the flow's full key, and a miss falls back to the hash map. QP numbers are handed out nearly in
//! sequence, so thousands of flows to one host rarely share a slot; the tap and the receiver pick which part
//! of the table a run of QP numbers lands in, so a flow seen at two taps, or receivers that reuse the same
//! QP numbers, do not evict one another frame after frame.
//!
//! Each pair's value sits beside its key, so a frame of a flow met again touches the table's slot and one
//! entry. Memory: the table's fixed size, plus a key, a number and a value per flow.

use rustc_hash::FxHashMap;

use super::flows::FlowKey;
use std::net::IpAddr;

/// Slots of the table of recent flows: 64 Ki slots of 4 bytes.
const RECENT_SLOTS: usize = 1 << 16;
/// The QP bits kept as they are in a slot's address: a run of this many consecutive QP numbers to one
/// receiver at one tap never shares a slot.
const QP_RUN_BITS: u32 = 12;

/// (tap, flow) → a number from 0 up, in the order first seen, and a value of the pass's own.
#[derive(Debug)]
pub struct FlowIndex<V> {
    /// Every pair's number, in the map's own order (which passes that hand their flows out in it keep).
    map: FxHashMap<(u32, FlowKey), u32>,
    /// By number: the pair, to check the table's answers, and its value.
    entries: Vec<(u32, FlowKey, V)>,
    /// A number per slot (`u32::MAX`: none yet).
    recent: Box<[u32]>,
    /// The number last found.
    last: usize,
}

impl<V> Default for FlowIndex<V> {
    fn default() -> Self {
        FlowIndex {
            map: FxHashMap::default(),
            entries: Vec::new(),
            recent: vec![u32::MAX; RECENT_SLOTS].into_boxed_slice(),
            last: usize::MAX,
        }
    }
}

/// The slot of a (tap, flow): the QP's low bits, with the bits above them mixed from the tap and the receiver.
#[inline]
fn slot(iface: u32, key: &FlowKey) -> usize {
    let dst = match key.dst {
        IpAddr::V4(a) => a.to_bits(),
        IpAddr::V6(a) => a.to_bits() as u32,
    };
    let mixed = (dst ^ iface.wrapping_mul(0x85eb_ca6b)).wrapping_mul(0x9e37_79b1) >> 16;
    (key.dest_qp ^ (mixed << QP_RUN_BITS)) as usize & (RECENT_SLOTS - 1)
}

impl<V> FlowIndex<V> {
    /// Whether entry `at` is the pair's.
    #[inline]
    fn holds(&self, at: usize, iface: u32, key: &FlowKey) -> bool {
        self.entries
            .get(at)
            .is_some_and(|(i, k, _)| *i == iface && k == key)
    }

    /// The pair's value, made by `new` when the pair was not seen before.
    #[inline]
    pub fn find_or_add(&mut self, iface: u32, key: &FlowKey, new: impl FnOnce() -> V) -> &mut V {
        let at = if self.holds(self.last, iface, key) {
            self.last
        } else {
            let s = slot(iface, key);
            let cached = self.recent[s] as usize;
            let at = if self.holds(cached, iface, key) {
                cached
            } else {
                let next = self.entries.len();
                let number = u32::try_from(next).unwrap_or(u32::MAX);
                let at = *self.map.entry((iface, *key)).or_insert(number) as usize;
                if at == next {
                    self.entries.push((iface, *key, new()));
                }
                self.recent[s] = at as u32;
                at
            };
            self.last = at;
            at
        };
        &mut self.entries[at].2
    }

    /// The pair's value, when it was seen.
    pub fn get_mut(&mut self, iface: u32, key: &FlowKey) -> Option<&mut V> {
        let at = *self.map.get(&(iface, *key))?;
        self.entries.get_mut(at as usize).map(|e| &mut e.2)
    }

    /// The pair's value, when it was seen.
    pub fn get(&self, iface: u32, key: &FlowKey) -> Option<&V> {
        let at = *self.map.get(&(iface, *key))?;
        self.entries.get(at as usize).map(|e| &e.2)
    }

    /// Every pair and its value, in the order first seen.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &FlowKey, &V)> + '_ {
        self.entries.iter().map(|(i, k, v)| (*i, k, v))
    }

    /// Every value, in the order first seen.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.entries.iter_mut().map(|e| &mut e.2)
    }

    /// Every pair and its value, in the hash map's order.
    pub fn into_map_order(self) -> impl Iterator<Item = (u32, FlowKey, V)> {
        let mut entries: Vec<Option<(u32, FlowKey, V)>> =
            self.entries.into_iter().map(Some).collect();
        self.map
            .into_values()
            .filter_map(move |at| entries.get_mut(at as usize).and_then(Option::take))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(dst: u8, qp: u32) -> FlowKey {
        FlowKey {
            src: IpAddr::from([10, 0, 0, 1]),
            dst: IpAddr::from([10, 0, 0, dst]),
            dest_qp: qp,
        }
    }

    proptest! {
        /// Whatever the slots hold, every pair keeps the number it was first given, numbers count up from 0,
        /// and the map's order is what a plain map fed the same pairs would have.
        #[test]
        fn numbers_are_those_of_a_plain_map(
            // A few QPs (flows met again, often back to back) and many (slots shared and lost).
            seen in proptest::collection::vec(
                (0u32..3, 1u8..4, prop_oneof![0u32..4, 0u32..0x30000]),
                1..400,
            ),
        ) {
            let mut index = FlowIndex::default();
            let mut plain: FxHashMap<(u32, FlowKey), u32> = FxHashMap::default();
            for &(iface, dst, qp) in &seen {
                let k = key(dst, qp);
                let next = plain.len() as u32;
                let want = *plain.entry((iface, k)).or_insert(next);
                // The value is the pair's number as it was made, and how often it was met.
                index.find_or_add(iface, &k, || (next, 0)).1 += 1;
                prop_assert_eq!(index.get_mut(iface, &k).map(|v| v.0), Some(want));
            }
            let order: Vec<_> = index.into_map_order().map(|(i, k, v)| (i, k, v.0)).collect();
            let plain_order: Vec<_> = plain.iter().map(|(&(i, k), &at)| (i, k, at)).collect();
            prop_assert_eq!(order, plain_order);
        }
    }

    #[test]
    fn a_flow_at_two_taps_and_qps_reused_by_receivers_keep_their_own_slots() {
        let pairs = [(0, key(1, 0x11)), (1, key(1, 0x11)), (0, key(2, 0x11))];
        let slots: Vec<usize> = pairs.iter().map(|(i, k)| slot(*i, k)).collect();
        assert_ne!(slots[0], slots[1]);
        assert_ne!(slots[0], slots[2]);
        let run: Vec<usize> = (0..1u32 << QP_RUN_BITS)
            .map(|q| slot(0, &key(1, q)))
            .collect();
        let mut distinct = run.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), run.len());
    }
}
