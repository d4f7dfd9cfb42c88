//! Which of a flow's bins a comparison of its model with what it sent may use.

use super::report::Observed;

/// Which bins a comparison of model and observation uses: those with traffic from the first CNP on, unpaused,
/// and, when the model stopped early (or the fit looks at part of the flow), only those that end by then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// The grid's bin width: a bin is in only when it ends by `until`.
    pub(super) width: u64,
    /// The flow's first CNP as the model sees it: before it, the model and the sender have no cause to differ.
    pub(super) first_cnp: u64,
    /// Where the comparison stops, if it does before the end: the model's guard stop, or the fit's horizon.
    pub(super) until: Option<u64>,
}

impl Window {
    /// Whether bin `o` is in; with `unpaused`, a paused bin is not (without it, the paused bins can be counted).
    pub(super) fn admits(&self, o: &Observed, unpaused: bool) -> bool {
        o.t_ns >= self.first_cnp
            && o.gbps > 0.0
            && !(unpaused && o.paused)
            && self
                .until
                .is_none_or(|u| o.t_ns.saturating_add(self.width) <= u)
    }
}
