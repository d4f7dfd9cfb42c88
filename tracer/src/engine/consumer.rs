//! The eBPF engine's readers: `--threads` threads, each draining its share of the probe's rings (ring `r`
//! goes to thread `r % threads`) and handing what it read to the writer as one batch per ring, which the
//! writer merges by time ([`crate::merge`]).
//!
//! A thread reads each of its rings in slices of [`ring_batch`] bytes (the space goes back to the kernel
//! after each), sends what it has after every slice, and tells the writer when it found a ring empty and
//! when: that is what lets the writer write the frames of the busy rings while the others are idle. When
//! none of its rings had anything it sleeps on their descriptors for up to [`POLL_MS`], since the probe wakes
//! a reader only once per sixteenth of a ring; when they had, it naps for [`NAP`] so that a batch builds up.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::record::RingRecord;
use super::ring::{RingReader, Stop};
use super::{Captured, Event, Plumbing, SourceBatch};
use crate::sys;

/// How long a reader sleeps when nothing woke it: the probe submits records without a wakeup until a
/// CPU has written another sixteenth of its ring, so this bounds how late a frame of a slow stream reaches
/// the writer.
pub const POLL_MS: i32 = 10;

/// How long a reader sleeps after catching up with a stream of frames before it reads again. Polling
/// would return at once, since a ring is readable as soon as it holds one record, and a reader that
/// follows the probe record by record pulls the ring's positions and newest records over to its own CPU
/// for every frame, which the probe then pays for: each of its reservations reads the consumer position
/// and writes the producer position, and consecutive records share cache lines, so the line the reader
/// just read is often the one the probe writes next. A millisecond is 500 frames at half a million frames
/// per second, a small part of any ring but the smallest.
pub const NAP: Duration = Duration::from_millis(1);

/// How many bytes of records a reader reads from a ring before it gives their space back to the kernel
/// and hands the frames on. Each time it gives space back, the cache line with the consumer position moves
/// to the reader's CPU and back to the probe's (which reads it for every record it reserves), so this
/// should be many records; but space not yet given back looks full to the probe, so it should be a small
/// part of the ring; and the frames of a slice wait in the writer's queue together, so it bounds that
/// queue's memory. A thirty-second of the ring, at most 256 KiB (about 2 700 header copies): each record
/// of 2 KiB in a 16 KiB ring.
pub fn ring_batch(ring_bytes: usize) -> usize {
    (ring_bytes / 32).clamp(1, 256 << 10)
}

/// How many [`Event::Batch`]es may wait for the writer: with [`ring_batch`]'s cap, a few hundred thousand
/// frames, as the one-frame events of the other engines' queue allow.
pub const QUEUE_BATCHES: usize = 128;

/// One ring and its reader, with the count of what was read from it.
#[derive(Debug)]
pub struct Share {
    /// The ring's number (the merge's source).
    pub ring: u32,
    /// Its reader.
    pub reader: RingReader,
}

/// What every reader needs besides its rings.
#[derive(Debug)]
pub struct Setup {
    /// Interface index → position in the `-i` list.
    pub index_of: HashMap<u32, u32>,
    /// The `-i` names, for the messages about an interface that went away.
    pub names: Vec<String>,
    /// What to add to the probe's clock readings for wall-clock time: one value for every reader, so that
    /// the rings' stamps compare.
    pub mono_to_real: u64,
}

/// What a reader counted, returned when it ends.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Frames handed to the writer per interface (`-i` order): the user's filter has passed them.
    pub received: Vec<u64>,
    /// Records read per ring, as `(ring, records)`.
    pub read: Vec<(u32, u64)>,
}

/// Starts reader number `k`, with its rings, the user's filter (compiled for it: a compiled filter is one
/// thread's), and whether it watches for interfaces that disappear (one reader does).
pub fn spawn(
    k: usize,
    shares: Vec<Share>,
    filter: Option<pcap::BpfProgram>,
    watch: bool,
    setup: Arc<Setup>,
    p: Plumbing,
) -> std::io::Result<JoinHandle<Tally>> {
    std::thread::Builder::new()
        .name(format!("ebpf-ring-{k}"))
        .spawn(move || {
            Reader {
                shares,
                filter,
                setup,
                p,
                tally: Tally::default(),
                gone: Vec::new(),
            }
            .run(watch)
        })
}

struct Reader {
    shares: Vec<Share>,
    filter: Option<pcap::BpfProgram>,
    setup: Arc<Setup>,
    p: Plumbing,
    tally: Tally,
    /// Interfaces already reported gone.
    gone: Vec<bool>,
}

/// Why a pass over the rings ended the reader.
enum Ended {
    /// The writer is gone.
    Writer,
    /// A ring is corrupt: every interface has been told.
    Ring,
}

impl Reader {
    fn run(mut self, watch: bool) -> Tally {
        let ifaces = self.setup.names.len();
        self.tally.received = vec![0; ifaces];
        self.tally.read = self.shares.iter().map(|s| (s.ring, 0)).collect();
        self.gone = vec![false; ifaces];
        let fds: Vec<i32> = self.shares.iter().map(|s| s.reader.as_raw_fd()).collect();
        let mut last_check = Instant::now();
        loop {
            let stopping = self.p.stop.load(Ordering::Relaxed);
            let read = match self.pass() {
                Ok(n) => n,
                Err(_) => return self.tally,
            };
            if stopping {
                return self.tally;
            }
            if watch && last_check.elapsed() >= Duration::from_millis(500) {
                last_check = Instant::now();
                self.watch_interfaces();
            }
            if read > 0 {
                std::thread::sleep(NAP);
            } else {
                sys::wait_any_readable(&fds, POLL_MS);
            }
        }
    }

    /// Reads every ring of this reader to its end (or to a record still being written) and hands the
    /// frames over; returns how many records it read.
    fn pass(&mut self) -> Result<usize, Ended> {
        let mut out = Vec::with_capacity(self.shares.len());
        let mut total = 0;
        for i in 0..self.shares.len() {
            loop {
                let (batch, records, more) = self.slice(i)?;
                total += records;
                if let Some(t) = self.tally.read.get_mut(i) {
                    t.1 += records as u64;
                }
                out.push(batch);
                if !more {
                    break;
                }
                // A long backlog: hand this slice over before reading on.
                self.send(std::mem::take(&mut out))?;
            }
        }
        self.send(out)?;
        Ok(total)
    }

    /// One slice of ring `i`: its frames, the records read, and whether more may follow at once.
    fn slice(&mut self, i: usize) -> Result<(SourceBatch, usize, bool), Ended> {
        let Reader {
            shares,
            filter,
            setup,
            tally,
            ..
        } = self;
        let Some(share) = shares.get_mut(i) else {
            return Ok((SourceBatch::default(), 0, false));
        };
        // Before the producer position is read: a record reserved later is stamped later (the probe reads
        // the clock after reserving), up to the stack's receive stamps, which the merge's window covers.
        let looked_at = sys::monotonic_ns().saturating_add(setup.mono_to_real);
        let mut frames = Vec::new();
        let limit = ring_batch(share.reader.size());
        let walk = share.reader.drain(limit, |bytes| {
            let Some(rec) = RingRecord::parse(bytes) else {
                return ControlFlow::Continue(());
            };
            let Some(&iface) = setup.index_of.get(&rec.ifindex) else {
                return ControlFlow::Continue(());
            };
            // On the frame as it was on the wire (a tag the kernel removed is back in place).
            if filter.as_ref().is_some_and(|f| !f.filter(&rec.data)) {
                return ControlFlow::Continue(());
            }
            if let Some(r) = tally.received.get_mut(iface as usize) {
                *r += 1;
            }
            frames.push(Captured {
                iface,
                ts_ns: rec.wall_ns(setup.mono_to_real),
                len: rec.wire_len,
                data: rec.data,
            });
            ControlFlow::Continue(())
        });
        let ring = share.ring;
        match walk {
            Ok(w) => Ok((
                SourceBatch {
                    source: ring,
                    frames,
                    caught_up_at: (w.stop == Stop::CaughtUp).then_some(looked_at),
                },
                w.records,
                w.stop == Stop::Limit,
            )),
            Err(e) => {
                // Nothing after a corrupt record can be trusted. The probe keeps counting what it can no
                // longer hand over as losses, so the statistics still add up.
                let _ = self.send(vec![SourceBatch {
                    source: ring,
                    frames,
                    caught_up_at: None,
                }]);
                for (iface, g) in self.gone.iter_mut().enumerate() {
                    if !*g {
                        *g = true;
                        let _ = self.p.tx.send(Event::Ended {
                            iface: iface as u32,
                            reason: format!("the eBPF ring buffer cannot be read: {e}"),
                        });
                    }
                }
                Err(Ended::Ring)
            }
        }
    }

    fn send(&self, batches: Vec<SourceBatch>) -> Result<(), Ended> {
        if batches.is_empty() {
            return Ok(());
        }
        self.p
            .tx
            .send(Event::Batch(batches))
            .map_err(|_| Ended::Writer)
    }

    /// Tells the writer about each `-i` interface that no longer exists (or is another one now).
    fn watch_interfaces(&mut self) {
        for (i, name) in self.setup.names.iter().enumerate() {
            let present = self
                .setup
                .index_of
                .iter()
                .any(|(idx, &j)| j as usize == i && sys::ifindex(name) == Some(*idx));
            if let Some(g) = self.gone.get_mut(i)
                && !present
                && !*g
            {
                *g = true;
                let _ = self.p.tx.send(Event::Ended {
                    iface: i as u32,
                    reason: format!("interface {name} disappeared"),
                });
            }
        }
    }
}
