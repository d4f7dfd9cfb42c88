//! Facts about the capture itself: how much of what, over which span, from which files and taps, and what
//! the recorder says it missed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::decode::{Frame, Kind};
use crate::line::{LineRate, LineRates};
use roce_capture::Capture;

/// Counts, span and timestamp sanity of the whole capture, whatever the frames are.
#[derive(Debug, Default)]
pub struct CapturePass {
    frames: u64,
    bytes: u64,
    captured_bytes: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    by_kind: [u64; Kind::ALL.len()],
    truncated: u64,
    /// The previous frame's timestamp, for the gap and order checks.
    prev_ns: Option<u64>,
    /// The longest step forward between consecutive frames, and the frame after it.
    gap: (u64, u64),
    backwards: u64,
}

/// One tap (an interface of a file, or of a rotated set of files) as the file describes it, with the drop
/// counters its statistics blocks recorded and the line rate the analysis took for it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InterfaceRow {
    /// The tap's index over the capture: the `iface` of the flows, CNP and PFC tables.
    pub id: u32,
    /// `FILE:IFACE`.
    pub tap: String,
    /// The file that declared it, and the interface's index there.
    pub file: String,
    /// The interface's index inside that file.
    pub interface: u32,
    /// The link type's name (`ethernet`, `linux-sll`, ...).
    pub link_type: String,
    /// The interface name the file gives, if any.
    pub name: Option<String>,
    /// Bytes kept per frame at most: below a frame's length, its payload (and ICRC) were not captured.
    pub snaplen: u32,
    /// The timestamp unit the file declares (DCQCN timing needs ns or µs at worst).
    pub ts_resolution: String,
    /// Frames the recorder says it received, from the last statistics block.
    pub received: Option<u64>,
    /// Frames the recorder says it dropped: what this capture cannot show.
    pub dropped: Option<u64>,
    /// The interface's `if_speed` as the file records it, bit/s; null when it records none.
    pub if_speed_bps: Option<u64>,
    /// The line rate this tap's pause quanta (and, in `report`, its flows' models) were computed at:
    /// `line_gbps`, and `line_rate_source` (`if_speed`, `flag` for `--link-speed`, or `assumed`, 100 Gb/s).
    #[serde(flatten)]
    pub line: LineRate,
}

/// One input file and what became of it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileRow {
    /// The path as given (or found in a directory).
    pub file: String,
    /// As [`CaptureRow::format`]; null when the file could not be opened.
    pub format: Option<String>,
    /// `gzip`, `zstd` or `lz4` when the file was compressed.
    pub compression: Option<String>,
    /// Records of this file inside the window, and their span.
    pub frames: u64,
    /// The first record's time inside the window.
    pub first_ns: Option<u64>,
    /// The last record's time inside the window.
    pub last_ns: Option<u64>,
    /// Its taps by name.
    pub taps: Vec<String>,
    /// The file of a rotated set whose taps this one continues.
    pub continues: Option<String>,
    /// Where reading stopped early, or why it could not be read.
    pub error: Option<String>,
}

/// The `capture` section of `stats`: everything said about the input rather than its flows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CaptureRow {
    /// The file's name, or how many files.
    pub file: String,
    /// `pcapng`, or `pcap-` with the timestamp unit and byte order; `mixed` over files of several formats.
    pub format: String,
    /// Every input file (one for a single capture).
    pub files: Vec<FileRow>,
    /// The window the frames were taken from (`--from`/`--to`), when one was given: `[from, to)` in ns.
    pub window_from_ns: Option<u64>,
    /// The window's end, exclusive.
    pub window_to_ns: Option<u64>,
    /// Records read (inside the window).
    pub frames: u64,
    /// Sum of original frame lengths.
    pub bytes: u64,
    /// Sum of the bytes actually stored (below `bytes` under a snap length).
    pub captured_bytes: u64,
    /// The earliest timestamp.
    pub first_ns: Option<u64>,
    /// The latest timestamp.
    pub last_ns: Option<u64>,
    /// `last_ns - first_ns`.
    pub duration_ns: u64,
    /// Frames per decoded kind (`roce`, `cnp`, `pfc`, `pause`, `other`).
    pub frames_by_kind: BTreeMap<&'static str, u64>,
    /// Frames stored shorter than they were on the wire.
    pub truncated_frames: u64,
    /// The longest time between two consecutive frames, and the number of the later one. One record with a
    /// corrupt timestamp shows here as most of `duration_ns`.
    pub largest_gap_ns: u64,
    /// The number of the frame after the largest gap.
    pub largest_gap_frame: Option<u64>,
    /// Frames stamped earlier than the frame before them (normal across the interfaces of a merged capture).
    pub timestamps_backwards: u64,
    /// Every tap of every file.
    pub interfaces: Vec<InterfaceRow>,
    /// Drops the recorder counted (pcapng interface statistics); null when the file does not say.
    pub dropped: Option<u64>,
    /// Where reading stopped early, for each damaged file (joined by `; `).
    pub error: Option<String>,
}

impl CapturePass {
    /// Counts one frame and checks its timestamp against the previous one.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.record(f.number, f.ts_ns, f.len, f.caplen);
        self.kind(f);
    }

    /// What a record says without decoding: its size, and its time against the record before it. Several
    /// threads share a capture's frames, but only the one that reads them sees each record in order: it
    /// counts this part, the others [`CapturePass::kind`].
    #[inline]
    pub fn record(&mut self, number: u64, ts_ns: u64, len: u32, caplen: u32) {
        self.frames += 1;
        self.bytes += u64::from(len);
        self.captured_bytes += u64::from(caplen);
        self.first_ns = Some(self.first_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ns = self.last_ns.max(ts_ns);
        if let Some(prev) = self.prev_ns {
            if ts_ns < prev {
                self.backwards += 1;
            } else if ts_ns - prev > self.gap.0 {
                self.gap = (ts_ns - prev, number);
            }
        }
        self.prev_ns = Some(ts_ns);
    }

    /// What the decoded frame says: its kind, and whether it was cut short.
    #[inline]
    pub fn kind(&mut self, f: &Frame<'_>) {
        self.by_kind[f.kind as usize] += 1;
        self.truncated += u64::from(f.truncated);
    }

    /// Adds what another thread counted with [`CapturePass::kind`].
    pub fn absorb_kinds(&mut self, other: &CapturePass) {
        for (n, o) in self.by_kind.iter_mut().zip(other.by_kind) {
            *n += o;
        }
        self.truncated += other.truncated;
    }

    /// The last timestamp seen: the end of the capture's span.
    pub fn last_ns(&self) -> u64 {
        self.last_ns
    }

    /// The row, with the files' and taps' facts that only the capture knows at its end (drops, errors), and
    /// each tap's line rate by `lines`.
    pub fn finish(self, capture: &Capture, lines: LineRates) -> CaptureRow {
        let taps = capture.taps();
        let file_names: Vec<String> = capture.files().map(|f| f.name.clone()).collect();
        let interfaces: Vec<InterfaceRow> = taps
            .iter()
            .enumerate()
            .map(|(i, tap)| {
                let st = tap.stats;
                let dropped = match (st.dropped_iface, st.dropped_os) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                let ifc = &tap.description;
                InterfaceRow {
                    id: i as u32,
                    tap: tap.name.clone(),
                    file: file_names.get(tap.file).cloned().unwrap_or_default(),
                    interface: tap.interface,
                    link_type: ifc.link.name().to_string(),
                    name: ifc.name.clone(),
                    snaplen: ifc.snaplen,
                    ts_resolution: ifc.ts_resol_desc.clone(),
                    received: st.received,
                    dropped,
                    if_speed_bps: ifc.speed_bps,
                    line: lines.of_tap(tap),
                }
            })
            .collect();
        let dropped = interfaces
            .iter()
            .filter_map(|i| i.dropped)
            .reduce(|a, b| a + b);
        let files: Vec<FileRow> = capture
            .files()
            .map(|f| FileRow {
                file: f.name.clone(),
                format: f.format.map(|x| x.name().to_owned()),
                compression: f.compression.map(|c| c.name().to_owned()),
                frames: f.frames,
                first_ns: f.first_ns,
                last_ns: f.last_ns,
                taps: f
                    .taps
                    .iter()
                    .filter_map(|&t| taps.get(t as usize).map(|t| t.name.clone()))
                    .collect(),
                continues: f.continues.and_then(|j| file_names.get(j).cloned()),
                error: f.error.as_ref().map(ToString::to_string),
            })
            .collect();
        let mut formats: Vec<&str> = files.iter().filter_map(|f| f.format.as_deref()).collect();
        formats.sort_unstable();
        formats.dedup();
        let format = match formats.as_slice() {
            [one] => (*one).to_owned(),
            [] => "none".to_owned(),
            _ => "mixed".to_owned(),
        };
        let errors: Vec<String> = capture.errors().map(ToString::to_string).collect();
        let (from, to) = capture.window();
        CaptureRow {
            file: capture.name(),
            format,
            files,
            window_from_ns: (from > 0).then_some(from),
            window_to_ns: (to < u64::MAX).then_some(to),
            frames: self.frames,
            bytes: self.bytes,
            captured_bytes: self.captured_bytes,
            first_ns: self.first_ns,
            last_ns: self.first_ns.map(|_| self.last_ns),
            duration_ns: self.first_ns.map_or(0, |f| self.last_ns - f),
            frames_by_kind: Kind::ALL
                .iter()
                .map(|k| (k.as_str(), self.by_kind[*k as usize]))
                .collect(),
            truncated_frames: self.truncated,
            largest_gap_ns: self.gap.0,
            largest_gap_frame: (self.gap.1 > 0).then_some(self.gap.1),
            timestamps_backwards: self.backwards,
            interfaces,
            dropped,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_capture::{LinkType, Record};

    fn at(pass: &mut CapturePass, number: u64, ts_ns: u64) {
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            speed_bps: None,
            ts_ns,
            caplen: 0,
            len: 0,
            data: &[],
            offset: 0,
        };
        pass.frame(&Frame::empty(number, &rec));
    }

    #[test]
    fn largest_gap_and_backward_steps() {
        let mut p = CapturePass::default();
        at(&mut p, 1, 1_000);
        assert_eq!((p.gap, p.backwards), ((0, 0), 0), "one frame has no gap");
        // 1 → 2: +500; 2 → 3: back 200; 3 → 4: +5000 (the largest); 4 → 5: +5000 again (a tie keeps the first).
        for (n, t) in [(2, 1_500), (3, 1_300), (4, 6_300), (5, 11_300)] {
            at(&mut p, n, t);
        }
        assert_eq!(p.gap, (5_000, 4));
        assert_eq!(p.backwards, 1);
    }
}
