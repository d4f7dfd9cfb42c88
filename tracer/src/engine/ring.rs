//! A reader for the probe's `BPF_MAP_TYPE_RINGBUF` that hands the space it has read back to the kernel once
//! per batch rather than once per record.
//!
//! Why not aya's `RingBuf`: its `next()` stores the consumer position after every record, and the probe's
//! reserve reads that position for every frame (to see whether the ring has room), as does its
//! `bpf_ringbuf_query`. With the reader on another CPU, the cache line holding the position then moves
//! between the two CPUs once per frame, and the probe pays for the move inside its own run time. Here the
//! position is stored once at the end of each [`RingReader::drain`], which the engine bounds to a slice of
//! the ring so that a long backlog still frees space as it goes.
//!
//! The layout is the kernel's (`include/uapi/linux/bpf.h`, `kernel/bpf/ringbuf.c`): the map's fd maps a
//! consumer page (read-write: the consumer position, an `unsigned long`, at its start), then a producer page
//! (the producer position) followed by the data area, which the kernel maps twice in a row so that a record
//! that wraps around the end of the ring is still contiguous. Each record starts with an 8-byte header: a
//! 32-bit length whose top bit says the producer has not committed it yet and whose next bit says it was
//! discarded, then 32 bits the kernel keeps for itself; the record, header included, is rounded up to 8
//! bytes. The walk over the data is a separate function over an [`Area`], so the tests run it on memory laid
//! out the same way.

use std::ffi::c_void;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use aya::maps::MapData;

/// Set in a record's length word while the producer still writes the record.
const BUSY_BIT: u32 = 1 << 31;
/// Set in a record's length word when the producer gave the space up: skip it.
const DISCARD_BIT: u32 = 1 << 30;
/// The kernel's header in front of each record.
const HEADER_LEN: usize = 8;

/// Why the ring buffer cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The kernel did not say the ring's size.
    #[error("reading the ring buffer's size failed")]
    Info(#[source] aya::maps::MapError),
    /// The size is not one the reader can map.
    #[error("the ring buffer's size {0} is not a power of two multiple of the page size")]
    Size(u32),
    /// Mapping the ring failed.
    #[error("mapping the ring buffer into memory failed")]
    Mmap(#[source] std::io::Error),
    /// A record header makes no sense: the reader stops rather than read past it.
    #[error("the ring buffer is corrupt at position {pos}: {what}")]
    Corrupt {
        /// The consumer position of the record.
        pos: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

/// Why a walk over the ring stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every record up to the producer position was read.
    CaughtUp,
    /// The next record is still being written by the producer.
    Busy,
    /// The walk read its byte budget; more records may follow.
    Limit,
    /// The callback asked to stop (after the record it was given, which counts as read).
    Callback,
}

/// What a walk read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// The consumer position after the last record read (discarded ones included).
    pub end: usize,
    /// Records handed to the callback.
    pub records: usize,
    /// Why the walk ended.
    pub stop: Stop,
}

/// The ring's data area: `size` bytes and then the same bytes again, as the kernel maps them.
#[derive(Debug)]
pub struct Area {
    base: *const u8,
    size: usize,
}

impl Area {
    /// # Safety
    /// `base` must be 8-byte aligned and point at `2 * size` readable bytes, the second `size` showing the
    /// same memory as the first, which stay mapped for as long as this `Area` and any slice read through it
    /// live; `size` must be a power of two of at least 8. The bytes of a record whose length word reads
    /// committed (neither busy bit) must not change until the consumer position has been moved past it,
    /// which the kernel guarantees for a ring buffer and [`walk`] does only after the record's slice is
    /// gone.
    pub unsafe fn new(base: *const u8, size: usize) -> Area {
        Area { base, size }
    }

    /// The length word of the record at `offset` (< `size`, a multiple of 8), read with Acquire: the kernel
    /// clears the busy bit with a fully ordered exchange after writing the record, so once the bit reads
    /// clear the record's bytes are visible too.
    fn length_word(&self, offset: usize) -> Option<u32> {
        if !offset.is_multiple_of(8) || offset >= self.size {
            return None;
        }
        // SAFETY: `offset + 4 <= size`, inside the mapping (`Area::new`'s contract), and 4-byte aligned
        // because `base` is 8-byte aligned and `offset` a multiple of 8. The kernel writes this word
        // concurrently, hence the atomic load.
        let word = unsafe { AtomicU32::from_ptr(self.base.add(offset).cast::<u32>().cast_mut()) };
        Some(word.load(Ordering::Acquire))
    }

    /// `len` bytes at `offset`, which may run past `size` into the second mapping.
    fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > 2 * self.size {
            return None;
        }
        // SAFETY: `[offset, end)` lies inside the `2 * size` mapped bytes (checked above), and the caller
        // reads only committed records, which the kernel leaves alone until the consumer position passes
        // them (`Area::new`'s contract).
        Some(unsafe { std::slice::from_raw_parts(self.base.add(offset), len) })
    }
}

/// Reads the records from consumer position `pos` to producer position `prod`, handing each committed,
/// not discarded record's bytes to `f`, until the producer position, a record still being written, `limit`
/// bytes read, or `f` breaks. A length that cannot be right (a record past the producer position or
/// larger than the ring, a producer more than a ring ahead, a misaligned position) is an error: nothing
/// after it can be trusted.
pub fn walk(
    area: &Area,
    mut pos: usize,
    prod: usize,
    limit: usize,
    mut f: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> Result<Walk, RingError> {
    let start = pos;
    let mut records = 0;
    let corrupt = |pos, what| RingError::Corrupt { pos, what };
    // The positions only grow (wrapping at 2^64, or 2^32 on 32-bit hosts), so distances are wrapping
    // differences.
    if prod.wrapping_sub(pos) > area.size {
        return Err(corrupt(
            pos,
            "the producer is more than the ring's size ahead",
        ));
    }
    if !pos.is_multiple_of(8) {
        return Err(corrupt(pos, "the consumer position is not 8-byte aligned"));
    }
    let mask = area.size - 1;
    loop {
        let waiting = prod.wrapping_sub(pos);
        if waiting == 0 {
            return Ok(Walk {
                end: pos,
                records,
                stop: Stop::CaughtUp,
            });
        }
        if pos.wrapping_sub(start) >= limit {
            return Ok(Walk {
                end: pos,
                records,
                stop: Stop::Limit,
            });
        }
        let offset = pos & mask;
        let word = area
            .length_word(offset)
            .ok_or_else(|| corrupt(pos, "the record header is outside the ring"))?;
        if word & BUSY_BIT != 0 {
            return Ok(Walk {
                end: pos,
                records,
                stop: Stop::Busy,
            });
        }
        let len = (word & !(BUSY_BIT | DISCARD_BIT)) as usize;
        let total = (len + HEADER_LEN).next_multiple_of(8);
        // The producer reserves a record whole before it moves its position past it, so a committed record
        // ends at or before the producer position; this also keeps it shorter than the ring.
        if total > waiting {
            return Err(corrupt(pos, "a record runs past the producer position"));
        }
        let mut stop = false;
        if word & DISCARD_BIT == 0 {
            let bytes = area
                .bytes(offset + HEADER_LEN, len)
                .ok_or_else(|| corrupt(pos, "a record runs past the mapped ring"))?;
            records += 1;
            stop = f(bytes).is_break();
        }
        pos = pos.wrapping_add(total);
        if stop {
            return Ok(Walk {
                end: pos,
                records,
                stop: Stop::Callback,
            });
        }
    }
}

/// One `mmap` of the map's fd, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value alone; nothing about it is tied to the
// thread that created it.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize, prot: i32, offset: usize) -> Result<Mapping, RingError> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| RingError::Mmap(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
        // SAFETY: a new shared mapping chosen by the kernel (no address hint), of a map fd that stays open
        // for the call; the result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::Mmap(std::io::Error::last_os_error()));
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no slice into it outlives `self` (the reader's
        // slices borrow it only for the length of a callback).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The consumer side of the probe's ring buffer.
#[derive(Debug)]
pub struct RingReader {
    /// Keeps the map (and so the fd and the kernel's memory) alive while mapped.
    map: MapData,
    /// The consumer page, read-write.
    consumer: Mapping,
    /// The producer page, then the data area twice, read-only.
    producer: Mapping,
    page: usize,
    size: usize,
    /// The consumer position as of the last drain (this reader is the only consumer).
    pos: usize,
}

impl RingReader {
    /// Maps a ring-buffer map for reading.
    pub fn new(map: MapData) -> Result<RingReader, RingError> {
        let max_entries = map.info().map_err(RingError::Info)?.max_entries();
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let size = max_entries as usize;
        if !size.is_power_of_two() || size < page {
            return Err(RingError::Size(max_entries));
        }
        let fd = map.fd().as_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let len = size
            .checked_mul(2)
            .and_then(|d| d.checked_add(page))
            .ok_or(RingError::Size(max_entries))?;
        let producer = Mapping::new(fd, len, libc::PROT_READ, page)?;
        let mut reader = RingReader {
            map,
            consumer,
            producer,
            page,
            size,
            pos: 0,
        };
        reader.pos = reader.consumer_pos().load(Ordering::Acquire);
        Ok(reader)
    }

    /// The ring's data size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page is mapped read-write, page-aligned, and starts with the kernel's
        // `unsigned long consumer_pos`; the kernel reads it concurrently, hence the atomic.
        unsafe { AtomicUsize::from_ptr(self.consumer.ptr.cast::<usize>()) }
    }

    fn producer_pos(&self) -> usize {
        // SAFETY: as above for the producer page, mapped read-only (only loads are made). Acquire pairs
        // with the kernel's release store of the position after it wrote the new record's header.
        let pos = unsafe { AtomicUsize::from_ptr(self.producer.ptr.cast::<usize>()) };
        pos.load(Ordering::Acquire)
    }

    /// Reads what the producer has committed, up to `limit` bytes (or one record more, when one is larger),
    /// handing each record to `f`, then gives the space back to the kernel with one store of the consumer
    /// position. After an error nothing more should be read: the consumer position stays at the record
    /// that could not be read.
    pub fn drain(
        &mut self,
        limit: usize,
        f: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<Walk, RingError> {
        let prod = self.producer_pos();
        // SAFETY: the data area starts one page into the producer mapping (page-aligned, so 8-byte
        // aligned) and is mapped twice, `2 * size` bytes that live as long as `self`; the kernel does not
        // touch committed records until the consumer position passes them, which the store below does only
        // after `walk` has returned and its slices are gone.
        let area = unsafe { Area::new(self.producer.ptr.cast::<u8>().add(self.page), self.size) };
        let result = walk(&area, self.pos, prod, limit, f);
        // The records before a corrupt one were handed over: their space goes back too.
        let end = match &result {
            Ok(w) => w.end,
            Err(RingError::Corrupt { pos, .. }) => *pos,
            Err(_) => self.pos,
        };
        if end != self.pos {
            self.pos = end;
            // Release: the reads of the records happen before the kernel may reuse their space.
            self.consumer_pos().store(end, Ordering::Release);
        }
        result
    }
}

impl AsFd for RingReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl AsRawFd for RingReader {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory laid out like a mapped ring: `size` bytes and their mirror, 8-byte aligned.
    struct FakeRing {
        words: Vec<u64>,
        size: usize,
        prod: usize,
    }

    impl FakeRing {
        fn new(size: usize) -> FakeRing {
            FakeRing {
                words: vec![0; 2 * size / 8],
                size,
                prod: 0,
            }
        }

        fn put(&mut self, pos: usize, bytes: &[u8]) {
            let size = self.size;
            let mem = bytemuck(&mut self.words);
            for (i, &b) in bytes.iter().enumerate() {
                let at = (pos + i) & (size - 1);
                mem[at] = b;
                mem[at + size] = b;
            }
        }

        /// Appends a record as the kernel does: header word, then the data, the whole rounded up to 8.
        fn push(&mut self, data: &[u8], flags: u32) -> usize {
            let pos = self.prod;
            let word = data.len() as u32 | flags;
            let mut header = word.to_ne_bytes().to_vec();
            header.extend_from_slice(&[0; 4]);
            self.put(pos, &header);
            self.put(pos + HEADER_LEN, data);
            self.prod = pos + (data.len() + HEADER_LEN).next_multiple_of(8);
            pos
        }

        fn area(&self) -> Area {
            // SAFETY: `words` holds `2 * size` bytes, 8-byte aligned, with the second half mirroring the
            // first (`put` writes both), and nothing writes them while the area is in use.
            unsafe { Area::new(self.words.as_ptr().cast::<u8>(), self.size) }
        }
    }

    fn bytemuck(words: &mut [u64]) -> &mut [u8] {
        let len = words.len() * 8;
        // SAFETY: u64 has no padding and any byte pattern is a valid u64; the slice covers exactly the
        // words' memory and borrows them mutably.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
    }

    fn collect(
        ring: &FakeRing,
        pos: usize,
        limit: usize,
    ) -> (Result<Walk, RingError>, Vec<Vec<u8>>) {
        let mut got = Vec::new();
        let walk = walk(&ring.area(), pos, ring.prod, limit, |b| {
            got.push(b.to_vec());
            ControlFlow::Continue(())
        });
        (walk, got)
    }

    #[test]
    fn records_are_read_in_order_and_discarded_ones_skipped() {
        let mut ring = FakeRing::new(256);
        ring.push(b"first", 0);
        ring.push(&[7; 16], DISCARD_BIT);
        ring.push(b"third record", 0);
        let (walk, got) = collect(&ring, 0, usize::MAX);
        let walk = walk.unwrap();
        assert_eq!(got, vec![b"first".to_vec(), b"third record".to_vec()]);
        // 8 + 5 -> 16, 8 + 16 = 24, 8 + 12 -> 24.
        assert_eq!(walk.end, 16 + 24 + 24);
        assert_eq!((walk.records, walk.stop), (2, Stop::CaughtUp));
    }

    #[test]
    fn a_record_wrapping_the_end_is_read_whole_through_the_mirror() {
        let mut ring = FakeRing::new(64);
        // Fill to 48 bytes, read it, then a 24-byte record that starts at 48 and wraps to 8.
        ring.push(&[1; 16], 0);
        ring.push(&[2; 16], 0);
        let first = collect(&ring, 0, usize::MAX).0.unwrap();
        assert_eq!(first.end, 48);
        let data: Vec<u8> = (0..24).collect();
        ring.push(&data, 0);
        let (walk, got) = collect(&ring, first.end, usize::MAX);
        assert_eq!(got, vec![data]);
        assert_eq!(walk.unwrap().end, 48 + 32);
    }

    #[test]
    fn a_busy_record_stops_the_walk_before_it() {
        let mut ring = FakeRing::new(256);
        ring.push(b"done", 0);
        let busy = ring.push(b"being written", BUSY_BIT);
        ring.push(b"after", 0);
        let (walk, got) = collect(&ring, 0, usize::MAX);
        assert_eq!(got, vec![b"done".to_vec()]);
        let walk = walk.unwrap();
        assert_eq!((walk.end, walk.stop), (busy, Stop::Busy));
    }

    #[test]
    fn the_limit_and_the_callback_stop_at_record_boundaries() {
        let mut ring = FakeRing::new(256);
        for i in 0..6u8 {
            ring.push(&[i; 8], 0);
        }
        // Each record takes 16 bytes: a 20-byte budget reads two (the second crosses it).
        let (walk, got) = collect(&ring, 0, 20);
        let walk = walk.unwrap();
        assert_eq!((got.len(), walk.end, walk.stop), (2, 32, Stop::Limit));
        let mut seen = 0;
        let walk = super::walk(&ring.area(), walk.end, ring.prod, usize::MAX, |_| {
            seen += 1;
            if seen == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        // The record the callback stopped at counts as read.
        assert_eq!((walk.records, walk.end, walk.stop), (3, 80, Stop::Callback));
    }

    #[test]
    fn impossible_lengths_are_errors_not_panics() {
        // A length that runs past the producer position.
        let mut ring = FakeRing::new(256);
        ring.push(b"ok", 0);
        let bad = ring.push(&[0; 8], 0);
        ring.put(bad, &200u32.to_ne_bytes());
        let (walk, got) = collect(&ring, 0, usize::MAX);
        assert_eq!(got.len(), 1);
        assert!(
            matches!(walk, Err(RingError::Corrupt { pos, .. }) if pos == bad),
            "{walk:?}"
        );
        // The largest length the word can hold.
        ring.put(bad, &(!(BUSY_BIT | DISCARD_BIT)).to_ne_bytes());
        assert!(matches!(
            collect(&ring, bad, usize::MAX).0,
            Err(RingError::Corrupt { .. })
        ));
        // A producer more than a ring ahead, and a misaligned consumer.
        let area = ring.area();
        let never = |_: &[u8]| -> ControlFlow<()> { panic!("no record should be read") };
        assert!(walk_err(&area, 0, 257, never));
        assert!(walk_err(&area, 4, 24, never));
    }

    fn walk_err(area: &Area, pos: usize, prod: usize, f: fn(&[u8]) -> ControlFlow<()>) -> bool {
        matches!(
            walk(area, pos, prod, usize::MAX, f),
            Err(RingError::Corrupt { .. })
        )
    }

    #[test]
    fn positions_past_the_ring_size_wrap_with_the_mask() {
        // A consumer that has gone round the ring many times reads at its position modulo the size.
        let mut ring = FakeRing::new(64);
        ring.prod = 64 * 1000 + 40;
        let at = ring.push(b"late", 0);
        let (walk, got) = collect(&ring, at, usize::MAX);
        assert_eq!(got, vec![b"late".to_vec()]);
        assert_eq!(walk.unwrap().end, at + 16);
    }
}
