//! The capture file: a pcapng that stays readable whatever stops the capture.
//!
//! [`roce_capture::write::PcapngWriter`] hands each block to its writer in one `write_all`, so [`BlockFile`] can
//! buffer whole blocks and write them to disk in batches: whatever reaches the disk ends on a block boundary.
//! When a write fails (a full disk), the file is cut back to the last block boundary that was written
//! completely, so a reader sees every frame before the failure and no torn block after it.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use roce_capture::LinkType;
use roce_capture::write::{PcapngWriter, SectionInfo};

/// Write to disk once this many bytes of whole blocks are buffered.
const BATCH: usize = 1 << 20;

/// The state behind a [`BlockFile`], shared with the [`CaptureFile`] that owns the writer so that it can
/// see how much is on disk and retry after a failure.
#[derive(Debug)]
struct Inner {
    file: File,
    buf: Vec<u8>,
    /// End offset in `buf` of each block it holds, so that a failed batch can be retried block by block.
    ends: Vec<usize>,
    /// Bytes on disk, all of them whole blocks.
    committed: u64,
    /// The first write error: later blocks are refused, so the file keeps ending at `committed`.
    failed: Option<io::ErrorKind>,
}

impl Inner {
    fn refuse(&self) -> io::Result<()> {
        match self.failed {
            Some(kind) => Err(io::Error::new(
                kind,
                "an earlier write to the capture failed",
            )),
            None => Ok(()),
        }
    }

    fn write_out(&mut self) -> io::Result<()> {
        self.refuse()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        let result = match self.file.write_all(&self.buf) {
            Ok(()) => {
                self.committed += self.buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut the torn tail, then keep as many whole blocks of the batch as still fit, so the file
                // ends at the last frame the disk could take.
                let _ = self.file.set_len(self.committed);
                let _ = self.file.seek(SeekFrom::Start(self.committed));
                let mut start = 0;
                for &end in &self.ends {
                    let Some(block) = self.buf.get(start..end) else {
                        break;
                    };
                    if self.file.write_all(block).is_err() {
                        let _ = self.file.set_len(self.committed);
                        let _ = self.file.seek(SeekFrom::Start(self.committed));
                        break;
                    }
                    self.committed += block.len() as u64;
                    start = end;
                }
                self.failed = Some(e.kind());
                Err(e)
            }
        };
        self.buf.clear();
        self.ends.clear();
        result
    }
}

/// A file that is written in whole blocks only (see the module documentation).
#[derive(Debug, Clone)]
pub struct BlockFile(Rc<RefCell<Inner>>);

impl BlockFile {
    /// Creates (truncates) the file at `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(BlockFile(Rc::new(RefCell::new(Inner {
            file: File::create(path)?,
            buf: Vec::with_capacity(BATCH + 64 * 1024),
            ends: Vec::new(),
            committed: 0,
            failed: None,
        }))))
    }

    /// Bytes safely on disk.
    pub fn committed(&self) -> u64 {
        self.0.borrow().committed
    }

    /// Bytes handed over so far: on disk plus buffered.
    pub fn written(&self) -> u64 {
        let inner = self.0.borrow();
        inner.committed + inner.buf.len() as u64
    }

    /// Whether a write has failed (the file then ends at [`BlockFile::committed`]).
    pub fn failed(&self) -> bool {
        self.0.borrow().failed.is_some()
    }

    /// Forgets an earlier failure, so that the closing blocks can be tried once the torn tail is gone.
    pub fn retry_after_failure(&self) {
        let mut inner = self.0.borrow_mut();
        inner.failed = None;
        let at = inner.committed;
        let _ = inner.file.seek(SeekFrom::Start(at));
    }
}

impl Write for BlockFile {
    fn write(&mut self, block: &[u8]) -> io::Result<usize> {
        let mut inner = self.0.borrow_mut();
        inner.refuse()?;
        inner.buf.extend_from_slice(block);
        let end = inner.buf.len();
        inner.ends.push(end);
        if inner.buf.len() >= BATCH {
            inner.write_out()?;
        }
        Ok(block.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut inner = self.0.borrow_mut();
        inner.write_out()?;
        inner.file.flush()
    }
}

/// One interface of the capture, as recorded in its Interface Description Block.
#[derive(Debug, Clone)]
pub struct OutInterface {
    /// The interface's name.
    pub name: String,
    /// Its link type.
    pub link: LinkType,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// The engine and filter, for the interface block's description.
    pub description: String,
    /// Its line rate from sysfs, bit/s, written as the block's `if_speed` (none when unknown).
    pub speed_bps: Option<u64>,
}

/// The pcapng being written, with the interfaces' snap lengths to enforce.
#[derive(Debug)]
pub struct CaptureFile {
    writer: PcapngWriter<BlockFile>,
    file: BlockFile,
    snaplens: Vec<u32>,
}

impl CaptureFile {
    /// Creates the file and writes the section header and one interface block per interface.
    pub fn create(path: &Path, section: &SectionInfo, ifaces: &[OutInterface]) -> io::Result<Self> {
        let file = BlockFile::create(path)?;
        let mut writer = PcapngWriter::new(file.clone(), section)?;
        for i in ifaces {
            writer.add_interface_with_speed(
                i.link,
                i.snaplen,
                Some(&i.name),
                Some(&i.description),
                i.speed_bps,
            )?;
        }
        writer.flush()?;
        Ok(CaptureFile {
            writer,
            file,
            snaplens: ifaces.iter().map(|i| i.snaplen).collect(),
        })
    }

    /// Writes one frame. Bytes past the interface's snap length are cut (libpcap can hand over a few more
    /// when it puts a VLAN tag back), so the file never contradicts its own interface block.
    pub fn write_frame(&mut self, iface: u32, ts_ns: u64, data: &[u8], len: u32) -> io::Result<()> {
        let snap = self.snaplens.get(iface as usize).copied().unwrap_or(0) as usize;
        let data = if snap > 0 && data.len() > snap {
            data.get(..snap).unwrap_or(data)
        } else {
            data
        };
        let len = len.max(data.len() as u32);
        self.writer.write_packet(iface, ts_ns, data, len)
    }

    /// Writes a custom block (counter samples, knobs, kernel events) under [`roce_capture::blocks::PEN`].
    pub fn write_custom(&mut self, payload: &[u8]) -> io::Result<()> {
        self.writer
            .write_custom(roce_capture::blocks::PEN, payload, true)
    }

    /// Writes the interface statistics blocks and flushes. After a failed write the file has been cut back
    /// to its last whole block; this still tries to append the statistics, which fit if the cut freed room.
    pub fn finish(mut self, ts_ns: u64, stats: &[(Option<u64>, Option<u64>)]) -> io::Result<()> {
        if self.file.failed() {
            self.file.retry_after_failure();
        }
        for (i, (received, dropped)) in stats.iter().enumerate() {
            self.writer
                .write_stats(i as u32, ts_ns, *received, *dropped)?;
        }
        self.writer.flush()
    }

    /// Bytes of whole blocks on disk.
    pub fn committed(&self) -> u64 {
        self.file.committed()
    }

    /// Bytes written so far, buffered ones included: what the file will hold once flushed.
    pub fn written(&self) -> u64 {
        self.file.written()
    }

    /// Hands buffered blocks to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

/// When to start a new file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Once a file holds this many bytes.
    pub size: Option<u64>,
    /// Once a file is this old.
    pub every: Option<Duration>,
}

impl Rotation {
    /// Whether any rotation is asked for.
    pub fn enabled(&self) -> bool {
        self.size.is_some() || self.every.is_some()
    }
}

/// The name of file number `index` of a rotated capture: `run.pcapng` becomes `run.00000.pcapng`,
/// `run.00001.pcapng`... so that the files sort in capture order.
pub fn rotated_path(base: &Path, index: u32) -> PathBuf {
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "capture".into());
    let name = match base.extension() {
        Some(ext) => format!("{stem}.{index:05}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{index:05}"),
    };
    base.with_file_name(name)
}

/// The capture's output: one file, or a sequence of complete files when rotating. Each rotated file
/// stands alone: section header, interfaces, the knobs, its frames, and statistics blocks counting what
/// that file received and what was lost while it was open.
#[derive(Debug)]
pub struct Output {
    base: PathBuf,
    section: SectionInfo,
    ifaces: Vec<OutInterface>,
    rotation: Rotation,
    /// Repeated at the start of every file.
    header_blocks: Vec<Vec<u8>>,
    file: CaptureFile,
    path: PathBuf,
    index: u32,
    opened: Instant,
    frames_in_file: Vec<u64>,
    /// Frames written per interface over every file.
    frames_total: Vec<u64>,
    /// Each interface's loss count when the current file was opened.
    dropped_at_open: Vec<u64>,
    closing: Option<ClosingBlock>,
}

/// Produces the custom blocks about the file that is closing (what happened while it was open), written
/// just before its statistics blocks.
pub struct ClosingBlock(pub Box<dyn FnMut() -> Vec<Vec<u8>>>);

impl std::fmt::Debug for ClosingBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClosingBlock")
    }
}

impl Output {
    /// Creates the first file and writes its section and interface blocks.
    pub fn create(
        base: &Path,
        section: SectionInfo,
        ifaces: Vec<OutInterface>,
        rotation: Rotation,
    ) -> io::Result<Self> {
        let path = if rotation.enabled() {
            rotated_path(base, 0)
        } else {
            base.to_path_buf()
        };
        let file = CaptureFile::create(&path, &section, &ifaces)?;
        let n_ifaces = ifaces.len();
        Ok(Output {
            base: base.to_path_buf(),
            frames_in_file: vec![0; ifaces.len()],
            frames_total: vec![0; ifaces.len()],
            section,
            ifaces,
            rotation,
            header_blocks: Vec::new(),
            file,
            path,
            index: 0,
            opened: Instant::now(),
            dropped_at_open: vec![0; n_ifaces],
            closing: None,
        })
    }

    /// Sets what each file gets as its last custom block (the kernel drops `--kernel-events` counted).
    pub fn set_closing_block(&mut self, closing: ClosingBlock) {
        self.closing = Some(closing);
    }

    fn write_closing_block(&mut self) -> io::Result<()> {
        for block in self.closing.as_mut().map(|c| (c.0)()).unwrap_or_default() {
            self.file.write_custom(&block)?;
        }
        Ok(())
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a custom block that every later file repeats at its start (the knobs).
    pub fn write_header_custom(&mut self, payload: &[u8]) -> io::Result<()> {
        self.header_blocks.push(payload.to_vec());
        self.file.write_custom(payload)
    }

    /// Writes a custom block into the current file only (a counter sample, the events of an interval).
    pub fn write_custom(&mut self, payload: &[u8]) -> io::Result<()> {
        self.file.write_custom(payload)
    }

    /// Writes a frame, starting a new file first when the current one is full or old enough.
    /// `dropped_so_far` is the engine's running loss count per interface, for the closing file's statistics.
    pub fn write_frame(
        &mut self,
        iface: u32,
        ts_ns: u64,
        data: &[u8],
        len: u32,
        dropped_so_far: &[u64],
    ) -> io::Result<()> {
        let full = self.rotation.size.is_some_and(|s| self.file.written() >= s);
        let old = self
            .rotation
            .every
            .is_some_and(|d| self.opened.elapsed() >= d);
        if full || old {
            self.rotate(dropped_so_far)?;
        }
        self.file.write_frame(iface, ts_ns, data, len)?;
        if let Some(n) = self.frames_in_file.get_mut(iface as usize) {
            *n += 1;
        }
        if let Some(n) = self.frames_total.get_mut(iface as usize) {
            *n += 1;
        }
        Ok(())
    }

    /// Frames written per interface, over every file of the capture.
    pub fn frames_written(&self) -> &[u64] {
        &self.frames_total
    }

    /// Starts the next file when the current one is old enough even without traffic.
    pub fn tick(&mut self, dropped_so_far: &[u64]) -> io::Result<()> {
        if self
            .rotation
            .every
            .is_some_and(|d| self.opened.elapsed() >= d)
        {
            self.rotate(dropped_so_far)?;
        }
        self.file.flush()
    }

    fn rotate(&mut self, dropped_so_far: &[u64]) -> io::Result<()> {
        let index = self.index.saturating_add(1);
        let path = rotated_path(&self.base, index);
        let mut next = CaptureFile::create(&path, &self.section, &self.ifaces)?;
        self.write_closing_block()?;
        for block in &self.header_blocks {
            next.write_custom(block)?;
        }
        // Each interface's losses while this file was open.
        let stats: Vec<(Option<u64>, Option<u64>)> = self
            .frames_in_file
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let now = dropped_so_far.get(i).copied().unwrap_or(0);
                let then = self.dropped_at_open.get(i).copied().unwrap_or(0);
                let d = now.saturating_sub(then);
                (Some(n + d), Some(d))
            })
            .collect();
        let closing = std::mem::replace(&mut self.file, next);
        closing.finish(crate::sys::now_ns(), &stats)?;
        self.index = index;
        self.path = path;
        self.opened = Instant::now();
        self.frames_in_file = vec![0; self.ifaces.len()];
        self.dropped_at_open = (0..self.ifaces.len())
            .map(|i| dropped_so_far.get(i).copied().unwrap_or(0))
            .collect();
        Ok(())
    }

    /// Closes the last file. `totals` are the engine's counters for the whole capture; when rotating, the
    /// last file gets what is left of them after the earlier files.
    pub fn finish(mut self, totals: &[(Option<u64>, Option<u64>)]) -> io::Result<()> {
        // Still close the file (and write its statistics) when the closing block cannot be written.
        let closing = self.write_closing_block();
        let stats: Vec<(Option<u64>, Option<u64>)> = if self.index == 0 {
            totals.to_vec()
        } else {
            totals
                .iter()
                .enumerate()
                .map(|(i, &(_, dropped))| {
                    let n = self.frames_in_file.get(i).copied().unwrap_or(0);
                    let then = self.dropped_at_open.get(i).copied().unwrap_or(0);
                    let d = dropped.map(|d| d.saturating_sub(then));
                    (Some(n + d.unwrap_or(0)), d)
                })
                .collect()
        };
        self.file.finish(crate::sys::now_ns(), &stats)?;
        closing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_names_sort_in_order() {
        let p = Path::new("/tmp/run.pcapng");
        assert_eq!(rotated_path(p, 0), Path::new("/tmp/run.00000.pcapng"));
        assert_eq!(rotated_path(p, 12), Path::new("/tmp/run.00012.pcapng"));
        assert_eq!(rotated_path(Path::new("cap"), 1), Path::new("cap.00001"));
    }

    #[test]
    fn a_full_disk_keeps_whole_blocks() {
        // /dev/full refuses every write with ENOSPC: nothing but whole blocks may be counted as written.
        let Ok(mut f) = BlockFile::create(Path::new("/dev/full")) else {
            return;
        };
        f.write_all(&[1; 100]).unwrap();
        assert!(f.flush().is_err());
        assert!(f.failed());
        assert_eq!(f.committed(), 0);
        assert!(f.write_all(&[2; 8]).is_err(), "later blocks are refused");
    }

    fn iface(name: &str) -> OutInterface {
        OutInterface {
            name: name.into(),
            link: LinkType::ETHERNET,
            snaplen: 256,
            description: String::new(),
            speed_bps: None,
        }
    }

    /// Losses are the interface's own in every file: an earlier version put the whole capture's losses on
    /// the first interface of each rotated file.
    #[test]
    fn each_rotated_file_states_each_interfaces_own_losses() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("run.pcapng");
        let rotation = Rotation {
            size: Some(1),
            every: None,
        };
        let ifaces = vec![iface("a"), iface("b")];
        let mut out = Output::create(&base, SectionInfo::default(), ifaces, rotation).unwrap();
        // Running loss counts per interface as the engine would report them before each frame.
        out.write_frame(0, 1, &[0u8; 60], 60, &[0, 0]).unwrap();
        out.write_frame(1, 2, &[0u8; 60], 60, &[0, 4]).unwrap();
        out.write_frame(0, 3, &[0u8; 60], 60, &[2, 4]).unwrap();
        out.finish(&[(Some(4), Some(2)), (Some(8), Some(7))])
            .unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let losses: Vec<Vec<Option<u64>>> = files
            .iter()
            .map(|path| {
                let mut r = roce_capture::CaptureReader::open(path).unwrap();
                while r.next_record().unwrap().is_some() {}
                r.if_stats().iter().map(|s| s.dropped_iface).collect()
            })
            .collect();
        // The first file is already "full" with its headers, so the first frame opens the second.
        assert_eq!(
            losses,
            [
                vec![Some(0), Some(0)],
                vec![Some(0), Some(4)],
                vec![Some(2), Some(0)],
                vec![Some(0), Some(3)]
            ]
        );
    }

    /// Every file of a rotated set records each interface's line rate, or none where sysfs knew none.
    #[test]
    fn every_file_records_each_interfaces_line_rate() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("run.pcapng");
        let rotation = Rotation {
            size: Some(1),
            every: None,
        };
        let ifaces = vec![
            OutInterface {
                speed_bps: Some(25_000_000_000),
                ..iface("ens1f0np0")
            },
            iface("veth0"),
        ];
        let mut out = Output::create(&base, SectionInfo::default(), ifaces, rotation).unwrap();
        out.write_frame(0, 1, &[0u8; 60], 60, &[0, 0]).unwrap();
        out.finish(&[(None, None), (None, None)]).unwrap();
        let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(files.len() >= 2, "{files:?}");
        for path in files {
            let mut r = roce_capture::CaptureReader::open(&path).unwrap();
            while r.next_record().unwrap().is_some() {}
            let speeds: Vec<Option<u64>> = r.interfaces().iter().map(|i| i.speed_bps).collect();
            assert_eq!(speeds, [Some(25_000_000_000), None], "{}", path.display());
        }
    }

    #[test]
    fn every_rotated_file_gets_its_closing_block() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("run.pcapng");
        let ifaces = vec![iface("x")];
        // Any file that holds a frame is full: each frame after the first starts a new file.
        let rotation = Rotation {
            size: Some(1),
            every: None,
        };
        let mut out = Output::create(&base, SectionInfo::default(), ifaces, rotation).unwrap();
        let mut calls = 0u32;
        out.set_closing_block(ClosingBlock(Box::new(move || {
            calls += 1;
            vec![format!("DROP{{\"n\":{calls}}}").into_bytes()]
        })));
        for i in 0..3u64 {
            out.write_frame(0, i, &[0u8; 60], 60, &[0]).unwrap();
        }
        out.finish(&[(Some(3), Some(0))]).unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 3, "{files:?}");
        // File k holds the k-th call's block, once: what happened while that file was open.
        for (k, path) in files.iter().enumerate() {
            let bytes = std::fs::read(path).unwrap();
            let want = format!("DROP{{\"n\":{}}}", k + 1).into_bytes();
            let hits = bytes
                .windows(want.len())
                .filter(|w| *w == want.as_slice())
                .count();
            assert_eq!(hits, 1, "{}", path.display());
        }
    }
}
