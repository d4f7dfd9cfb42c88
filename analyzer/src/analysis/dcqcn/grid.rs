//! The rate grid every flow's bins share; the columns the model series is decimated in are a grid of the
//! same kind, wider.

use roce_core::line::LineRate;

/// The shared bin grid: where it starts and how wide each bin is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    pub(super) start: u64,
    pub(super) width: u64,
}

impl Grid {
    /// Bytes a link at `line` carries in one bin.
    pub(super) fn capacity(&self, line: LineRate) -> u64 {
        u64::try_from(u128::from(line.bps) * u128::from(self.width) / 8_000_000_000)
            .unwrap_or(u64::MAX)
    }

    /// Where bin `i` starts; saturating, so that a grid at the end of the clock's range does not wrap.
    pub(super) fn bin_start(&self, i: usize) -> u64 {
        self.start
            .saturating_add((i as u64).saturating_mul(self.width))
    }
}
