//! The dataset's files: `part-NNNNN.parquet` in the dataset's directory (a Hive-style `collector=NAME`
//! partition when the command line names one), each filled under a hidden temporary name and renamed when
//! closed, so that a reader listing the directory meanwhile sees only whole files.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use polars_parquet::parquet::error::ParquetError;
use polars_parquet::parquet::metadata::{KeyValue, SchemaDescriptor};
use polars_parquet::parquet::page::CompressedPage;
use polars_parquet::parquet::write::{
    DynIter, DynStreamingIterator, FileWriter, Version, WriteOptions,
};
use polars_parquet::write::fallible_streaming_iterator;

use super::schema::{SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use super::{DatasetError, io_error, parquet_error};

/// Encoded bytes (before compression) at which a row group is closed: 128 MiB, Spark's (and parquet-mr's)
/// block size, so that a group is a task's worth of input. At about 20 bytes a row that is several million
/// frames.
pub const DEFAULT_GROUP_BYTES: usize = 128 << 20;
/// Row groups per file before the next `part-NNNNN.parquet` starts: files of about half a gigabyte, which
/// object stores and Spark's split planning handle well.
pub const DEFAULT_GROUPS_PER_FILE: usize = 4;

/// The file being filled, under its temporary name until it is closed.
struct Part {
    writer: FileWriter<BufWriter<File>>,
    temp: PathBuf,
    path: PathBuf,
    groups: usize,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("path", &self.path)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

/// Sizes of the dataset's row groups and files.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Rows at most per row group, when a reader wants smaller groups than the byte size gives (tests, or
    /// a collector short of memory: the encoded group is held until it is written).
    pub group_rows: Option<usize>,
    /// Encoded bytes (before compression) at which a row group is closed.
    pub group_bytes: usize,
    /// Row groups per part file, which sizes the files for object stores and Spark.
    pub groups_per_file: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            group_rows: None,
            group_bytes: DEFAULT_GROUP_BYTES,
            groups_per_file: DEFAULT_GROUPS_PER_FILE,
        }
    }
}

/// The part files of one dataset directory: the one being filled, and how many were started.
#[derive(Debug)]
pub(super) struct Parts {
    dir: PathBuf,
    schema: SchemaDescriptor,
    groups_per_file: usize,
    open: Option<Part>,
    started: usize,
}

impl Parts {
    pub(super) fn new(dir: PathBuf, schema: SchemaDescriptor, groups_per_file: usize) -> Self {
        Parts {
            dir,
            schema,
            groups_per_file,
            open: None,
            started: 0,
        }
    }

    /// Writes one row group of `rows` rows, a list of pages per column, into the file being filled, and
    /// closes that file when it holds its share of groups.
    pub(super) fn write_group(
        &mut self,
        rows: u64,
        columns: &[Vec<CompressedPage>],
    ) -> Result<(), DatasetError> {
        let groups_per_file = self.groups_per_file;
        let part = self.current()?;
        let group = DynIter::new(columns.iter().map(|pages| {
            Ok(DynStreamingIterator::new(
                fallible_streaming_iterator::convert(pages.iter().map(Ok::<_, ParquetError>)),
            ))
        }));
        part.writer
            .write(rows, group)
            .map_err(parquet_error(&part.temp))?;
        part.groups += 1;
        if part.groups >= groups_per_file {
            self.close()?;
        }
        Ok(())
    }

    /// Closes the last file. A dataset without rows still gets one file, with the schema and no rows, so
    /// a reader of the directory finds the columns.
    pub(super) fn finish(mut self) -> Result<(), DatasetError> {
        if self.started == 0 {
            self.current()?;
        }
        self.close()
    }

    /// The file being filled, opened when the first group of it is written.
    fn current(&mut self) -> Result<&mut Part, DatasetError> {
        // Taken and put back: returning a borrow of the open part from inside `if let` would keep
        // `self.open` borrowed on the path that opens a new one.
        if let Some(part) = self.open.take() {
            return Ok(self.open.insert(part));
        }
        let name = format!("part-{:05}.parquet", self.started);
        self.started += 1;
        let path = self.dir.join(&name);
        let temp = self.dir.join(format!(".{name}.inprogress"));
        let file = File::create(&temp).map_err(io_error(&temp))?;
        let writer = FileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            self.schema.clone(),
            WriteOptions {
                write_statistics: false,
                version: Version::V1,
            },
            Some(format!("rocetrace {}", env!("CARGO_PKG_VERSION"))),
        );
        Ok(self.open.insert(Part {
            writer,
            temp,
            path,
            groups: 0,
        }))
    }

    /// Ends the open file with its footer and gives it its final name.
    fn close(&mut self) -> Result<(), DatasetError> {
        let Some(mut part) = self.open.take() else {
            return Ok(());
        };
        part.writer
            .end(Some(vec![KeyValue {
                key: SCHEMA_VERSION_KEY.to_string(),
                value: Some(SCHEMA_VERSION.to_string()),
            }]))
            .map_err(parquet_error(&part.temp))?;
        let mut file = part.writer.into_inner();
        std::io::Write::flush(&mut file).map_err(io_error(&part.temp))?;
        drop(file);
        std::fs::rename(&part.temp, &part.path).map_err(io_error(&part.path))
    }
}
