//! Reading capture files: real captures against tshark, damaged files, and writer-to-reader round trips.

mod captures;
mod errors;
mod merge;
mod roundtrip;
