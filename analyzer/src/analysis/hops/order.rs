//! The order of taps on a packet's path. Within one file the earlier stamp saw the packet first; across two
//! files the clocks are apart, so a pair of taps is ordered per IP direction from the delays of the first
//! segment: a direction and its reverse fall on either side of the clocks' offset, and the one with the larger
//! delays goes from the lower tap to the higher. Groups closed during that first segment are held until the
//! order is known.

use rustc_hash::FxHashMap;

use super::diff;
use super::matching::Copy;
use super::taps::Taps;

type PairKey = (u32, u32, u128, u128);
/// An IP direction (source, destination) and its delays between a pair of taps.
type Direction = (u128, u128, ClassStat);

/// Per pair of taps (lower index first) and IP direction: the range of `t_hi − t_lo`.
#[derive(Debug, Clone, Copy)]
struct ClassStat {
    lo: i64,
    hi: i64,
}

/// A flow direction's taps, in path order, as its most complete packet showed them.
#[derive(Debug, Default)]
pub(super) struct PathInfo {
    src: u128,
    dst: u128,
    /// The taps its packets were seen at (those below 64).
    pub(super) mask: u64,
    pub(super) order: Vec<u32>,
    /// The first few of `Order::decided`'s entries for this direction, as (lower tap, higher tap, lower first):
    /// ordering a packet's copies then needs no lookup keyed by its two addresses.
    decided: Vec<(u32, u32, bool)>,
}

/// Most pairs of taps a path keeps its own copy of the order decided for.
const PATH_DECIDED: usize = 16;

/// Groups closed while the tap order is learnt, held compactly (a closed [`super::matching::Group`] reserves room for every
/// copy it could have had; most have two).
#[derive(Debug, Default)]
pub(super) struct Held {
    /// (path, first copy in `copies`, number of copies).
    groups: Vec<(u32, u32, u8)>,
    copies: Vec<Copy>,
}

impl Held {
    /// Holds the copies of a group of path `pi` until the order is known.
    pub(super) fn hold(&mut self, pi: usize, copies: &[Copy]) {
        self.groups
            .push((pi as u32, self.copies.len() as u32, copies.len() as u8));
        self.copies.extend_from_slice(copies);
    }

    /// The groups held, in the order they closed: each one's path and copies.
    pub(super) fn groups(&self) -> impl Iterator<Item = (usize, &[Copy])> {
        self.groups.iter().map(|&(pi, first, n)| {
            (
                pi as usize,
                &self.copies[first as usize..first as usize + n as usize],
            )
        })
    }
}

/// The paths of packets and which tap of each pair comes first on them.
#[derive(Debug, Default)]
pub(super) struct Order {
    classes: FxHashMap<PairKey, ClassStat>,
    /// Pairs of taps with two clocks: whether the lower-indexed tap comes first, per IP direction.
    decided: FxHashMap<PairKey, (bool, bool)>,
    /// Per pair of taps with two clocks: a delay between the two directions' ranges, for directions first
    /// seen after the learning.
    threshold: FxHashMap<(u32, u32), f64>,
    path_index: FxHashMap<(u128, u128), u32>,
    pub(super) paths: Vec<PathInfo>,
}

impl Order {
    /// The index of the path of packets from `src` to `dst`.
    #[inline]
    pub(super) fn path_id(&mut self, src: u128, dst: u128) -> usize {
        let n = self.paths.len() as u32;
        let i = *self.path_index.entry((src, dst)).or_insert(n);
        if i == n {
            self.paths.push(PathInfo {
                src,
                dst,
                ..PathInfo::default()
            });
        }
        i as usize
    }

    /// Widens, for each pair of taps with two clocks that a held group of path `pi` was seen at, the range of
    /// delays of its direction.
    pub(super) fn learn(&mut self, pi: usize, copies: &[Copy], taps: &Taps) {
        let (src, dst) = (self.paths[pi].src, self.paths[pi].dst);
        let path = &mut self.paths[pi];
        for c in copies {
            if c.tap < 64 {
                path.mask |= 1 << c.tap;
            }
        }
        for (i, x) in copies.iter().enumerate() {
            for y in &copies[i + 1..] {
                let (lo, hi) = if x.tap < y.tap { (x, y) } else { (y, x) };
                if taps.file_of(lo.tap) == taps.file_of(hi.tap) {
                    continue;
                }
                let d = diff(hi.ts, lo.ts);
                self.classes
                    .entry((lo.tap, hi.tap, src, dst))
                    .and_modify(|c| {
                        c.lo = c.lo.min(d);
                        c.hi = c.hi.max(d);
                    })
                    .or_insert(ClassStat { lo: d, hi: d });
            }
        }
    }

    /// Decides, for every pair of taps with two clocks, which tap each IP direction reaches first, from what
    /// [`Order::learn`] saw of the held groups.
    pub(super) fn decide(&mut self) {
        let mut pairs: FxHashMap<(u32, u32), Vec<Direction>> = FxHashMap::default();
        for (&(a, b, s, d), &c) in &self.classes {
            pairs.entry((a, b)).or_default().push((s, d, c));
        }
        for ((a, b), classes) in pairs {
            // A direction and its reverse: the one with the larger delays goes from `a` to `b`.
            let mut forward_lo = i64::MAX;
            let mut reverse_hi = i64::MIN;
            for &(s, d, c) in &classes {
                if let Some(r) = self.classes.get(&(a, b, d, s))
                    && (c.lo, c.hi) != (r.lo, r.hi)
                {
                    let first = c.lo > r.lo;
                    self.decided.insert((a, b, s, d), (first, false));
                    if first {
                        forward_lo = forward_lo.min(c.lo);
                    } else {
                        reverse_hi = reverse_hi.max(c.hi);
                    }
                }
            }
            if forward_lo != i64::MAX && reverse_hi != i64::MIN {
                self.threshold
                    .insert((a, b), (forward_lo as f64 + reverse_hi as f64) / 2.0);
            }
            for &(s, d, c) in &classes {
                self.decided
                    .entry((a, b, s, d))
                    .or_insert_with(|| self_decide(self.threshold.get(&(a, b)), c));
            }
        }
    }

    /// Whether copy `x` came before copy `y` of a packet of path `pi`.
    #[inline]
    pub(super) fn before(&mut self, x: &Copy, y: &Copy, pi: usize, taps: &Taps) -> bool {
        if taps.file_of(x.tap) == taps.file_of(y.tap) {
            return (x.ts, x.tap) < (y.ts, y.tap);
        }
        let (lo, hi, lo_is_x) = if x.tap < y.tap {
            (x, y, true)
        } else {
            (y, x, false)
        };
        let path = &mut self.paths[pi];
        let (src, dst) = (path.src, path.dst);
        if let Some(&(_, _, lo_first)) = path
            .decided
            .iter()
            .find(|&&(a, b, _)| (a, b) == (lo.tap, hi.tap))
        {
            return lo_first == lo_is_x;
        }
        let d = diff(hi.ts, lo.ts);
        let threshold = &self.threshold;
        let (lo_first, _) = *self
            .decided
            .entry((lo.tap, hi.tap, src, dst))
            .or_insert_with(|| {
                self_decide(threshold.get(&(lo.tap, hi.tap)), ClassStat { lo: d, hi: d })
            });
        if path.decided.len() < PATH_DECIDED {
            path.decided.push((lo.tap, hi.tap, lo_first));
        }
        lo_first == lo_is_x
    }

    /// Whether the order of taps `lo` and `hi` (lower index first) was decided from traffic both ways, rather
    /// than assumed from the sign of the delay.
    pub(super) fn two_way(&self, lo: u32, hi: u32) -> bool {
        self.threshold.contains_key(&(lo, hi))
    }
}

/// A direction first seen after the learning: on the side of the pair's threshold its delay falls, or, with
/// no threshold (traffic one way only), by its sign (assumed).
fn self_decide(threshold: Option<&f64>, c: ClassStat) -> (bool, bool) {
    match threshold {
        Some(&t) => (c.lo as f64 > t, false),
        None => (c.lo + c.hi >= 0, true),
    }
}
