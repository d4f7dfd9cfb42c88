//! The libpcap engine: one capture handle per interface, each read by its own thread.
//!
//! Immediate mode (frames are delivered as they arrive, not when a buffer block fills), a 64 MiB kernel
//! buffer for bursts, nanosecond timestamps and the BPF filter compiled by libpcap. A short read timeout
//! lets each thread notice the stop flag within 100 ms; what the kernel still holds then is read out before
//! the thread ends.
//!
//! On a loopback device the kernel hands the packet socket every frame twice, as sent and as received;
//! libpcap throws the sent copy away, but the kernel has counted both, so a capture of 65 frames said 130
//! were received. There the socket asks the kernel for received frames only (`PACKET_IGNORE_OUTGOING`), so
//! the sent copies are neither delivered nor counted; a kernel before 4.20 refuses, and then libpcap's own
//! direction setting keeps them out of the file, though not out of the kernel's count. (An `inbound` term
//! in the filter would work in the kernel, but libpcap runs the filter itself on the frames of the buffer
//! block that was filling when the filter was set, and there it cannot tell a frame's direction: the first
//! frames were lost.) The statistics say what the thread handed over, plus what was lost: the kernel's
//! drops and any frames still in its buffer when the stop's drain ended.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use roce_capture::LinkType;
use std::os::fd::AsRawFd;

use pcap::{Active, Capture, Precision};

use super::{Captured, Engine, EngineConfig, Event, IfaceStats, Plumbing, ReaderThreads};
use crate::sys;

/// Kernel buffer per interface.
const BUFFER_BYTES: i32 = 64 << 20;
const READ_TIMEOUT_MS: i32 = 100;

/// Why the pcap engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum PcapStartError {
    /// An interface could not be opened for capture.
    #[error("cannot open interface {iface}")]
    Open {
        /// The interface.
        iface: String,
        /// Why.
        #[source]
        source: pcap::Error,
    },
    /// The `--filter` expression does not compile on an interface.
    #[error("the capture filter {filter:?} does not compile on {iface}")]
    Filter {
        /// The interface.
        iface: String,
        /// The expression.
        filter: String,
        /// Why.
        #[source]
        source: pcap::Error,
    },
    /// A capture thread could not be started.
    #[error("cannot start a capture thread")]
    Thread(#[from] std::io::Error),
}

/// The running pcap engine: one capture thread per interface.
#[derive(Debug)]
pub struct PcapEngine {
    links: Vec<LinkType>,
    filter: String,
    /// Per interface: a loopback device, captured on receive only.
    loopbacks: Vec<bool>,
    /// The readers; each interface's drop count is as of its last statistics poll (about once a second).
    readers: ReaderThreads,
}

/// Opens every interface (so that a bad name, a missing permission or a bad filter fails before anything
/// is written), then starts one reader thread per interface.
pub fn start(config: &EngineConfig, plumbing: &Plumbing) -> Result<PcapEngine, PcapStartError> {
    let filter = config.filter.as_deref().unwrap_or(DEFAULT_FILTER);
    let mut caps = Vec::new();
    let mut loopbacks = Vec::new();
    for name in &config.interfaces {
        let open = || -> Result<Capture<Active>, pcap::Error> {
            Capture::from_device(name.as_str())?
                .immediate_mode(true)
                .buffer_size(BUFFER_BYTES)
                .snaplen(i32::try_from(config.snaplen).unwrap_or(i32::MAX))
                .promisc(true)
                .timeout(READ_TIMEOUT_MS)
                .precision(Precision::Nano)
                .open()
        };
        let mut cap = open().map_err(|source| PcapStartError::Open {
            iface: name.clone(),
            source,
        })?;
        cap.filter(filter, true)
            .map_err(|source| PcapStartError::Filter {
                iface: name.clone(),
                filter: filter.to_owned(),
                source,
            })?;
        let loopback = sys::is_loopback(name);
        if loopback {
            cap.direction(pcap::Direction::In)
                .map_err(|source| PcapStartError::Open {
                    iface: name.clone(),
                    source,
                })?;
            // Best effort: see the module documentation.
            let _ = sys::ignore_outgoing(cap.as_raw_fd());
        }
        loopbacks.push(loopback);
        // libpcap's own read timeout is not honoured on every Linux ring version (poll may block until a
        // frame arrives): read without blocking and wait on the descriptor ourselves.
        let cap = cap.setnonblock().map_err(|source| PcapStartError::Open {
            iface: name.clone(),
            source,
        })?;
        caps.push(cap);
    }
    let links = caps
        .iter()
        .map(|c| LinkType(u16::try_from(c.get_datalink().0).unwrap_or(u16::MAX)))
        .collect();
    let mut readers = ReaderThreads::new(caps.len());
    for (i, cap) in caps.into_iter().enumerate() {
        let plumbing = plumbing.clone();
        let iface = i as u32;
        let name = config.interfaces.get(i).cloned().unwrap_or_default();
        readers.spawn(format!("pcap-{name}"), move |dropped| {
            read_loop(cap, iface, plumbing, dropped)
        })?;
    }
    Ok(PcapEngine {
        links,
        filter: filter.to_owned(),
        loopbacks,
        readers,
    })
}

fn read_loop(
    mut cap: Capture<Active>,
    iface: u32,
    p: Plumbing,
    dropped: &[AtomicU64],
) -> IfaceStats {
    let mut ended = None;
    let mut open = true;
    let mut last_poll = Instant::now();
    // Frames handed to the writer (or offered, once it has gone).
    let mut delivered = 0u64;
    while !p.stop.load(Ordering::Relaxed) {
        if last_poll.elapsed() >= Duration::from_secs(1) {
            last_poll = Instant::now();
            if let (Ok(s), Some(slot)) = (cap.stats(), dropped.get(iface as usize)) {
                slot.store(
                    u64::from(s.dropped) + u64::from(s.if_dropped),
                    Ordering::Relaxed,
                );
            }
        }
        match cap.next_packet() {
            Ok(pkt) => {
                delivered += 1;
                if !forward(&pkt, iface, &p) {
                    open = false;
                    break;
                }
            }
            Err(pcap::Error::TimeoutExpired) => {
                sys::wait_readable(cap.as_raw_fd(), READ_TIMEOUT_MS)
            }
            Err(e) => {
                ended = Some(e.to_string());
                break;
            }
        }
    }
    if ended.is_none() && open {
        delivered += drain(&mut cap, iface, &p);
    }
    let stats = match cap.stats() {
        Ok(s) => handed_over(
            delivered,
            u64::from(s.received),
            u64::from(s.dropped),
            u64::from(s.if_dropped),
        ),
        Err(_) => IfaceStats::default(),
    };
    if let Some(reason) = ended {
        let _ = p.tx.send(Event::Ended { iface, reason });
    }
    stats
}

/// An interface's statistics from what its thread handed over and libpcap's counts: the kernel counted
/// `received` frames that passed the filter, lost ones included, `dropped` of them for want of buffer
/// space, and the interface itself `if_dropped`. What the kernel accepted and the thread never read (still
/// in the buffer when the stop's drain ended) is lost too, so received = handed over + lost.
pub fn handed_over(delivered: u64, received: u64, dropped: u64, if_dropped: u64) -> IfaceStats {
    let left_behind = received.saturating_sub(dropped).saturating_sub(delivered);
    let lost = dropped + if_dropped + left_behind;
    IfaceStats {
        received: Some(delivered + lost),
        dropped: Some(lost),
    }
}

/// Hands one frame to the writer; false once the writer has gone (it stopped taking frames).
fn forward(pkt: &pcap::Packet<'_>, iface: u32, p: &Plumbing) -> bool {
    let ts = pkt.header.ts;
    // With nanosecond precision libpcap stores nanoseconds in the microsecond field.
    let ts_ns = (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_usec as u64);
    let frame = Captured {
        iface,
        ts_ns,
        len: pkt.header.len,
        data: pkt.data.to_vec(),
    };
    p.tx.send(Event::Frame(frame)).is_ok()
}

/// How long a stopping capture keeps reading what the kernel buffered: on a link that keeps sending, the
/// buffer never empties.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Reads out the frames the kernel still holds when the capture stops. They arrived before the stop (the
/// end of a `-- CMD` workload, the last burst before a SIGINT), and the statistics block counts them as
/// received: leaving them unwritten would lose frames without a word. The handle does not block, so an
/// empty buffer ends the drain at once; a writer that stops taking frames (a second signal, a count
/// reached) ends it too. Returns how many frames it read.
fn drain(cap: &mut Capture<Active>, iface: u32, p: &Plumbing) -> u64 {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut n = 0;
    while Instant::now() < deadline {
        match cap.next_packet() {
            Ok(pkt) => {
                n += 1;
                if !forward(&pkt, iface, p) {
                    return n;
                }
            }
            Err(_) => return n,
        }
    }
    n
}

impl Engine for PcapEngine {
    fn link_types(&self) -> Vec<LinkType> {
        self.links.clone()
    }

    fn describe(&self, iface: u32) -> String {
        let direction = if self.loopbacks.get(iface as usize).copied().unwrap_or(false) {
            " (received frames only: a loopback device receives what it sends)"
        } else {
            ""
        };
        format!("roce-tracer engine=pcap{direction} filter={}", self.filter)
    }

    fn dropped_so_far(&self) -> Vec<u64> {
        self.readers.dropped_so_far()
    }

    fn finish(self: Box<Self>, _late: &[u64]) -> (Vec<IfaceStats>, Option<Vec<u8>>) {
        (self.readers.join(), None)
    }
}

/// The default capture filter: RoCEv2 (UDP destination port 4791), RoCEv1 (ethertype 0x8915) and MAC Control
/// (0x8808: PFC and PAUSE), untagged, under one VLAN tag, or under two (QinQ). libpcap's `vlan` keyword moves
/// the offsets of everything after it for the rest of the expression, hence the nesting.
pub const DEFAULT_FILTER: &str = "(udp dst port 4791 or ether proto 0x8915 or ether proto 0x8808) \
or (vlan and ((udp dst port 4791 or ether proto 0x8915 or ether proto 0x8808) \
or (vlan and (udp dst port 4791 or ether proto 0x8915 or ether proto 0x8808))))";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_handed_over_and_what_was_lost_add_up_to_what_was_received() {
        // Everything the kernel accepted was read.
        let s = handed_over(65, 65, 0, 0);
        assert_eq!((s.received, s.dropped), (Some(65), Some(0)));
        // Drops in the kernel and at the interface.
        let s = handed_over(90, 100, 10, 3);
        assert_eq!((s.received, s.dropped), (Some(103), Some(13)));
        // Frames left in the buffer after the drain: lost at the stop.
        let s = handed_over(80, 100, 10, 0);
        assert_eq!((s.received, s.dropped), (Some(100), Some(20)));
        // More handed over than the kernel says it kept (its counters are 32 bits and wrap): nothing lost.
        let s = handed_over(5, 2, 0, 0);
        assert_eq!((s.received, s.dropped), (Some(5), Some(0)));
    }
}
