//! Many capture files as one capture: a streaming merge by timestamp.
//!
//! A saturation test leaves several files: `roce-tracer` rotates them, each host or mirror port writes its own,
//! and some are compressed. [`Capture`] reads them as one stream of records in time order, the earliest head
//! first (ties go to the file named first), without reading any file twice or holding more than one buffer
//! per file that is being read.
//!
//! **Taps.** Every interface of every file is a tap, named `FILE:IFACE` (the interface's recorded name, else
//! its index), and a record's `iface` is its tap's index over the whole capture. So a flow mirrored at two
//! taps stays two flows and is never counted twice. The one exception is a rotated set: a file that starts
//! after an earlier file has ended, with the same interfaces (link types in order, and names where both
//! files record one), continues that file's taps, as `mergecap` merges identical interface lists. The files of `roce-tracer --rotate-size`,
//! `tcpdump -C` or `-G` are such sets, and their flows stay whole across the rotations. A tap keeps the
//! description (and so the recorded line rate, `if_speed`) of the file that declared it first, and every
//! record of the tap carries that line rate.
//!
//! **Bounded memory.** Files are first peeked at (their first timestamp) and closed again; a file is opened
//! for good only when the merge reaches its first record, and closed when it ends. A rotated set of a
//! thousand files therefore holds one open file at a time; memory grows with the files that overlap in time,
//! never with their number or length.
//!
//! **Damage.** A file that cannot be read to its end ends its own part: its records up to the damage are
//! merged, the error is kept for the file's summary, and the other files go on.
//!
//! **Windows.** [`Capture::set_window`] keeps only the records inside `[from, to)`; record numbers still
//! count every record of the merged stream, so a frame keeps its number whatever the window. A window that
//! took nothing from a capture that has records is a mistake the user must hear of (a silent empty result
//! reads as "no traffic"): [`Capture::check_window`] says so, with the capture's span.

use std::fmt;
use std::io::Read;
use std::path::PathBuf;

use thiserror::Error;

use crate::inputs::{Input, Inputs};
use crate::read::{
    CaptureReader, Compression, CustomBlock, Format, IfStats, Interface, RawBlock, Record,
    SourceError,
};

mod batch;
mod copy;
pub use batch::RecordBatch;
pub use copy::KeptBlock;

/// Custom block data kept over all files (each file is also bounded on its own).
const MAX_CUSTOM_BYTES: usize = 256 << 20;

/// One tap: an interface of a file (or of a rotated set of files), as every table names it.
#[derive(Debug, Clone)]
pub struct Tap {
    /// `FILE:IFACE`, unique in the capture.
    pub name: String,
    /// The index in [`Capture::files`] of the file that declared it first.
    pub file: usize,
    /// The interface's index in that file.
    pub interface: u32,
    /// The interface as that file describes it.
    pub description: Interface,
    /// Its statistics blocks' counters, summed over the files of a rotated set.
    pub stats: IfStats,
    /// The interface's description block as stored, options and all, when the capture was opened to be
    /// copied ([`Capture::reopen_to_copy`]) and the file is pcapng.
    pub block: Option<RawBlock>,
}

/// What became of one input file.
#[derive(Debug)]
pub struct FileSummary {
    /// The path as given (`-` for standard input).
    pub name: String,
    /// pcap (flavour) or pcapng; `None` when the file could not be opened.
    pub format: Option<Format>,
    /// How the file was compressed.
    pub compression: Option<Compression>,
    /// Records of this file inside the window.
    pub frames: u64,
    /// Their timestamps' range.
    pub first_ns: Option<u64>,
    /// See `first_ns`.
    pub last_ns: Option<u64>,
    /// Size on disk, when it is a file.
    pub size: Option<u64>,
    /// Its taps, by index into [`Capture::taps`].
    pub taps: Vec<u32>,
    /// The file of a rotated set whose taps this one continues.
    pub continues: Option<usize>,
    /// Where reading stopped early, or why the file could not be read at all.
    pub error: Option<SourceError>,
}

/// A time window, each end absolute (ns since the epoch) or relative to the capture's first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Nanoseconds since the Unix epoch.
    At(u64),
    /// Nanoseconds after the first record of the capture (over every file, before any window).
    After(u64),
}

impl fmt::Display for Bound {
    /// As the user writes it: `+2.5s` after the first record, or seconds since the epoch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Bound::After(ns) => write!(f, "+{}s", Seconds(ns)),
            Bound::At(ns) => write!(f, "{}", Seconds(ns)),
        }
    }
}

/// Nanoseconds as seconds, with as many decimals as they need (none for whole seconds).
struct Seconds(u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, ns) = (self.0 / 1_000_000_000, self.0 % 1_000_000_000);
        if ns == 0 {
            return write!(f, "{s}");
        }
        let frac = format!("{ns:09}");
        write!(f, "{s}.{}", frac.trim_end_matches('0'))
    }
}

/// A window that cannot select anything, or selected nothing.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowError {
    /// `--to` is not after `--from`.
    #[error("the window --from {from} --to {to} is empty: it must end after it starts")]
    Inverted {
        /// The start, as given.
        from: Bound,
        /// The end, as given.
        to: Bound,
    },
    /// The capture has records, and none is inside the window.
    #[error("{}", missed(self))]
    Missed {
        /// The window's start, as given.
        from: Option<Bound>,
        /// The window's end, as given.
        to: Option<Bound>,
        /// The capture's first record, ns since the epoch.
        first_ns: u64,
        /// Its last record.
        last_ns: u64,
        /// Whether the window lies wholly before or after the capture, rather than in a stretch of it
        /// without records.
        outside: bool,
    },
}

/// The sentence of [`WindowError::Missed`]: the window as given, and the capture's span in the same form
/// (offsets or epoch seconds) first, the other form after it.
fn missed(e: &WindowError) -> String {
    let WindowError::Missed {
        from,
        to,
        first_ns,
        last_ns,
        outside,
    } = *e
    else {
        return String::new();
    };
    let window: Vec<String> = [("--from", from), ("--to", to)]
        .into_iter()
        .filter_map(|(name, b)| b.map(|b| format!("{name} {b}")))
        .collect();
    let relative = format!("+0s to {}", Bound::After(last_ns.saturating_sub(first_ns)));
    let absolute = format!("{} to {}", Bound::At(first_ns), Bound::At(last_ns));
    let user_relative = matches!(from.or(to), Some(Bound::After(_)));
    let span = if user_relative {
        format!("{relative} ({absolute} since the epoch)")
    } else {
        format!("{absolute} since the epoch ({relative})")
    };
    let window = window.join(" ");
    if outside {
        format!("the window {window} lies outside the capture, which spans {span}")
    } else {
        format!("no frame of the capture lies in the window {window}; the capture spans {span}")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Peeked at and closed; opened when the merge reaches its first record.
    Waiting,
    /// Open, with its next record current in the reader.
    Reading,
    /// Finished: read to its end, or to its damage.
    Done,
}

#[derive(Debug)]
struct File {
    input: Input,
    state: State,
    reader: Option<CaptureReader>,
    /// The first record's timestamp, from the peek; `None` for a file without records.
    first_ns: Option<u64>,
    /// Local interface index → tap index; grows as interfaces appear.
    tap_of: Vec<u32>,
    /// The current record's timestamp and interface, while reading.
    head: (u64, u32),
    /// The latest timestamp read, inside the window or not: where a rotated set's next file may start.
    last_any_ns: Option<u64>,
    /// Whether a later file continues this one's taps.
    continued: bool,
    /// The interfaces it declared, kept when the reader is dropped, for a later file to compare.
    interfaces: Vec<Interface>,
    summary: FileSummary,
    /// Whether its reader keeps every block, for a copy.
    keep: bool,
    /// Blocks Wireshark lists as records, read up to the record the file last handed out.
    listed: u64,
}

/// Several capture files read as one, in time order. See the module documentation.
#[derive(Debug)]
pub struct Capture {
    files: Vec<File>,
    /// Waiting files by first timestamp, latest first, so the next one to open is at the end.
    waiting: Vec<usize>,
    /// Files with a current record.
    reading: Vec<usize>,
    /// The file whose record was handed out last: it moves on at the next call.
    handed: Option<usize>,
    taps: Vec<Tap>,
    custom: Vec<CustomBlock>,
    custom_bytes: usize,
    number: u64,
    /// Blocks Wireshark lists as records of their own (custom blocks), over every file so far: they take
    /// frame numbers in Wireshark, so they take them here too.
    listed: u64,
    first_ns: Option<u64>,
    window: (u64, u64),
    /// The window's ends as the user gave them, for the messages about it.
    bounds: (Option<Bound>, Option<Bound>),
    /// Source bytes of the files already closed, for progress.
    closed_bytes: u64,
    skipped: Vec<(PathBuf, String)>,
    /// Whether every input can be opened again from its path (not standard input, not a reader).
    rereadable: bool,
    /// The blocks the files that have ended left after their last record, for a copy.
    kept: Vec<KeptBlock>,
    /// Blocks of the files that have ended that were too long to keep for a copy.
    too_large: u64,
}

impl Capture {
    /// Opens every input. Each file is peeked at for its first timestamp; a file that is not a capture at all
    /// is an error when it is the only input, and a file with an error in its summary otherwise.
    pub fn open(inputs: Inputs) -> Result<Capture, SourceError> {
        Capture::open_with(inputs, false)
    }

    /// [`Capture::open`], keeping every block of the files for a copy when `keep` is set.
    fn open_with(inputs: Inputs, keep: bool) -> Result<Capture, SourceError> {
        let single = inputs.files.len() == 1;
        let mut files = Vec::with_capacity(inputs.files.len());
        for input in inputs.files {
            let mut file = File::new(input);
            file.keep = keep;
            match file.peek() {
                Ok(()) => {}
                Err(e) if single => return Err(e),
                Err(e) => file.fail(e),
            }
            files.push(file);
        }
        Ok(Capture::start(files, inputs.skipped))
    }

    /// One file, by path, as a capture (no directories or patterns: see [`crate::inputs::resolve`]).
    pub fn open_file(path: &std::path::Path) -> Result<Capture, SourceError> {
        let input = if path.as_os_str() == "-" {
            Input::Stdin
        } else {
            Input::file(path)
        };
        Capture::open(Inputs {
            files: vec![input],
            ..Inputs::default()
        })
    }

    /// One capture from any byte stream (a test's bytes, a pipe): the same merge over a single file.
    pub fn from_reader(name: &str, r: Box<dyn Read + Send>) -> Result<Capture, SourceError> {
        let mut file = File::new(Input::file(name));
        let mut reader = CaptureReader::from_reader(name, r)?;
        let first = reader.advance();
        file.open_reader(reader);
        if let Err(e) = first {
            file.summary.error = Some(e);
        }
        let mut capture = Capture::start(vec![file], Vec::new());
        capture.rereadable = false;
        Ok(capture)
    }

    fn start(mut files: Vec<File>, skipped: Vec<(PathBuf, String)>) -> Capture {
        let first_ns = files.iter().filter_map(|f| f.first_ns).min();
        let rereadable = files.iter().all(|f| matches!(f.input, Input::File { .. }));
        let mut waiting: Vec<usize> = (0..files.len())
            .filter(|&i| files[i].state == State::Waiting)
            .collect();
        // Latest first, ties to the later file, so that popping gives the earliest, then the file named first.
        waiting.sort_by_key(|&i| (std::cmp::Reverse(files[i].first_ns), std::cmp::Reverse(i)));
        let mut capture = Capture {
            files: Vec::new(),
            waiting,
            reading: Vec::new(),
            handed: None,
            taps: Vec::new(),
            custom: Vec::new(),
            custom_bytes: 0,
            number: 0,
            listed: 0,
            first_ns,
            window: (0, u64::MAX),
            bounds: (None, None),
            closed_bytes: 0,
            skipped,
            rereadable,
            kept: Vec::new(),
            too_large: 0,
        };
        // Files already open (standard input, a stream) start reading at once.
        for (i, f) in files.iter_mut().enumerate() {
            if f.state == State::Reading {
                capture.reading.push(i);
            }
        }
        capture.files = files;
        for i in capture.reading.clone() {
            capture.attach_taps(i);
            capture.finish_if_empty(i);
        }
        capture
    }

    /// The same inputs opened again, with the same window, for a pass that must read the start of the
    /// capture a second time; the records come with the same numbers and taps. `None` when an input cannot
    /// be read twice (standard input, a capture made from a reader).
    pub fn reopen(&self) -> Option<Result<Capture, SourceError>> {
        self.reopen_with(false)
    }

    fn reopen_with(&self, keep: bool) -> Option<Result<Capture, SourceError>> {
        if !self.rereadable {
            return None;
        }
        let inputs = Inputs {
            files: self.files.iter().map(|f| f.input.clone()).collect(),
            skipped: self.skipped.clone(),
            repeats: Vec::new(),
        };
        Some(Capture::open_with(inputs, keep).map(|mut c| {
            c.window = self.window;
            c.bounds = self.bounds;
            c
        }))
    }

    /// Whether [`Capture::reopen`] can read the inputs again.
    pub fn rereadable(&self) -> bool {
        self.rereadable
    }

    /// Keeps only records with `from <= ts < to`; a window that cannot hold anything (`to` not after
    /// `from`) is refused before anything is read.
    pub fn set_window(
        &mut self,
        from: Option<Bound>,
        to: Option<Bound>,
    ) -> Result<(), WindowError> {
        let first = self.first_ns.unwrap_or(0);
        let at = |b: Bound| match b {
            Bound::At(ns) => ns,
            Bound::After(ns) => first.saturating_add(ns),
        };
        let window = (from.map_or(0, at), to.map_or(u64::MAX, at));
        if let (Some(from), Some(to)) = (from, to)
            && window.0 >= window.1
        {
            return Err(WindowError::Inverted { from, to });
        }
        self.window = window;
        self.bounds = (from, to);
        Ok(())
    }

    /// Once the capture has been read to its end: an error when the window took none of the records it
    /// has, naming the window and the capture's span. A window that took records, whatever they hold, and
    /// a capture without records (every file empty or unreadable, which other messages explain) pass.
    pub fn check_window(&self) -> Result<(), WindowError> {
        let ended = self.reading.is_empty() && self.waiting.is_empty();
        let taken: u64 = self.files.iter().map(|f| f.summary.frames).sum();
        let last = self.files.iter().filter_map(|f| f.last_any_ns).max();
        let (Some(first_ns), Some(last_ns)) = (self.first_ns, last) else {
            return Ok(());
        };
        if !ended || taken > 0 || self.bounds == (None, None) {
            return Ok(());
        }
        let (from, to) = self.window;
        Err(WindowError::Missed {
            from: self.bounds.0,
            to: self.bounds.1,
            first_ns: first_ns.min(last_ns),
            last_ns,
            outside: from > last_ns || to <= first_ns,
        })
    }

    /// The window in absolute nanoseconds, `[from, to)`.
    pub fn window(&self) -> (u64, u64) {
        self.window
    }

    /// The next record in time order with its number in the merged stream (1-based; records outside the
    /// window count too), its `iface` the tap's index; `None` once every file has ended. The number counts
    /// the custom blocks before the record as Wireshark does, so that in a single file it is Wireshark's
    /// frame number and a frame named by a finding is the one Wireshark shows under that number.
    pub fn next_record(&mut self) -> Option<(u64, Record<'_>)> {
        loop {
            let i = match self.next_buffered() {
                Some(i) => i,
                None => self.next_file()?,
            };
            if self.take(i) {
                return self
                    .record_of(i)
                    .map(|rec| (self.number + self.listed, rec));
            }
        }
    }

    /// Counts file `i`'s current record, the next of the merged stream: whether it is inside the window.
    #[inline]
    fn take(&mut self, i: usize) -> bool {
        self.number += 1;
        // Custom blocks the file read on its way to this record take numbers before it, whichever path
        // (buffered or general) found the record.
        if let Some(reader) = &self.files[i].reader {
            let now = reader.listed_blocks();
            self.listed += now.saturating_sub(self.files[i].listed);
            self.files[i].listed = now;
        }
        let (ts, iface) = self.files[i].head;
        let file = &mut self.files[i];
        file.last_any_ns = Some(file.last_any_ns.map_or(ts, |l| l.max(ts)));
        if ts < self.window.0 || ts >= self.window.1 {
            return false;
        }
        file.summary.frames += 1;
        file.summary.first_ns = Some(file.summary.first_ns.map_or(ts, |f| f.min(ts)));
        file.summary.last_ns = Some(file.summary.last_ns.map_or(ts, |l| l.max(ts)));
        if iface as usize >= file.tap_of.len() {
            self.attach_taps(i);
        }
        true
    }

    /// [`Capture::next_file`] for the common case, the run of records one file has to itself (one file, or
    /// one of a rotated set, before the next file's first record): its next record when it is buffered and
    /// plainly a packet ([`CaptureReader::advance_buffered`]). `None` leaves the choice to `next_file`, with
    /// the file moved on or not as that expects.
    #[inline]
    fn next_buffered(&mut self) -> Option<usize> {
        let i = self.handed?;
        if self.reading.len() != 1 {
            return None;
        }
        // A waiting file opens once the merge passes its first record.
        let limit = match self.waiting.last() {
            None => u64::MAX,
            Some(&w) => self.files[w].first_ns?,
        };
        let file = &mut self.files[i];
        if !file.reader.as_mut()?.advance_buffered() {
            return None;
        }
        file.head = file.reader.as_ref().map_or((0, 0), head);
        if file.head.0 > limit {
            // Moved on, so `next_file` must not move it again: it only chooses.
            self.handed = None;
            return None;
        }
        Some(i)
    }

    /// File `i`'s current record, its `iface` its tap's index.
    fn record_of(&self, i: usize) -> Option<Record<'_>> {
        let file = &self.files[i];
        let mut rec = file.reader.as_ref()?.current()?;
        let tap = file.tap_of.get(rec.iface as usize).copied().unwrap_or(0);
        rec.iface = tap;
        // One line rate per tap: a rotated set's later files (a classic pcap among them cannot record
        // one) read at the speed its first file gave the tap.
        rec.speed_bps = self
            .taps
            .get(tap as usize)
            .and_then(|t| t.description.speed_bps);
        Some(rec)
    }

    /// The file holding the next record in time order, its reader moved onto it.
    fn next_file(&mut self) -> Option<usize> {
        if let Some(i) = self.handed.take() {
            self.advance(i);
        }
        // One file and nothing waiting: the common case needs no choice.
        if let ([i], []) = (self.reading.as_slice(), self.waiting.as_slice()) {
            self.handed = Some(*i);
            return Some(*i);
        }
        loop {
            // The earliest current record over the files being read; ties to the file named first.
            let mut best: Option<(u64, usize)> = None;
            for &i in &self.reading {
                let ts = self.files[i].head.0;
                if best.is_none_or(|(b, j)| (ts, i) < (b, j)) {
                    best = Some((ts, i));
                }
            }
            // A waiting file opens once the merge has reached its first record.
            if let Some(&w) = self.waiting.last() {
                let due = match (best, self.files[w].first_ns) {
                    (None, _) | (_, None) => true,
                    (Some((ts, _)), Some(first)) => first < ts,
                };
                if due {
                    self.waiting.pop();
                    self.open_waiting(w);
                    continue;
                }
            }
            let (_, i) = best?;
            self.handed = Some(i);
            return Some(i);
        }
    }

    /// Moves file `i` to its next record, closing it at its end.
    fn advance(&mut self, i: usize) {
        let file = &mut self.files[i];
        let Some(reader) = file.reader.as_mut() else {
            return;
        };
        match reader.advance() {
            Ok(true) => file.head = head(reader),
            Ok(false) => self.close(i),
            Err(e) => {
                self.files[i].summary.error = Some(e);
                self.close(i);
            }
        }
    }

    fn open_waiting(&mut self, i: usize) {
        let reopened = match &self.files[i].input {
            Input::File { path, .. } => CaptureReader::open(path),
            // Never waiting: it was open from the start.
            Input::Stdin => return,
        };
        match reopened {
            Ok(mut reader) if self.files[i].keep => {
                reader.keep_blocks();
                self.start_waiting(i, reader);
            }
            Ok(reader) => self.start_waiting(i, reader),
            Err(e) => self.files[i].fail(e),
        }
    }

    /// Starts reading file `i`, opened when the merge reached its first record.
    fn start_waiting(&mut self, i: usize, mut reader: CaptureReader) {
        match reader.advance() {
            Ok(_) => {
                self.files[i].open_reader(reader);
                self.reading.push(i);
                self.continue_rotation(i);
                self.attach_taps(i);
                self.finish_if_empty(i);
            }
            Err(e) => {
                self.files[i].open_reader(reader);
                self.reading.push(i);
                self.attach_taps(i);
                self.files[i].summary.error = Some(e);
                self.close(i);
            }
        }
    }

    fn finish_if_empty(&mut self, i: usize) {
        let empty = self.files[i]
            .reader
            .as_ref()
            .is_some_and(|r| r.current().is_none());
        if empty {
            self.close(i);
        }
    }

    /// When file `i` begins after an earlier file has ended with the same interfaces, it continues that
    /// file's taps (a rotated set).
    fn continue_rotation(&mut self, i: usize) {
        let Some(reader) = self.files[i].reader.as_ref() else {
            return;
        };
        let mine = reader.interfaces();
        let first = self.files[i].first_ns.unwrap_or(0);
        // Names must agree where both files have one: a classic pcap file cannot record a name, and a set
        // rotated through a format change (the pcap, gzip pcap and pcapng of one test) is still one set.
        let same = |a: &[Interface], b: &[Interface]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.link == y.link
                        && match (&x.name, &y.name) {
                            (Some(m), Some(n)) => m == n,
                            _ => true,
                        }
                })
        };
        let earlier = (0..self.files.len())
            .filter(|&j| j != i)
            .filter(|&j| {
                let f = &self.files[j];
                f.state == State::Done
                    && !f.continued
                    && f.last_any_ns.is_some_and(|l| l <= first)
                    && same(&f.interfaces, mine)
            })
            .max_by_key(|&j| (self.files[j].last_any_ns, j));
        if let Some(j) = earlier {
            let taps = self.files[j].tap_of.clone();
            self.files[j].continued = true;
            self.files[i].tap_of = taps.clone();
            self.files[i].summary.taps = taps;
            self.files[i].summary.continues = Some(j);
        }
    }

    /// Gives every interface file `i` has declared so far a tap.
    fn attach_taps(&mut self, i: usize) {
        let file = &mut self.files[i];
        let Some(reader) = file.reader.as_ref() else {
            return;
        };
        let known = file.tap_of.len();
        for (local, iface) in reader.interfaces().iter().enumerate().skip(known) {
            let label = match &iface.name {
                Some(n) if !n.is_empty() => n.clone(),
                _ => local.to_string(),
            };
            let mut tap_name = format!("{}:{label}", file.summary.name);
            // The same file named twice, or two interfaces of one name: keep names unique.
            if self.taps.iter().any(|t| t.name == tap_name) {
                tap_name = format!("{tap_name}#{local}");
            }
            let index = self.taps.len() as u32;
            self.taps.push(Tap {
                name: tap_name,
                file: i,
                interface: local as u32,
                description: iface.clone(),
                stats: IfStats::default(),
                block: reader.interface_block(local).cloned(),
            });
            file.tap_of.push(index);
            file.summary.taps.push(index);
        }
    }

    /// Ends file `i`: its statistics go to its taps, its custom blocks to the capture, its reader away.
    fn close(&mut self, i: usize) {
        self.attach_taps(i);
        self.reading.retain(|&j| j != i);
        let file = &mut self.files[i];
        file.state = State::Done;
        let Some(mut reader) = file.reader.take() else {
            return;
        };
        self.closed_bytes += reader.source_bytes_read();
        file.interfaces = reader.interfaces().to_vec();
        self.too_large += reader.blocks_too_large();
        self.kept.extend(
            reader
                .take_blocks()
                .into_iter()
                .map(|block| KeptBlock { file: i, block }),
        );
        for (local, st) in reader.if_stats().iter().enumerate() {
            let Some(&tap) = file.tap_of.get(local) else {
                continue;
            };
            if let Some(t) = self.taps.get_mut(tap as usize) {
                add(&mut t.stats.received, st.received);
                add(&mut t.stats.dropped_iface, st.dropped_iface);
                add(&mut t.stats.dropped_os, st.dropped_os);
            }
        }
        for b in reader.custom_blocks() {
            if self.custom_bytes + b.data.len() <= MAX_CUSTOM_BYTES {
                self.custom_bytes += b.data.len();
                self.custom.push(b.clone());
            }
        }
    }

    /// Every tap seen so far.
    pub fn taps(&self) -> &[Tap] {
        &self.taps
    }

    /// What became of each input, in command-line order.
    pub fn files(&self) -> impl Iterator<Item = &FileSummary> {
        self.files.iter().map(|f| &f.summary)
    }

    /// Files of a directory that were passed over, and why.
    pub fn skipped(&self) -> &[(PathBuf, String)] {
        &self.skipped
    }

    /// The errors of the files that could not be read to their end.
    pub fn errors(&self) -> impl Iterator<Item = &SourceError> {
        self.files.iter().filter_map(|f| f.summary.error.as_ref())
    }

    /// The custom blocks of every file that has ended, in the order the files ended: complete once
    /// [`Capture::next_record`] has returned `None`.
    pub fn custom_blocks(&self) -> &[CustomBlock] {
        &self.custom
    }

    /// The first timestamp over every file, before any window.
    pub fn first_ns(&self) -> Option<u64> {
        self.first_ns
    }

    /// A name for the whole capture: the file's, or how many files.
    pub fn name(&self) -> String {
        match self.files.as_slice() {
            [one] => one.summary.name.clone(),
            many => format!("{} files", many.len()),
        }
    }

    /// Bytes taken from the files so far (compressed as on disk) and their total size on disk, when every
    /// input is a file: what a progress bar over all inputs shows.
    pub fn progress(&self) -> (u64, Option<u64>) {
        let open: u64 = self
            .reading
            .iter()
            .filter_map(|&i| self.files[i].reader.as_ref())
            .map(CaptureReader::source_bytes_read)
            .sum();
        let total = self
            .files
            .iter()
            .map(|f| f.summary.size)
            .sum::<Option<u64>>();
        (self.closed_bytes + open, total)
    }
}

/// The timestamp and interface of a reader's current record.
fn head(reader: &CaptureReader) -> (u64, u32) {
    reader.current().map_or((0, 0), |r| (r.ts_ns, r.iface))
}

fn add(into: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *into = Some(into.unwrap_or(0) + v);
    }
}

impl File {
    fn new(input: Input) -> File {
        let size = match &input {
            Input::File { path, .. } => std::fs::metadata(path).ok().map(|m| m.len()),
            Input::Stdin => None,
        };
        File {
            summary: FileSummary {
                name: input.name(),
                format: None,
                compression: None,
                frames: 0,
                first_ns: None,
                last_ns: None,
                size,
                taps: Vec::new(),
                continues: None,
                error: None,
            },
            input,
            state: State::Waiting,
            reader: None,
            first_ns: None,
            tap_of: Vec::new(),
            head: (0, 0),
            last_any_ns: None,
            continued: false,
            interfaces: Vec::new(),
            keep: false,
            listed: 0,
        }
    }

    /// Reads the first record's timestamp. Standard input cannot be opened twice: it stays open.
    fn peek(&mut self) -> Result<(), SourceError> {
        let mut reader = match &self.input {
            Input::File { path, .. } => CaptureReader::open(path)?,
            Input::Stdin => CaptureReader::open(std::path::Path::new("-"))?,
        };
        // Standard input stays open from here: its blocks must be kept from its first.
        if self.keep && self.input == Input::Stdin {
            reader.keep_blocks();
        }
        self.summary.format = Some(reader.format());
        self.summary.compression = reader.compression();
        match reader.advance() {
            Ok(_) => {
                self.first_ns = reader.current().map(|r| r.ts_ns);
                if self.input == Input::Stdin {
                    self.open_reader(reader);
                }
                Ok(())
            }
            // Damage before the first record: read it again when its turn comes, to report it in order.
            Err(e) if self.input == Input::Stdin => {
                self.open_reader(reader);
                self.summary.error = Some(e);
                Ok(())
            }
            Err(_) => Ok(()),
        }
    }

    fn open_reader(&mut self, reader: CaptureReader) {
        self.summary.format = Some(reader.format());
        self.summary.compression = reader.compression();
        if self.first_ns.is_none() {
            self.first_ns = reader.current().map(|r| r.ts_ns);
        }
        self.head = head(&reader);
        self.reader = Some(reader);
        self.state = State::Reading;
    }

    fn fail(&mut self, e: SourceError) {
        self.summary.error = Some(e);
        self.state = State::Done;
        self.reader = None;
    }
}
