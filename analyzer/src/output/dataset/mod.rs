//! `decode --parquet`: every frame as one row of a columnar dataset, for engines that read many collectors'
//! captures at once (Spark, see docs/spark.md), where no single machine could merge them.
//!
//! The writer streams in bounded memory and splits the work over two threads. The decoding thread fills
//! plain column buffers for a page's worth of rows ([`PAGE_ROWS`]) and hands them over; the encoding thread
//! turns each column of them into one Parquet data page while the next page is being decoded. Pages gather
//! in memory, encoded and compressed (a few bytes a row), until the row group reaches
//! [`DEFAULT_GROUP_BYTES`] before compression, the size Spark's readers and planners expect; then the group
//! is written out and its pages dropped. So memory
//! holds one encoded row group plus a few pages of buffers, whatever the capture's length.
//!
//! The pages are written through the Parquet layer under polars with an encoding chosen per column rather
//! than tried: integers DELTA_BINARY_PACKED (counters and times cost a few bits a row, fields that rarely
//! change almost nothing), text as a dictionary built while the rows arrive (addresses, taps and kinds repeat
//! a handful of values, so a row costs a hash lookup and a few bits, and no string is made twice), booleans
//! PLAIN (one bit each). Pages are then compressed with Snappy, Spark's default codec, which still finds
//! a fivefold saving in what the encodings leave (per-flow patterns in PSNs, ports and times) for little
//! time. Readers see the same columns and types as ever: encodings are not part of the schema.
//!
//! A file holds a few row groups and is then closed under its final name, so a reader listing the directory
//! meanwhile sees only whole files (Spark and Hive pass over names that start with a dot).
//!
//! Columns are signed integers, booleans and strings only: Spark reads Parquet's unsigned 32-bit integers as
//! 64-bit ones and its unsigned 64-bit integers as decimals, so signed types one size up keep every engine's
//! types plain. The one exception is the RETH virtual address, a full 64-bit value.
//!
//! Schema changes bump [`SCHEMA_VERSION`], kept both in a column (Spark reads columns, not file metadata) and
//! in the file's key-value metadata (`rocetrace.schema_version`), and docs/spark.md lists every column.
//!
//! This module is the decoding thread's side ([`DatasetWriter`]); `rows` holds the batches it fills,
//! `encoder` is the encoding thread, which makes the `pages` in the `encoding`s, in the order of
//! `schema`, and writes its row groups through `parts`, the dataset's files.

mod encoder;
mod encoding;
mod pages;
mod parts;
mod rows;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use polars_parquet::parquet::error::ParquetError;
use roce_capture::Capture;
use roce_core::decode::Frame;
use thiserror::Error;

use super::tables::{self, TableError};
use encoder::{Encoder, Message};
pub use parts::{DEFAULT_GROUP_BYTES, DEFAULT_GROUPS_PER_FILE, Layout};
pub use rows::PAGE_ROWS;
use rows::Rows;
pub use schema::{SCHEMA_VERSION, SCHEMA_VERSION_KEY};

/// Why a dataset could not be written.
#[derive(Debug, Error)]
pub enum DatasetError {
    /// Writing a file failed (the same errors as the tables').
    #[error(transparent)]
    Write(#[from] TableError),
    /// The Parquet layer refused a page or the footer.
    #[error("writing {path}")]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// What the Parquet writer said.
        source: ParquetError,
    },
    /// The directory already holds part files: adding to them would count their frames twice.
    #[error(
        "{path} already holds part files of a dataset; remove them or write elsewhere (another --collector \
         name, say): adding to them would count their frames twice"
    )]
    NotEmpty {
        /// The directory, so the user knows what to clear.
        path: PathBuf,
    },
    /// The encoding thread stopped without saying why (it panicked).
    #[error("the dataset writer's encoding thread stopped unexpectedly while writing {path}")]
    Encoder {
        /// The dataset's directory.
        path: PathBuf,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| {
        DatasetError::Write(TableError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn parquet_error(path: &Path) -> impl FnOnce(ParquetError) -> DatasetError + '_ {
    move |source| DatasetError::Parquet {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the frames of one capture as `part-NNNNN.parquet` files into a directory, encoding on a second
/// thread (or, asked for one thread, on the decoding one).
#[derive(Debug)]
pub struct DatasetWriter {
    dir: PathBuf,
    rows: Box<Rows>,
    batch: usize,
    group_rows: usize,
    in_group: usize,
    taps_sent: usize,
    to_encoder: Option<SyncSender<Message>>,
    recycled: Receiver<Box<Rows>>,
    encoder: Option<JoinHandle<Result<u64, DatasetError>>>,
    /// The encoder when it runs on the decoding thread; then `to_encoder` and `encoder` are `None`.
    inline: Option<Box<Encoder>>,
}

impl DatasetWriter {
    /// Creates `dir` (and its parents); refuses a directory that already holds part files. On `threads` from
    /// two on, a thread encodes while the caller's decodes; on one, the caller's thread does both. The files
    /// are the same bytes either way.
    pub fn create(dir: &Path, layout: Layout, threads: usize) -> Result<Self, DatasetError> {
        tables::create_dir(dir)?;
        for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
            let name = entry.map_err(io_error(dir))?.file_name();
            if name.to_string_lossy().starts_with("part-") {
                return Err(DatasetError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
        }
        let layout = Layout {
            group_rows: layout.group_rows.map(|n| n.max(1)),
            group_bytes: layout.group_bytes.max(1),
            groups_per_file: layout.groups_per_file.max(1),
        };
        let group_rows = layout.group_rows.unwrap_or(usize::MAX);
        let batch = PAGE_ROWS.min(group_rows);
        let encoder = Encoder::new(dir.to_path_buf(), layout)?;
        let (back, recycled) = std::sync::mpsc::channel();
        let mut writer = DatasetWriter {
            dir: dir.to_path_buf(),
            rows: Box::new(Rows::with_capacity(batch)),
            batch,
            group_rows,
            in_group: 0,
            taps_sent: 0,
            to_encoder: None,
            recycled,
            encoder: None,
            inline: None,
        };
        if threads <= 1 {
            writer.inline = Some(Box::new(encoder));
            return Ok(writer);
        }
        // One batch queued while one is encoded and one filled: the decoding thread waits rather than
        // letting buffers pile up when encoding is the slower side.
        let (to_encoder, from_decoder) = sync_channel(1);
        let handle = std::thread::Builder::new()
            .name("parquet-encoder".into())
            .spawn(move || encoder.run(from_decoder, back))
            .map_err(io_error(dir))?;
        writer.to_encoder = Some(to_encoder);
        writer.encoder = Some(handle);
        Ok(writer)
    }

    /// Adds a frame; returns true when a batch is full and [`DatasetWriter::flush`] is due (the frame
    /// borrows the capture that `flush` reads tap names from, so the caller calls it once the frame is gone).
    #[inline]
    pub fn push(&mut self, f: &Frame<'_>) -> bool {
        self.rows.push(f);
        let n = self.rows.len();
        n >= self.batch || self.in_group + n >= self.group_rows
    }

    /// Hands the buffered rows to the encoder, naming taps as `capture` does.
    pub fn flush(&mut self, capture: &Capture) -> Result<(), DatasetError> {
        if self.rows.len() == 0 {
            return Ok(());
        }
        self.in_group += self.rows.len();
        let end_group = self.in_group >= self.group_rows;
        if end_group {
            self.in_group = 0;
        }
        let taps = capture.taps();
        let new_taps = taps
            .get(self.taps_sent..)
            .unwrap_or_default()
            .iter()
            .map(|t| t.name.clone())
            .collect();
        self.taps_sent = self.taps_sent.max(taps.len());
        if let Some(encoder) = &mut self.inline {
            return encoder.take(&mut self.rows, new_taps, end_group);
        }
        let fresh = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Box::new(Rows::with_capacity(self.batch)));
        let rows = std::mem::replace(&mut self.rows, fresh);
        self.send(Message::Rows {
            rows,
            new_taps,
            end_group,
        })
    }

    fn send(&mut self, message: Message) -> Result<(), DatasetError> {
        let sent = self
            .to_encoder
            .as_ref()
            .is_some_and(|tx| tx.send(message).is_ok());
        if sent {
            return Ok(());
        }
        // The encoding thread stopped: its error says why.
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(DatasetError::Encoder {
                path: self.dir.clone(),
            }),
        }
    }

    fn join(&mut self) -> Result<u64, DatasetError> {
        self.to_encoder = None;
        match self.encoder.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            _ => Err(DatasetError::Encoder {
                path: self.dir.clone(),
            }),
        }
    }

    /// Writes what is left, closes the last file and returns the frames written.
    pub fn finish(mut self, capture: &Capture) -> Result<u64, DatasetError> {
        self.flush(capture)?;
        if let Some(encoder) = self.inline.take() {
            return encoder.finish();
        }
        self.send(Message::Finish)?;
        self.join()
    }
}
