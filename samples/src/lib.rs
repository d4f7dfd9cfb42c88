//! Makes captures: the decoder's test corpus ([`corpus`]), the benchmark capture ([`bulk`]) and the teaching
//! scenarios of the packet simulator ([`sim`]).
#![warn(missing_docs)]

pub mod bulk;
pub mod corpus;
pub mod emit;
pub mod multi_qp;
pub mod sim;
