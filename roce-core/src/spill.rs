//! Append-only logs of many streams (a flow's CE marks, a CNP stream's arrivals) that live on disk but for
//! their newest few hundred bytes, so that a pass which must keep every event until the end of the capture
//! holds memory in proportion to its streams, not to its events.
//!
//! Every log appends whole entries to a small tail in memory; a tail past [`BLOCK_BYTES`] becomes a block of
//! one shared temporary file, and the log keeps only the offset of its newest block (each block names the one
//! before it, so a log's blocks form a chain read back oldest first). Blocks are gathered in memory and written
//! [`WRITE_BYTES`] at a time. The file is made on the first write, in the system's temporary directory
//! (`TMPDIR`), and is unlinked from the start: nothing is left behind, whatever way the process ends.
//!
//! A file that cannot be made or written costs no data: the blocks not written stay in memory, and the logs
//! grow in memory from then on, as they would without spilling. A block that cannot be read back ends its log there, and the error
//! waits in [`Spill::take_error`] so the caller can fail instead of reporting on part of the events.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, PoisonError};

/// The tail a log holds before it becomes a block: a few dozen entries, so thousands of logs hold a few MB
/// between them, and reading a log back costs a read per few dozen entries.
pub const BLOCK_BYTES: usize = 256;

/// Blocks gathered before they are written to the file in one call.
pub const WRITE_BYTES: usize = 1 << 16;

/// A block's header: the offset of the log's previous block plus one (0: none), then the block's length.
const HEADER: usize = 12;

/// The store every [`SpillLog`] of a pass writes its blocks to: a temporary file and the blocks not yet
/// written (or that could not be).
#[derive(Debug, Default)]
pub struct Spill {
    file: Option<File>,
    /// Bytes in the file; a block at or past this offset is in `pending`.
    written: u64,
    /// Blocks after `written`, in order.
    pending: Vec<u8>,
    /// The file could not be made or written: every block stays in `pending`.
    memory_only: bool,
    /// The first failure to read a block back (behind a lock so that threads may read logs side by side).
    error: Mutex<Option<io::Error>>,
}

impl Spill {
    /// A store that keeps every log whole in memory, as one growing tail (where no file may be made, and to
    /// check the blocks and the file against).
    pub fn in_memory() -> Spill {
        Spill {
            memory_only: true,
            ..Spill::default()
        }
    }

    /// Bytes of blocks in the file, and those held in memory.
    pub fn sizes(&self) -> (u64, usize) {
        (self.written, self.pending.len())
    }

    /// Appends one block whose predecessor is `prev`; its offset.
    fn append(&mut self, prev: Option<u64>, bytes: &[u8]) -> u64 {
        let at = self.written + self.pending.len() as u64;
        let prev = prev.map_or(0, |p| p + 1);
        self.pending.extend_from_slice(&prev.to_le_bytes());
        // A tail is a few hundred bytes: its length fits.
        self.pending
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= WRITE_BYTES && !self.memory_only {
            self.write_pending();
        }
        at
    }

    fn write_pending(&mut self) {
        if self.file.is_none() {
            match tempfile::tempfile() {
                Ok(f) => self.file = Some(f),
                Err(_) => {
                    self.memory_only = true;
                    return;
                }
            }
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        // Always appended at `written`: a failed write may have moved the position.
        let ok = file
            .seek(SeekFrom::Start(self.written))
            .and_then(|_| file.write_all(&self.pending));
        match ok {
            Ok(()) => {
                self.written += self.pending.len() as u64;
                self.pending.clear();
            }
            // Disk full, say: what was not written stays in memory, and so does all that follows.
            Err(_) => self.memory_only = true,
        }
    }

    /// `len` bytes at `at`, from the file or from memory.
    fn read(&self, at: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        if at >= self.written {
            let from = usize::try_from(at - self.written).map_err(io::Error::other)?;
            let bytes = from
                .checked_add(len)
                .and_then(|to| self.pending.get(from..to))
                .ok_or_else(|| io::Error::other("spilled block past the end of the store"))?;
            out.extend_from_slice(bytes);
            return Ok(());
        }
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| io::Error::other("spilled block without its file"))?;
        out.resize(len, 0);
        // At an offset, not through the file's position, which threads reading side by side would share.
        file.read_exact_at(out, at)
    }

    fn fail(&self, e: io::Error) {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(e);
    }

    /// The first failure to read a block back since the last call: a log read after it ended early.
    pub fn take_error(&self) -> Option<io::Error> {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// One stream's log: its newest bytes, and where its older blocks are in the [`Spill`].
#[derive(Debug, Default)]
pub struct SpillLog {
    tail: Vec<u8>,
    newest: Option<u64>,
}

impl SpillLog {
    /// Where the next entry goes; call [`SpillLog::entry_done`] once it is whole (entries are never split
    /// between blocks, so each block can be written as it is).
    pub fn tail(&mut self) -> &mut Vec<u8> {
        &mut self.tail
    }

    /// Moves the tail to the store once it holds a block's worth (unless the store keeps logs in memory: then
    /// the tail grows, after the blocks it already has).
    pub fn entry_done(&mut self, spill: &mut Spill) {
        if self.tail.len() >= BLOCK_BYTES && !spill.memory_only {
            self.newest = Some(spill.append(self.newest, &self.tail));
            self.tail.clear();
        }
    }

    /// Every byte of the log, oldest first. A block that cannot be read ends it (see [`Spill::take_error`]).
    pub fn bytes<'a>(&'a self, spill: &'a Spill) -> LogBytes<'a> {
        let mut blocks = Vec::new();
        let mut header = Vec::new();
        let mut at = self.newest;
        while let Some(off) = at {
            if let Err(e) = spill.read(off, HEADER, &mut header) {
                spill.fail(e);
                // The chain is broken: none of the older blocks, and not the tail either (the entries
                // are deltas, and would read wrong without what came before).
                return LogBytes {
                    spill,
                    blocks: Vec::new(),
                    block: Vec::new(),
                    at: 0,
                    tail: &[],
                };
            }
            let prev = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
            let len = u32::from_le_bytes(header[8..12].try_into().unwrap_or_default());
            blocks.push((off + HEADER as u64, len as usize));
            at = prev.checked_sub(1);
        }
        LogBytes {
            spill,
            blocks,
            block: Vec::new(),
            at: 0,
            tail: &self.tail,
        }
    }
}

/// The bytes of one [`SpillLog`], read back a block at a time.
#[derive(Debug)]
pub struct LogBytes<'a> {
    spill: &'a Spill,
    /// Blocks still to read, newest first (popped oldest first).
    blocks: Vec<(u64, usize)>,
    block: Vec<u8>,
    at: usize,
    tail: &'a [u8],
}

impl Iterator for LogBytes<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        loop {
            if let Some(&b) = self.block.get(self.at) {
                self.at += 1;
                return Some(b);
            }
            self.at = 0;
            self.block.clear();
            match self.blocks.pop() {
                Some((off, len)) => {
                    if let Err(e) = self.spill.read(off, len, &mut self.block) {
                        self.spill.fail(e);
                        self.blocks.clear();
                        self.block.clear();
                        self.tail = &[];
                        return None;
                    }
                }
                None => {
                    let (&b, rest) = self.tail.split_first()?;
                    self.tail = rest;
                    return Some(b);
                }
            }
        }
    }
}

/// Appends `v` as a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The next LEB128 varint of `bytes`; `None` at their end.
pub fn next_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = bytes.next()?;
        if shift < 64 {
            v |= u64::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b < 0x80 {
            return Some(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs of varints pushed interleaved, as a pass pushes them, in a store of either kind.
    fn round_trip(spill: &mut Spill, logs: usize, entries: u64) -> Vec<Vec<u64>> {
        let mut out: Vec<SpillLog> = (0..logs).map(|_| SpillLog::default()).collect();
        let mut given = vec![Vec::new(); logs];
        for i in 0..entries {
            let k = (i * 7 + i / 3) as usize % logs;
            // Small and huge values, so entries take 1 to 10 bytes.
            let v = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64);
            put_varint(out[k].tail(), v);
            out[k].entry_done(spill);
            given[k].push(v);
        }
        for (log, want) in out.iter().zip(&given) {
            let mut bytes = log.bytes(spill);
            let got: Vec<u64> = std::iter::from_fn(|| next_varint(&mut bytes)).collect();
            assert_eq!(&got, want);
        }
        assert!(spill.take_error().is_none());
        given
    }

    #[test]
    fn logs_read_back_what_was_pushed_from_the_file_and_from_memory() {
        let mut file = Spill::default();
        round_trip(&mut file, 37, 200_000);
        let (on_disk, held) = file.sizes();
        assert!(on_disk > 0, "a spill this large is written to its file");
        assert!(held < WRITE_BYTES + BLOCK_BYTES + 64);
        let mut memory = Spill::in_memory();
        round_trip(&mut memory, 37, 200_000);
        assert_eq!(memory.sizes().0, 0);
    }

    #[test]
    fn an_empty_log_and_a_log_shorter_than_a_block_read_back() {
        let mut spill = Spill::default();
        let empty = SpillLog::default();
        assert_eq!(empty.bytes(&spill).count(), 0);
        let mut short = SpillLog::default();
        put_varint(short.tail(), 300);
        short.entry_done(&mut spill);
        let mut bytes = short.bytes(&spill);
        assert_eq!(next_varint(&mut bytes), Some(300));
        assert_eq!(next_varint(&mut bytes), None);
    }

    #[test]
    fn a_block_that_cannot_be_read_ends_the_log_and_says_so() {
        // Too few blocks to be written: they wait in memory, where they can be lost on purpose.
        let mut spill = Spill::default();
        let mut log = SpillLog::default();
        for v in 0..1_000u64 {
            put_varint(log.tail(), v);
            log.entry_done(&mut spill);
        }
        assert!(spill.sizes().1 > 2 * BLOCK_BYTES);
        // The store loses its blocks (as a file that can no longer be read would).
        spill.pending.truncate(HEADER + 10);
        let read: Vec<u8> = log.bytes(&spill).collect();
        assert!(read.len() < 1_000);
        assert!(spill.take_error().is_some());
    }
}
