//! Why a result is empty, one sentence each, so that the command line and the report give the same reason
//! in the same words: a table with no rows and no reason reads as a tool that did not look.

/// No DCQCN flow at all: nothing was marked and no CNP came.
pub const NO_RATE_CONTROL: &str =
    "No flow saw ECN congestion marks or CNPs, so there is no rate control to show.";

/// DCQCN flows (CE-marked), but none with a CNP: the model had nothing to act on.
pub const NO_PAIRED_CNP: &str = "No CNP was paired with a data flow.";

/// Why no hop and no queue could be measured, given how many taps the capture has.
pub fn no_hops(taps: usize) -> String {
    if taps < 2 {
        "Only one tap was read, so no packet could be followed from one tap to another and no hop or queue \
         could be measured: give the captures of both sides of a switch (or of the sender and the receiver) \
         together, or a capture of several interfaces."
            .to_owned()
    } else {
        format!(
            "No packet was seen at two of the {taps} taps, so no hop or queue could be measured: the taps saw \
             different packets, or their clocks are further apart than the match window (see docs/hops.md)."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::no_hops;

    #[test]
    fn the_reason_for_no_hops_depends_on_the_taps() {
        assert!(no_hops(1).starts_with("Only one tap was read"));
        assert!(no_hops(0).starts_with("Only one tap was read"));
        assert!(no_hops(3).starts_with("No packet was seen at two of the 3 taps"));
    }
}
