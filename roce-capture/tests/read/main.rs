//! Reading capture files: real captures against tshark, damaged files, writer-to-reader round trips, and
//! captures copied block for block with comments added.

mod captures;
mod errors;
mod merge;
mod rewrite;
mod roundtrip;
