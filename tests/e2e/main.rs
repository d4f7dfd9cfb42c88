//! The tests that cross crates, one binary with a module per test (see `tests/src/lib.rs` for how they find the
//! binaries).

mod common;
mod live;
mod samples_truth;
mod spark;
mod top_numbers;
