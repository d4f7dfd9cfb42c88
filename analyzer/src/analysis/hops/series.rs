//! A hop's or a queue's queueing delay over time, for the report's charts: bins that widen as the capture grows,
//! so that a series costs the same whatever the capture's length.

/// Series keep at most this many bins; past it, the bin width doubles and neighbours merge.
const MAX_SERIES_BINS: usize = 2048;

/// One time bin of a hop's or queue's series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SeriesBin {
    /// Packets in the bin.
    pub packets: u32,
    /// Sum of their queueing delays, for the bin's mean.
    pub sum_ns: f64,
    /// Their largest queueing delay.
    pub max_ns: u64,
    /// Packets that arrived ECN-capable.
    pub ect_in: u32,
    /// Of those, the ones that left CE-marked.
    pub marked: u32,
}

/// Queueing delay over time, in bins that widen to stay under [`MAX_SERIES_BINS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Start of the first bin.
    pub start_ns: u64,
    /// Width of each bin (doubles as the series grows).
    pub bin_ns: u64,
    /// The bins, from `start_ns` on.
    pub bins: Vec<SeriesBin>,
}

impl Series {
    pub(super) fn new(start_ns: u64) -> Self {
        Series {
            start_ns,
            bin_ns: 1_000,
            bins: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, t: u64, q: u64, ect: bool, marked: bool) {
        let rel = t.saturating_sub(self.start_ns);
        let mut i = (rel / self.bin_ns) as usize;
        while i >= MAX_SERIES_BINS {
            self.widen();
            i = (rel / self.bin_ns) as usize;
        }
        if i >= self.bins.len() {
            self.bins.resize(i + 1, SeriesBin::default());
        }
        let b = &mut self.bins[i];
        b.packets += 1;
        b.sum_ns += q as f64;
        b.max_ns = b.max_ns.max(q);
        b.ect_in += ect as u32;
        b.marked += marked as u32;
    }

    pub(super) fn merge(&mut self, mut o: Series) {
        while self.bin_ns < o.bin_ns {
            self.widen();
        }
        while o.bin_ns < self.bin_ns {
            o.widen();
        }
        if o.bins.len() > self.bins.len() {
            self.bins.resize(o.bins.len(), SeriesBin::default());
        }
        for (a, b) in self.bins.iter_mut().zip(o.bins) {
            a.packets += b.packets;
            a.sum_ns += b.sum_ns;
            a.max_ns = a.max_ns.max(b.max_ns);
            a.ect_in += b.ect_in;
            a.marked += b.marked;
        }
    }

    fn widen(&mut self) {
        let merged = self
            .bins
            .chunks(2)
            .map(|c| {
                c.iter().fold(SeriesBin::default(), |a, b| SeriesBin {
                    packets: a.packets + b.packets,
                    sum_ns: a.sum_ns + b.sum_ns,
                    max_ns: a.max_ns.max(b.max_ns),
                    ect_in: a.ect_in + b.ect_in,
                    marked: a.marked + b.marked,
                })
            })
            .collect();
        self.bins = merged;
        self.bin_ns *= 2;
    }
}
