//! Matching one packet's copies across taps, in a window of time.
//!
//! A switch leaves the addresses, the BTH, the payload and so the ICRC alone; it may rewrite ECN, TTL, the IP
//! checksum, VLAN tags and MACs. So a packet is known by (source, destination, destination QP, PSN, opcode,
//! payload length), and by its ICRC when the frame was captured whole. A PSN recurs only when the sender
//! retransmits (or after 2^24 packets of the flow), so copies are grouped within a window of time from the
//! first copy: memory holds the packets in flight between taps, never the capture.

use std::net::IpAddr;

use roce_core::decode::{Frame, Kind};
use roce_wire::pfc::MacControlRepr;

/// How many taps one packet's group records; a copy at a further tap is counted and left out.
pub const MAX_COPIES: usize = 6;

/// What a switch does not change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Key {
    pub src: u128,
    pub dst: u128,
    pub dest_qp: u32,
    pub psn: u32,
    pub opcode: u8,
    pub payload_len: u32,
    /// The ICRC, when the frame was captured whole.
    pub icrc: Option<u32>,
}

/// An address as one number, IPv4 in the low 32 bits.
pub fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Key {
    /// Mixes every field into 64 bits (multiply-xorshift rounds): cheaper to hash and move than the key.
    #[inline]
    pub fn digest(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h = 0u64;
        for w in [
            self.src as u64,
            (self.src >> 64) as u64,
            self.dst as u64,
            (self.dst >> 64) as u64,
            ((self.dest_qp as u64) << 32) | self.psn as u64,
            ((self.opcode as u64) << 32) | self.payload_len as u64,
            self.icrc.map_or(1 << 32, |c| c as u64),
        ] {
            h = (h ^ w).wrapping_mul(K);
            h ^= h >> 29;
        }
        h
    }
}

/// One copy of a packet at one tap.
#[derive(Debug, Clone, Copy, Default)]
pub struct Copy {
    pub ts: u64,
    pub tap: u32,
    /// ECN as this tap saw it (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// VLAN PCP, 0xff untagged.
    pub pcp: u8,
    /// Times this tap saw the packet in the window (a retransmission within it, or a duplicate).
    pub seen: u8,
    pub len: u32,
    /// Time since the frame before it towards the same destination MAC at this tap (0 for the first): at the
    /// downstream tap of a busy port, back-to-back departures show the port's rate.
    pub gap: u32,
    pub dst_mac: [u8; 6],
}

/// One packet's copies, in the order the merged stream delivered them.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub key: Key,
    /// The key's digest, kept so that closing the group removes it from the map without mixing the key again.
    digest: u64,
    pub n: u8,
    pub copies: [Copy; MAX_COPIES],
}

impl Group {
    pub fn copies(&self) -> &[Copy] {
        &self.copies[..self.n as usize]
    }
}

/// What the hops pass reads of one frame, cut out of the decoded [`Frame`] where it was decoded: about a third
/// of its size, so that a reading thread can hand frames to the pass in batches cheaply.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// The frame's copy at its tap (ECN 0 without an IP layer, the destination MAC zero without one; its `gap`
    /// is set by the pass, which knows the frame before it).
    pub copy: Copy,
    pub kind: Kind,
    /// Whether the frame has a destination MAC (`copy.dst_mac` is zero when not).
    pub has_mac: bool,
    /// The PFC priorities the frame pauses for a nonzero time, bit n for priority n.
    pub paused: u8,
    /// A read request's DMA length (0 when its RETH was not captured), `None` for every other opcode.
    pub read_len: Option<u32>,
    /// The key of a RoCE frame (CNPs included: they cross switches too) with an IP layer and a BTH.
    pub key: Option<Key>,
    /// The key's digest (0 without a key), computed where the frame was decoded.
    pub digest: u64,
}

impl Seen {
    /// Cuts a decoded frame down to what the pass uses.
    #[inline]
    pub fn of(f: &Frame<'_>) -> Seen {
        let mut paused = 0u8;
        if let Some(MacControlRepr::Pfc(p)) = f.mac_control {
            for prio in 0..8u8 {
                if p.enabled(prio) && p.quanta[prio as usize] > 0 {
                    paused |= 1 << prio;
                }
            }
        }
        let mut key = None;
        let mut read_len = None;
        if matches!(f.kind, Kind::Roce | Kind::Cnp)
            && let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref())
            && let Some(bth) = roce.packet.bth.as_ref()
        {
            let whole = !f.truncated && roce.packet.stop.is_none();
            key = Some(Key {
                src: ip_bits(ip.src),
                dst: ip_bits(ip.dst),
                dest_qp: bth.dest_qp,
                psn: bth.psn,
                opcode: bth.opcode.0,
                payload_len: roce.packet.payload_len.unwrap_or(0) as u32,
                icrc: if whole { roce.packet.icrc } else { None },
            });
            read_len = bth
                .opcode
                .is_read_request()
                .then(|| roce.packet.ext.reth.map_or(0, |r| r.dma_len));
        }
        Seen {
            copy: Copy {
                ts: f.ts_ns,
                tap: f.iface,
                ecn: f.ip.map_or(0, |ip| ip.ecn),
                pcp: f.pcp.unwrap_or(0xff),
                seen: 1,
                len: f.len,
                gap: 0,
                dst_mac: f.dst_mac.unwrap_or_default(),
            },
            kind: f.kind,
            has_mac: f.dst_mac.is_some(),
            paused,
            read_len,
            digest: key.map_or(0, |k| k.digest()),
            key,
        }
    }
}

/// Groups copies within `window_ns` of a packet's first copy; hands out each group once its window has passed.
///
/// Most of the pass's time went to memory: a hash map probed to add a copy and probed again to forget a
/// closed group, and groups scattered over a slab. Here groups sit in a ring in the order their first copies
/// came, which is the order they close in, so closing reads memory in sequence. An open-addressing table maps
/// the key's digest to the group's sequence number. A closed group's entry is not removed (another random
/// access per packet) but goes stale: the sequence number says it is older than the ring's front. Inserts
/// reuse stale entries, and when live and stale entries fill half the table it is rebuilt from the ring.
#[derive(Debug)]
pub struct Matcher {
    window_ns: u64,
    /// 0 (never used) or the digest's top bits (the top bit set) above the sequence number's lower 24 bits:
    /// four bytes, so that the table of a busy capture's 30,000 open packets stays in the core's cache.
    table: Vec<u32>,
    /// Table entries not 0: live and stale.
    used: usize,
    /// Open groups by sequence number modulo its length, a power of two.
    ring: Vec<Group>,
    /// Sequence numbers of the oldest open group and of the next group.
    front: u64,
    back: u64,
    /// Copies left out because a group already held MAX_COPIES taps.
    pub overflow: u64,
    /// The most groups open at once: the memory the window costs.
    pub peak_open: usize,
}

const MIN_TABLE: usize = 1024;
/// Sequence numbers as the table keeps them: open groups must number fewer, or two would share an entry.
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u32 = (1 << SEQ_BITS) - 1;
/// Open groups at most: past it, the oldest closes early (8 M packets in flight is no capture's window).
const MAX_OPEN: u64 = 1 << (SEQ_BITS - 1);

impl Matcher {
    pub fn new(window_ns: u64) -> Self {
        Matcher {
            window_ns,
            table: vec![0; MIN_TABLE],
            used: 0,
            ring: vec![Group::default(); MIN_TABLE / 4],
            front: 0,
            back: 0,
            overflow: 0,
            peak_open: 0,
        }
    }

    fn open(&self) -> usize {
        (self.back - self.front) as usize
    }

    /// The open group `entry` points to, when it is still open.
    #[inline]
    fn live(&self, entry: u32) -> Option<u64> {
        let off = entry.wrapping_sub(self.front as u32) & SEQ_MASK;
        (u64::from(off) < self.back - self.front).then(|| self.front + u64::from(off))
    }

    /// The open group with this key, or the table slot a new one goes to.
    #[inline]
    fn find(&self, digest: u64, key: &Key) -> Result<u64, usize> {
        let mask = self.table.len() - 1;
        let tag = entry(digest, 0) >> SEQ_BITS;
        let ring_mask = self.ring.len() as u64 - 1;
        let mut i = digest as usize & mask;
        let mut reuse = None;
        loop {
            let e = self.table[i];
            if e == 0 {
                return Err(reuse.unwrap_or(i));
            }
            match self.live(e) {
                Some(seq) => {
                    if e >> SEQ_BITS == tag && self.ring[(seq & ring_mask) as usize].key == *key {
                        return Ok(seq);
                    }
                }
                None => {
                    reuse.get_or_insert(i);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Asks the CPU to fetch the table entry a key with this digest starts at: the pass calls it a frame
    /// before [`Matcher::add_digested`], so that reading and decoding the next frame hide the cache miss.
    #[inline]
    pub fn prefetch(&self, digest: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let i = digest as usize & (self.table.len() - 1);
            // SAFETY: SSE is part of every x86_64 CPU, and a prefetch reads nothing the program sees (the
            // address is inside the table anyway).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.table[i..].as_ptr().cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = digest;
    }

    /// Asks the CPU to fetch the open group a key with this digest probably belongs to, once its table entry
    /// is in the cache ([`Matcher::prefetch`] a few frames earlier): adding a packet's second copy then finds
    /// the group there. A guess only: a wrong one costs a fetch, never a result.
    #[inline]
    pub fn prefetch_group(&self, digest: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let mask = self.table.len() - 1;
            let tag = entry(digest, 0) >> SEQ_BITS;
            let mut i = digest as usize & mask;
            // The first few entries of the probe only: most keys sit at their first.
            for _ in 0..4 {
                let e = self.table[i];
                if e == 0 {
                    return;
                }
                if e >> SEQ_BITS == tag
                    && let Some(seq) = self.live(e)
                {
                    let g = &self.ring[(seq & (self.ring.len() as u64 - 1)) as usize];
                    let at: *const Group = g;
                    // SAFETY: as in `prefetch`; the key and the first copies span the group's first lines.
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(at.cast());
                        _mm_prefetch::<_MM_HINT_T0>(at.cast::<u8>().wrapping_add(64).cast());
                        _mm_prefetch::<_MM_HINT_T0>(at.cast::<u8>().wrapping_add(128).cast());
                    }
                    return;
                }
                i = (i + 1) & mask;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = digest;
    }

    /// Adds a copy (its key's digest computed) seen at stream time `now` (its own timestamp), first closing
    /// every group whose window ended before it.
    #[inline]
    pub fn add_digested(
        &mut self,
        key: Key,
        digest: u64,
        copy: Copy,
        mut closed: impl FnMut(&Group),
    ) {
        self.close_before(copy.ts.saturating_sub(self.window_ns), &mut closed);
        match self.find(digest, &key) {
            Ok(seq) => {
                let at = (seq & (self.ring.len() as u64 - 1)) as usize;
                let g = &mut self.ring[at];
                if let Some(c) = g.copies[..g.n as usize]
                    .iter_mut()
                    .find(|c| c.tap == copy.tap)
                {
                    c.seen = c.seen.saturating_add(1);
                } else if (g.n as usize) < MAX_COPIES {
                    g.copies[g.n as usize] = copy;
                    g.n += 1;
                } else {
                    self.overflow += 1;
                }
            }
            Err(slot) => {
                if self.open() as u64 >= MAX_OPEN {
                    self.close_oldest(&mut closed);
                }
                if self.open() == self.ring.len() {
                    self.grow_ring();
                }
                let seq = self.back;
                self.back += 1;
                let at = (seq & (self.ring.len() as u64 - 1)) as usize;
                let g = &mut self.ring[at];
                g.key = key;
                g.digest = digest;
                g.copies[0] = copy;
                g.n = 1;
                if self.table[slot] == 0 {
                    self.used += 1;
                }
                self.table[slot] = entry(digest, seq);
                self.peak_open = self.peak_open.max(self.open());
                if self.used * 2 > self.table.len() {
                    self.rebuild();
                }
            }
        }
    }

    /// Twice the room, each open group moved to its place for the longer ring.
    fn grow_ring(&mut self) {
        let old = std::mem::take(&mut self.ring);
        let old_mask = old.len() as u64 - 1;
        self.ring = vec![Group::default(); old.len() * 2];
        let mask = self.ring.len() as u64 - 1;
        for seq in self.front..self.back {
            self.ring[(seq & mask) as usize] = old[(seq & old_mask) as usize].clone();
        }
    }

    /// A table with the open groups only, four times as large as they need (at least).
    fn rebuild(&mut self) {
        let len = (self.open() * 4).next_power_of_two().max(MIN_TABLE);
        self.table.clear();
        self.table.resize(len, 0);
        let mask = len - 1;
        let ring_mask = self.ring.len() as u64 - 1;
        for seq in self.front..self.back {
            let digest = self.ring[(seq & ring_mask) as usize].digest;
            let mut i = digest as usize & mask;
            while self.table[i] != 0 {
                i = (i + 1) & mask;
            }
            self.table[i] = entry(digest, seq);
        }
        self.used = self.open();
    }

    /// Closes the groups whose first copy came before `t`.
    pub fn close_before(&mut self, t: u64, closed: &mut impl FnMut(&Group)) {
        let mask = self.ring.len() as u64 - 1;
        while self.front < self.back {
            let g = &self.ring[(self.front & mask) as usize];
            if g.copies[0].ts >= t {
                break;
            }
            closed(g);
            self.front += 1;
        }
    }

    fn close_oldest(&mut self, closed: &mut impl FnMut(&Group)) {
        let mask = self.ring.len() as u64 - 1;
        closed(&self.ring[(self.front & mask) as usize]);
        self.front += 1;
    }

    /// Closes every group.
    pub fn close_all(&mut self, closed: &mut impl FnMut(&Group)) {
        self.close_before(u64::MAX, closed);
    }
}

/// A table entry: never 0, thanks to the tag's top bit.
#[inline]
fn entry(digest: u64, seq: u64) -> u32 {
    let tag = (digest >> (64 - (32 - SEQ_BITS))) as u32 | 1 << (31 - SEQ_BITS);
    tag << SEQ_BITS | (seq as u32 & SEQ_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A closed group as the test compares it: its key and (tap, time, times seen) per copy.
    type Closed = (Key, Vec<(u32, u64, u8)>);

    fn key(i: u64) -> Key {
        Key {
            src: 1,
            dst: 2,
            dest_qp: (i % 7) as u32,
            psn: (i / 7) as u32,
            opcode: 10,
            payload_len: 1024,
            icrc: None,
        }
    }

    /// The ring and its table hand out the groups a plain map would, through the table's rebuilds, the ring's
    /// growth and stale entries: packets seen at two taps, some retransmitted within the window, some only once.
    #[test]
    fn groups_like_a_plain_map() {
        let window = 10_000;
        let mut m = Matcher::new(window);
        let mut got: Vec<Closed> = Vec::new();
        let mut collect = |g: &Group| {
            got.push((
                g.key,
                g.copies().iter().map(|c| (c.tap, c.ts, c.seen)).collect(),
            ))
        };
        // Plain model: key -> (first ts, copies), closed in first-copy order once `window` has passed.
        let mut open: HashMap<Key, usize> = HashMap::new();
        let mut want: Vec<Closed> = Vec::new();
        let mut first: Vec<u64> = Vec::new();
        let mut closed = 0;
        let mut events: Vec<(u64, u32, u64)> = Vec::new();
        let mut x = 12345u64;
        for i in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = i * 3;
            events.push((t, 0, i));
            if x >> 60 != 0 {
                events.push((t + 50 + (x >> 40) % 9_000, 1, i));
            }
            if x >> 58 == 1 {
                events.push((t + 10, 0, i));
            }
        }
        events.sort();
        for &(t, tap, i) in &events {
            let copy = Copy {
                ts: t,
                tap,
                seen: 1,
                ..Copy::default()
            };
            while closed < want.len() && first[closed] < t.saturating_sub(window) {
                open.remove(&want[closed].0);
                closed += 1;
            }
            match open.get(&key(i)) {
                Some(&g) => match want[g].1.iter_mut().find(|c| c.0 == tap) {
                    Some(c) => c.2 += 1,
                    None => want[g].1.push((tap, t, 1)),
                },
                None => {
                    open.insert(key(i), want.len());
                    want.push((key(i), vec![(tap, t, 1)]));
                    first.push(t);
                }
            }
            m.add_digested(key(i), key(i).digest(), copy, &mut collect);
        }
        m.close_all(&mut collect);
        assert_eq!(got.len(), want.len());
        assert!(got == want);
        assert!(m.peak_open > MIN_TABLE);
    }
}
