//! The encoding thread: it turns each batch of rows into one page per column, closes the row group when
//! it is large enough, and hands the group to the dataset's files.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};

use polars_parquet::parquet::error::ParquetError;
use polars_parquet::parquet::page::CompressedPage;
use roce_core::decode::{IpInfo, Kind, mac_to_string};
use roce_wire::bth::BthRepr;
use roce_wire::ext::{AethRepr, RethRepr};
use roce_wire::pfc::MacControlRepr;

use super::pages::{Chunk, Dict, Gathered, Pager, Scratch};
use super::parts::{Layout, Parts};
use super::rows::Rows;
use super::schema::{COLUMNS, SCHEMA_VERSION, Type, schema};
use super::{DatasetError, parquet_error};

/// Distinct values a text column's dictionary may reach before its row group is closed early: a scan of
/// many hosts still keeps the dictionaries (and readers' memory for them) small.
const DICT_MAX: usize = 1 << 16;

/// What the decoding thread hands the encoding thread.
pub(super) enum Message {
    /// A page's worth of rows; the names of taps that appeared since the last batch; whether the row
    /// group ends with these rows (its row limit reached).
    Rows {
        rows: Box<Rows>,
        new_taps: Vec<String>,
        end_group: bool,
    },
    /// The capture is over: write what is left and close the last file.
    Finish,
}

/// The headers gathered once per page for the columns that share them.
#[derive(Debug, Default)]
struct Sources {
    ip: Gathered<IpInfo>,
    bth: Gathered<BthRepr>,
    aeth: Gathered<AethRepr>,
    reth: Gathered<RethRepr>,
    /// Scratch for the validity bitmaps.
    valid: Vec<u8>,
}

impl Sources {
    fn gather(&mut self, r: &Rows) {
        let n = r.len();
        self.ip.of(&r.ip, &mut self.valid);
        self.bth.of(&r.bth, &mut self.valid);
        self.aeth.of_sparse(&r.aeth, n, &mut self.valid);
        self.reth.of_sparse(&r.reth, n, &mut self.valid);
    }
}

/// The encoding thread's state: the row group being gathered and the files it goes to.
#[derive(Debug)]
pub(super) struct Encoder {
    dir: PathBuf,
    layout: Layout,
    chunks: Vec<Chunk>,
    scratch: Scratch,
    taps: Vec<String>,
    tap: Dict<u32>,
    kind: Dict<Kind>,
    src_mac: Dict<[u8; 6]>,
    dst_mac: Dict<[u8; 6]>,
    src: Dict<IpAddr>,
    dst: Dict<IpAddr>,
    gathered: Sources,
    rows: usize,
    bytes: usize,
    parts: Parts,
    frames: u64,
}

impl Encoder {
    pub(super) fn new(dir: PathBuf, layout: Layout) -> Result<Self, DatasetError> {
        let schema = schema().map_err(parquet_error(&dir))?;
        let chunks = schema
            .columns()
            .iter()
            .zip(COLUMNS)
            .map(|(c, (_, t))| Chunk::new(c.descriptor.clone(), *t == Type::Text))
            .collect();
        Ok(Encoder {
            parts: Parts::new(dir.clone(), schema, layout.groups_per_file),
            dir,
            layout,
            chunks,
            scratch: Scratch::default(),
            taps: Vec::new(),
            tap: Dict::default(),
            kind: Dict::default(),
            src_mac: Dict::default(),
            dst_mac: Dict::default(),
            src: Dict::default(),
            dst: Dict::default(),
            gathered: Sources::default(),
            rows: 0,
            bytes: 0,
            frames: 0,
        })
    }

    /// Encodes what arrives until the decoding side finishes (or goes away); returns the frames written.
    pub(super) fn run(
        mut self,
        from: Receiver<Message>,
        back: Sender<Box<Rows>>,
    ) -> Result<u64, DatasetError> {
        while let Ok(message) = from.recv() {
            match message {
                Message::Rows {
                    mut rows,
                    new_taps,
                    end_group,
                } => {
                    self.take(&mut rows, new_taps, end_group)?;
                    // The decoding side reuses the buffers; gone, it no longer needs them.
                    let _ = back.send(rows);
                }
                Message::Finish => return self.finish(),
            }
        }
        // The decoding side stopped without finishing (its input failed): the file in progress keeps its
        // temporary name, so no reader takes it for a whole one.
        Ok(self.frames)
    }

    /// Encodes one batch of rows (and the taps first named in it) and empties it for reuse; closes the row
    /// group where the decoding side or the group's budget ends it. The same step on either thread, so the
    /// files are the same bytes whether or not encoding has a thread of its own.
    pub(super) fn take(
        &mut self,
        rows: &mut Rows,
        new_taps: Vec<String>,
        end_group: bool,
    ) -> Result<(), DatasetError> {
        self.taps.extend(new_taps);
        self.encode(rows).map_err(parquet_error(&self.dir))?;
        if end_group || self.group_full() {
            self.close_group()?;
        }
        rows.clear();
        Ok(())
    }

    fn group_full(&self) -> bool {
        self.bytes >= self.layout.group_bytes
            || self.layout.group_rows.is_some_and(|n| self.rows >= n)
            || self.chunks.iter().any(|c| c.entries() >= DICT_MAX)
    }

    /// One page of every column from `r`.
    fn encode(&mut self, r: &Rows) -> Result<(), ParquetError> {
        let n = r.len();
        let mut p = Pager::new(&mut self.chunks, &mut self.scratch, n);
        p.int(&r.frame, |_| Some(SCHEMA_VERSION.into()));
        p.int(&r.frame, |&v| Some(v));
        p.int(&r.time_ns, |&v| Some(v));
        let taps = &self.taps;
        p.text(
            &mut self.tap,
            &r.iface,
            |&i| ((i as usize) < taps.len()).then_some(i),
            |&i| taps[i as usize].clone(),
        )?;
        p.text(
            &mut self.kind,
            &r.kind,
            |&k| Some(k),
            |k| k.as_str().to_string(),
        )?;
        p.int(&r.len, |&v| Some(v.into()));
        p.int(&r.caplen, |&v| Some(v.into()));
        p.text(&mut self.src_mac, &r.src_mac, |&m| m, mac_to_string)?;
        p.text(&mut self.dst_mac, &r.dst_mac, |&m| m, mac_to_string)?;
        p.int(&r.vlan, |v| v.map(i64::from));
        p.int(&r.pcp, |v| v.map(i64::from));
        p.int(&r.inner_vlan, |v| v.map(i64::from));
        let g = &mut self.gathered;
        g.gather(r);
        p.text_of(&mut self.src, &g.ip, |i| i.src, IpAddr::to_string)?;
        p.text_of(&mut self.dst, &g.ip, |i| i.dst, IpAddr::to_string)?;
        p.int_of(&g.ip, |i| i.dscp.into());
        p.int_of(&g.ip, |i| i.ecn.into());
        p.int_of(&g.ip, |i| (i.len as i32).into());
        p.int(&r.roce_version, |v| v.map(i64::from));
        p.int(&r.sport, |v| v.map(i64::from));
        p.int_of(&g.bth, |b| b.opcode.0.into());
        p.int_of(&g.bth, |b| (b.dest_qp as i32).into());
        p.int_of(&g.bth, |b| (b.psn as i32).into());
        p.boolean_of(&g.bth, |b| b.se);
        p.boolean_of(&g.bth, |b| b.migreq);
        p.int_of(&g.bth, |b| b.pad_count.into());
        p.int_of(&g.bth, |b| b.tver.into());
        p.int_of(&g.bth, |b| b.pkey.into());
        p.boolean_of(&g.bth, |b| b.fecn);
        p.boolean_of(&g.bth, |b| b.becn);
        p.boolean_of(&g.bth, |b| b.ack_req);
        p.int(&r.payload_len, |v| v.map(i64::from));
        p.boolean(&r.icrc_ok, |&v| v);
        p.int_of(&g.aeth, |a| a.syndrome.into());
        p.int_of(&g.aeth, |a| (a.msn as i32).into());
        // The full 64 bits, as Parquet stores an unsigned 64-bit integer.
        p.int_of(&g.reth, |x| x.va as i64);
        p.int_of(&g.reth, |x| x.rkey.into());
        p.int_of(&g.reth, |x| x.dma_len.into());
        p.sparse_int(&r.deth_src_qp, |&q| Some((q as i32).into()));
        let pfc = |m: &MacControlRepr| match *m {
            MacControlRepr::Pfc(p) => Some(p),
            _ => None,
        };
        p.sparse_int(&r.mac_control, |m| pfc(m).map(|p| p.enable.into()));
        for prio in 0..8 {
            p.sparse_int(&r.mac_control, |m| pfc(m).map(|p| p.quanta[prio].into()));
        }
        p.sparse_int(&r.mac_control, |m| match *m {
            MacControlRepr::Pause { quanta } => Some(quanta.into()),
            _ => None,
        });
        self.bytes += p.finish()?;
        self.rows += n;
        Ok(())
    }

    /// Writes the gathered pages as one row group.
    fn close_group(&mut self) -> Result<(), DatasetError> {
        if self.rows == 0 {
            return Ok(());
        }
        let columns: Vec<Vec<CompressedPage>> = self
            .chunks
            .iter_mut()
            .map(|c| c.take_pages(&mut self.scratch))
            .collect::<Result<_, _>>()
            .map_err(parquet_error(&self.dir))?;
        for d in [&mut self.src_mac, &mut self.dst_mac] {
            d.clear();
        }
        for d in [&mut self.src, &mut self.dst] {
            d.clear();
        }
        self.tap.clear();
        self.kind.clear();
        let rows = std::mem::take(&mut self.rows);
        self.bytes = 0;
        self.frames += rows as u64;
        self.parts.write_group(rows as u64, &columns)
    }

    /// Writes what is left and closes the last file.
    pub(super) fn finish(mut self) -> Result<u64, DatasetError> {
        self.close_group()?;
        self.parts.finish()?;
        Ok(self.frames)
    }
}
impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Rows { rows, .. } => write!(f, "Rows({})", rows.len()),
            Message::Finish => write!(f, "Finish"),
        }
    }
}
