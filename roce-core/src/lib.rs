//! The core both rocetrace applications stand on: [`decode`] turns a capture record into a [`decode::Frame`]
//! (one decoder for the analyzer, the live tracer and the simulator's tests), the streaming [`passes`] fold
//! frames into tables whose size depends on flows and time, never on the packet count, [`dcqcn`] is the
//! reaction-point model ([`dcqcn_options`] how it runs, for the analyzer and the tracer alike), [`recorded`]
//! reads what the tracer stored beside the packets, [`nic_counters`] reads every vendor's NIC counters by
//! meaning and sets them beside the packets, [`processes`] ties
//! the QPs' processes it names to the flows, [`spill`] keeps the per-event logs a pass needs at its end on
//! disk, [`line`] gives each tap its line rate, [`units`] parses the speeds and durations the command lines
//! take and writes rates, and [`text`] makes a capture's strings safe to print.
#![warn(missing_docs)]
pub mod dcqcn;
pub mod dcqcn_options;
pub mod decode;
pub mod fanout;
pub mod filter;
pub mod frames;
pub mod line;
pub mod nic_counters;
pub mod ordered;
pub mod passes;
pub mod priority;
pub mod processes;
pub mod recorded;
pub mod shard;
pub mod spill;
pub mod text;
pub mod units;
