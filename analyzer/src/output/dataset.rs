//! `decode --parquet`: every frame as one row of a columnar dataset, for engines that read many collectors'
//! captures at once (Spark, see docs/spark.md), where no single machine could merge them.
//!
//! Memory stays bounded whatever the capture's size: rows gather in plain column buffers until a row group is
//! full, the group is encoded and written, and the buffers are cleared and filled again. A file holds a few
//! row groups and is then closed under its final name, so a reader listing the directory meanwhile sees only
//! whole files (Spark and Hive pass over names that start with a dot).
//!
//! Columns are signed integers, booleans and strings only: Spark reads Parquet's unsigned 32-bit integers as
//! 64-bit ones and its unsigned 64-bit integers as decimals, so signed types one size up keep every engine's
//! types plain. The one exception is the RETH virtual address, a full 64-bit value.
//!
//! Schema changes bump [`SCHEMA_VERSION`], kept both in a column (Spark reads columns, not file metadata) and
//! in the file's key-value metadata (`rocetrace.schema_version`), and docs/spark.md lists every column.

use std::collections::hash_map::Entry;
use std::fs::File;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use polars::io::parquet::write::BatchedWriter;
use polars::prelude::*;
use roce_capture::Capture;
use roce_core::decode::{Frame, Kind, mac_to_string};
use roce_wire::pfc::MacControlRepr;
use rustc_hash::FxHashMap;
use thiserror::Error;

use super::tables::TableError;

/// The dataset's schema version: bumped whenever a column is added, removed, renamed or changes meaning.
pub const SCHEMA_VERSION: i32 = 1;
/// The file metadata key that holds [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "rocetrace.schema_version";
/// Rows per row group: about a million (2^20). Spark plans one task per row group or file split; a group of a
/// million frames is 10–30 MB compressed, and its column buffers about 150 MB while being filled.
pub const DEFAULT_GROUP_ROWS: usize = 1 << 20;
/// Row groups per file before the next `part-NNNNN.parquet` starts: files of a few hundred MB, the size
/// object stores and Spark's split planning handle best.
pub const DEFAULT_GROUPS_PER_FILE: usize = 8;

/// Why a dataset could not be written.
#[derive(Debug, Error)]
pub enum DatasetError {
    /// Writing a file failed (the same errors as the tables').
    #[error(transparent)]
    Write(#[from] TableError),
    /// The directory already holds part files: adding to them would count their frames twice.
    #[error(
        "{path} already holds part files of a dataset; remove them or write elsewhere (another --collector \
         name, say): adding to them would count their frames twice"
    )]
    NotEmpty {
        /// The directory, so the user knows what to clear.
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

fn polars_error(path: &Path) -> impl FnOnce(PolarsError) -> DatasetError + '_ {
    move |source| {
        DatasetError::Write(TableError::Polars {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Declares the column buffers once: the struct, and [`Rows::each_buffer`] over every field of it, so that
/// clearing and reserving cannot forget a column.
macro_rules! rows {
    ($($name:ident: $ty:ty,)*) => {
        /// The column buffers of one row group: raw values, turned into text (addresses, tap names) only when
        /// the group is written, so a row costs a handful of stores.
        #[derive(Debug, Default)]
        struct Rows {
            $($name: Vec<$ty>,)*
            pfc_quanta: [Vec<Option<i32>>; 8],
        }

        impl Rows {
            fn each_buffer(&mut self, each: &mut dyn FnMut(&mut dyn Buffer)) {
                $(each(&mut self.$name);)*
                for b in self.pfc_quanta.iter_mut() {
                    each(b);
                }
            }
        }
    };
}

rows! {
    frame: i64,
    time_ns: i64,
    iface: u32,
    kind: Kind,
    len: i64,
    caplen: i64,
    vlan: Option<i32>,
    pcp: Option<i32>,
    inner_vlan: Option<i32>,
    src_mac: Option<[u8; 6]>,
    dst_mac: Option<[u8; 6]>,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    dscp: Option<i32>,
    ecn: Option<i32>,
    ip_len: Option<i32>,
    roce_version: Option<i32>,
    sport: Option<i32>,
    opcode: Option<i32>,
    dest_qp: Option<i32>,
    psn: Option<i32>,
    se: Option<bool>,
    migreq: Option<bool>,
    pad: Option<i32>,
    tver: Option<i32>,
    pkey: Option<i32>,
    fecn: Option<bool>,
    becn: Option<bool>,
    ack_req: Option<bool>,
    payload_len: Option<i32>,
    icrc_ok: Option<bool>,
    aeth_syndrome: Option<i32>,
    aeth_msn: Option<i32>,
    reth_va: Option<u64>,
    reth_rkey: Option<i64>,
    reth_len: Option<i64>,
    deth_src_qp: Option<i32>,
    pfc_enable: Option<i32>,
    pause_quanta: Option<i32>,
}

impl Rows {
    fn with_capacity(n: usize) -> Self {
        let mut r = Rows::default();
        r.reserve(n);
        r
    }

    /// Appends one frame; the fields a frame lacks are null, as `decode --json` leaves them out.
    fn push(&mut self, f: &Frame<'_>) {
        self.frame.push(f.number as i64);
        self.time_ns.push(f.ts_ns as i64);
        self.iface.push(f.iface);
        self.kind.push(f.kind);
        self.len.push(i64::from(f.len));
        self.caplen.push(i64::from(f.caplen));
        self.vlan.push(f.vlan.map(i32::from));
        self.pcp.push(f.pcp.map(i32::from));
        self.inner_vlan.push(f.inner_vlan.map(i32::from));
        self.src_mac.push(f.src_mac);
        self.dst_mac.push(f.dst_mac);
        let ip = f.ip;
        self.src.push(ip.map(|i| i.src));
        self.dst.push(ip.map(|i| i.dst));
        self.dscp.push(ip.map(|i| i32::from(i.dscp)));
        self.ecn.push(ip.map(|i| i32::from(i.ecn)));
        self.ip_len.push(ip.map(|i| i.len as i32));
        let roce = f.roce.as_ref();
        self.roce_version.push(roce.map(|r| i32::from(r.version)));
        self.sport.push(roce.and_then(|r| r.sport).map(i32::from));
        let bth = roce.and_then(|r| r.packet.bth);
        self.opcode.push(bth.map(|b| i32::from(b.opcode.0)));
        self.dest_qp.push(bth.map(|b| b.dest_qp as i32));
        self.psn.push(bth.map(|b| b.psn as i32));
        self.se.push(bth.map(|b| b.se));
        self.migreq.push(bth.map(|b| b.migreq));
        self.pad.push(bth.map(|b| i32::from(b.pad_count)));
        self.tver.push(bth.map(|b| i32::from(b.tver)));
        self.pkey.push(bth.map(|b| i32::from(b.pkey)));
        self.fecn.push(bth.map(|b| b.fecn));
        self.becn.push(bth.map(|b| b.becn));
        self.ack_req.push(bth.map(|b| b.ack_req));
        self.payload_len.push(
            roce.and_then(|r| r.packet.payload_len)
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        );
        self.icrc_ok.push(roce.and_then(|r| r.icrc.as_option()));
        let ext = roce.map(|r| &r.packet.ext);
        let aeth = ext.and_then(|e| e.aeth);
        self.aeth_syndrome.push(aeth.map(|a| i32::from(a.syndrome)));
        self.aeth_msn.push(aeth.map(|a| a.msn as i32));
        let reth = ext.and_then(|e| e.reth);
        self.reth_va.push(reth.map(|x| x.va));
        self.reth_rkey.push(reth.map(|x| i64::from(x.rkey)));
        self.reth_len.push(reth.map(|x| i64::from(x.dma_len)));
        self.deth_src_qp
            .push(ext.and_then(|e| e.deth).map(|d| d.src_qp as i32));
        let (enable, quanta, pause) = match f.mac_control {
            Some(MacControlRepr::Pfc(p)) => (Some(i32::from(p.enable)), Some(p.quanta), None),
            Some(MacControlRepr::Pause { quanta }) => (None, None, Some(i32::from(quanta))),
            _ => (None, None, None),
        };
        self.pfc_enable.push(enable);
        for (prio, col) in self.pfc_quanta.iter_mut().enumerate() {
            col.push(quanta.map(|q| i32::from(q[prio])));
        }
        self.pause_quanta.push(pause);
    }

    fn len(&self) -> usize {
        self.frame.len()
    }

    fn clear(&mut self) {
        self.each_buffer(&mut |b| b.clear_keep());
    }

    fn reserve(&mut self, n: usize) {
        self.each_buffer(&mut |b| b.reserve_rows(n));
    }
}

/// What [`Rows::each_buffer`] needs of a column buffer, whatever its element type.
trait Buffer {
    fn clear_keep(&mut self);
    fn reserve_rows(&mut self, n: usize);
}

impl<T> Buffer for Vec<T> {
    fn clear_keep(&mut self) {
        self.clear();
    }
    fn reserve_rows(&mut self, n: usize) {
        self.reserve(n.saturating_sub(self.len()));
    }
}

/// Text of addresses seen before: most frames repeat a few thousand addresses, and formatting each anew
/// would cost more than the rest of the row. Cleared when it grows large, so a scan of many hosts stays
/// bounded.
#[derive(Debug)]
struct Names<K> {
    text: FxHashMap<K, Box<str>>,
}

impl<K> Default for Names<K> {
    fn default() -> Self {
        Names {
            text: FxHashMap::default(),
        }
    }
}

const NAMES_MAX: usize = 1 << 16;

impl<K: std::hash::Hash + Eq + Copy> Names<K> {
    fn get(&mut self, key: K, format: impl Fn(&K) -> String) -> &str {
        if self.text.len() >= NAMES_MAX && !self.text.contains_key(&key) {
            self.text.clear();
        }
        match self.text.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(format(&key).into_boxed_str()),
        }
    }

    fn column(
        &mut self,
        name: &str,
        values: &[Option<K>],
        format: impl Fn(&K) -> String,
    ) -> Column {
        let mut b = StringChunkedBuilder::new(name.into(), values.len());
        for v in values {
            match v {
                Some(k) => b.append_value(self.get(*k, &format)),
                None => b.append_null(),
            }
        }
        b.finish().into_column()
    }
}

/// The file being filled, under its temporary name until it is closed.
struct Part {
    writer: BatchedWriter<BufWriter<File>>,
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
    /// Rows per Parquet row group, the unit a reader skips or reads whole.
    pub group_rows: usize,
    /// Row groups per part file, which sizes the files for object stores and Spark.
    pub groups_per_file: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            group_rows: DEFAULT_GROUP_ROWS,
            groups_per_file: DEFAULT_GROUPS_PER_FILE,
        }
    }
}

/// Writes the frames of one capture as `part-NNNNN.parquet` files into a directory.
#[derive(Debug)]
pub struct DatasetWriter {
    dir: PathBuf,
    layout: Layout,
    rows: Rows,
    part: Option<Part>,
    parts: usize,
    ips: Names<IpAddr>,
    macs: Names<[u8; 6]>,
    /// Frames written so far.
    pub frames: u64,
}

impl DatasetWriter {
    /// Creates `dir` (and its parents); refuses a directory that already holds part files.
    pub fn create(dir: &Path, layout: Layout) -> Result<Self, DatasetError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
            let name = entry.map_err(io_error(dir))?.file_name();
            if name.to_string_lossy().starts_with("part-") {
                return Err(DatasetError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
        }
        let layout = Layout {
            group_rows: layout.group_rows.max(1),
            groups_per_file: layout.groups_per_file.max(1),
        };
        Ok(DatasetWriter {
            dir: dir.to_path_buf(),
            layout,
            rows: Rows::with_capacity(layout.group_rows),
            part: None,
            parts: 0,
            ips: Names::default(),
            macs: Names::default(),
            frames: 0,
        })
    }

    /// Adds a frame; returns true when the row group is full and [`DatasetWriter::flush`] is due (the frame
    /// borrows the capture that `flush` reads tap names from, so the caller calls it once the frame is gone).
    #[inline]
    pub fn push(&mut self, f: &Frame<'_>) -> bool {
        self.rows.push(f);
        self.rows.len() >= self.layout.group_rows
    }

    /// Writes the buffered rows as one row group, naming taps as `capture` does.
    pub fn flush(&mut self, capture: &Capture) -> Result<(), DatasetError> {
        if self.rows.len() == 0 {
            return Ok(());
        }
        let df = self.frame_of_rows(capture)?;
        let part = match &mut self.part {
            Some(p) => p,
            None => {
                let p = self.open_part(&df)?;
                self.part.insert(p)
            }
        };
        part.writer
            .write_batch(&df)
            .map_err(polars_error(&part.temp))?;
        part.groups += 1;
        self.frames += self.rows.len() as u64;
        self.rows.clear();
        if part.groups >= self.layout.groups_per_file {
            self.close_part()?;
        }
        Ok(())
    }

    /// Writes what is left and closes the last file. An empty capture still leaves one file, with the
    /// schema and no rows, so a reader of the directory finds the columns.
    pub fn finish(mut self, capture: &Capture) -> Result<u64, DatasetError> {
        if self.rows.len() == 0 && self.parts == 0 && self.part.is_none() {
            let df = self.frame_of_rows(capture)?;
            let p = self.open_part(&df)?;
            self.part = Some(p);
        }
        self.flush(capture)?;
        self.close_part()?;
        Ok(self.frames)
    }

    fn open_part(&mut self, df: &DataFrame) -> Result<Part, DatasetError> {
        let name = format!("part-{:05}.parquet", self.parts);
        self.parts += 1;
        let path = self.dir.join(&name);
        let temp = self.dir.join(format!(".{name}.inprogress"));
        let file = File::create(&temp).map_err(io_error(&temp))?;
        let writer = ParquetWriter::new(BufWriter::with_capacity(1 << 20, file))
            .with_compression(ParquetCompression::Snappy)
            .with_key_value_metadata(Some(KeyValueMetadata::from_static(vec![(
                SCHEMA_VERSION_KEY.to_string(),
                SCHEMA_VERSION.to_string(),
            )])))
            .batched(df.schema())
            .map_err(polars_error(&temp))?;
        Ok(Part {
            writer,
            temp,
            path,
            groups: 0,
        })
    }

    fn close_part(&mut self) -> Result<(), DatasetError> {
        let Some(part) = self.part.take() else {
            return Ok(());
        };
        part.writer.finish().map_err(polars_error(&part.temp))?;
        drop(part.writer);
        std::fs::rename(&part.temp, &part.path).map_err(io_error(&part.path))
    }

    /// The row group as polars columns, in the documented order.
    fn frame_of_rows(&mut self, capture: &Capture) -> Result<DataFrame, DatasetError> {
        let r = &self.rows;
        let n = r.len();
        let taps = capture.taps();
        let tap: StringChunked = r
            .iface
            .iter()
            .map(|&i| taps.get(i as usize).map(|t| t.name.as_str()))
            .collect();
        let kind: StringChunked = r.kind.iter().map(|k| Some(k.as_str())).collect();
        let int = |name: &str, v: &[Option<i32>]| Column::new(name.into(), v);
        let flag = |name: &str, v: &[Option<bool>]| Column::new(name.into(), v);
        let mut cols = vec![
            Column::new("schema_version".into(), vec![SCHEMA_VERSION; n]),
            Column::new("frame".into(), &r.frame[..]),
            Column::new("time_ns".into(), &r.time_ns[..]),
            tap.with_name("tap".into()).into_column(),
            kind.with_name("kind".into()).into_column(),
            Column::new("len".into(), &r.len[..]),
            Column::new("caplen".into(), &r.caplen[..]),
            self.macs.column("src_mac", &r.src_mac, mac_to_string),
            self.macs.column("dst_mac", &r.dst_mac, mac_to_string),
            int("vlan", &r.vlan),
            int("pcp", &r.pcp),
            int("inner_vlan", &r.inner_vlan),
            self.ips.column("src", &r.src, IpAddr::to_string),
            self.ips.column("dst", &r.dst, IpAddr::to_string),
            int("dscp", &r.dscp),
            int("ecn", &r.ecn),
            int("ip_len", &r.ip_len),
            int("roce_version", &r.roce_version),
            int("sport", &r.sport),
            int("opcode", &r.opcode),
            int("dest_qp", &r.dest_qp),
            int("psn", &r.psn),
            flag("se", &r.se),
            flag("migreq", &r.migreq),
            int("pad", &r.pad),
            int("tver", &r.tver),
            int("pkey", &r.pkey),
            flag("fecn", &r.fecn),
            flag("becn", &r.becn),
            flag("ack_req", &r.ack_req),
            int("payload_len", &r.payload_len),
            flag("icrc_ok", &r.icrc_ok),
            int("aeth_syndrome", &r.aeth_syndrome),
            int("aeth_msn", &r.aeth_msn),
            Column::new("reth_va".into(), &r.reth_va[..]),
            Column::new("reth_rkey".into(), &r.reth_rkey[..]),
            Column::new("reth_len".into(), &r.reth_len[..]),
            int("deth_src_qp", &r.deth_src_qp),
            int("pfc_enable", &r.pfc_enable),
        ];
        for (prio, q) in r.pfc_quanta.iter().enumerate() {
            cols.push(int(&format!("pfc_quanta_{prio}"), q));
        }
        cols.push(int("pause_quanta", &r.pause_quanta));
        DataFrame::new(n, cols).map_err(polars_error(&self.dir))
    }
}
