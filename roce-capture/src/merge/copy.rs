//! What a copy of the capture needs beyond its records: every block of the files in its place, and each
//! record's block as stored. `roce-analyzer annotate` writes the capture back with comments on its packets
//! this way (through [`crate::rewrite`]), reading the inputs a second time after its analysis.
//!
//! Which blocks go before which record follows from the merge: a file's blocks between two of its records
//! belong before the second, and what a file holds after its last record belongs after it. The merge hands
//! out one file's record at a time, so those are the blocks to write before it; the other files' readers
//! hold theirs until their own records come.

use super::{Capture, RawBlock, Record, SourceError};
use crate::read::PacketBlock;

/// A block of one of the files other than a packet or an interface description, kept for a copy
/// ([`Capture::take_blocks`]).
#[derive(Debug, Clone)]
pub struct KeptBlock {
    /// The index in [`Capture::files`] of the file it came from.
    pub file: usize,
    /// The block as stored.
    pub block: RawBlock,
}

impl Capture {
    /// [`Capture::reopen`] for a copy of the capture: every block of every file is kept, to be written back
    /// around the records ([`Capture::take_blocks`], [`Capture::current`], [`super::Tap::block`]).
    pub fn reopen_to_copy(&self) -> Option<Result<Capture, SourceError>> {
        self.reopen_with(true)
    }

    /// The record [`Capture::next_record`] returned last, again (it stays current until the next call): the
    /// index in [`Capture::files`] of its file, its interface in that file (over all the file's sections),
    /// the record, and its block as stored when the capture was opened to be copied and the file is pcapng.
    pub fn current(&self) -> Option<(usize, u32, Record<'_>, Option<PacketBlock<'_>>)> {
        let i = self.handed?;
        let reader = self.files[i].reader.as_ref()?;
        let interface = reader.current()?.iface;
        let rec = self.record_of(i)?;
        Some((i, interface, rec, reader.current_block()))
    }

    /// For a copy: the blocks other than packets and interface descriptions that belong before the record
    /// [`Capture::next_record`] returned last (those its file holds between its previous record and it),
    /// after the blocks that files which have ended since the last call held after their last record.
    /// Once `next_record` has returned `None`, every block left. Empty unless the capture was opened with
    /// [`Capture::reopen_to_copy`].
    pub fn take_blocks(&mut self) -> Vec<KeptBlock> {
        let mut out = std::mem::take(&mut self.kept);
        if let Some(i) = self.handed
            && let Some(reader) = self.files[i].reader.as_mut()
        {
            out.extend(
                reader
                    .take_blocks()
                    .into_iter()
                    .map(|block| KeptBlock { file: i, block }),
            );
        }
        out
    }

    /// The tap of interface `iface` (an index over all the file's sections) of file `file`, once the merge
    /// has given it one.
    pub fn tap_of(&self, file: usize, iface: u32) -> Option<u32> {
        self.files.get(file)?.tap_of.get(iface as usize).copied()
    }

    /// The paths of the input files (standard input has none), so that a copy can refuse to write over
    /// one of them.
    pub fn input_paths(&self) -> impl Iterator<Item = &std::path::Path> {
        self.files.iter().filter_map(|f| match &f.input {
            crate::inputs::Input::File { path, .. } => Some(path.as_path()),
            crate::inputs::Input::Stdin => None,
        })
    }

    /// Blocks of the files that have ended that were too long to keep for a copy (over 64 MiB each).
    pub fn blocks_too_large(&self) -> u64 {
        self.too_large
    }
}
