//! roce-tracer's TC probe: classifies each frame in the kernel, counts RoCE per QP and per priority, and hands
//! the first snaplen bytes of every matching frame to userspace through a ring buffer. The same object holds
//! the `skb:kfree_skb` tracepoint program that counts kernel drops and the generic tracepoint recorder
//! (`--kernel-events`).
//!
//! On the host this crate is an empty binary: the workspace's `cargo clippy`/`cargo test` build every member
//! for the host, and only the BPF build (driven by the `tracer` crate's build script) has the program.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod drops;
#[cfg(target_arch = "bpf")]
mod probe;
#[cfg(target_arch = "bpf")]
mod tracepoints;

#[cfg(not(target_arch = "bpf"))]
fn main() {}
