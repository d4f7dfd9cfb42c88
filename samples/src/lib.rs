//! Makes captures: the decoder's test corpus ([`corpus`]) and the benchmark capture ([`bulk`]).
//! The teaching scenarios and their simulator will live here too.
pub mod bulk;
pub mod corpus;
