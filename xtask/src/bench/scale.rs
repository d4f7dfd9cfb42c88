//! `cargo xtask bench --scale`: a saturation test's size, as issue #14 states its targets.
//!
//! A 15 s test at one frame per µs leaves 15 M header-only frames; here they are rotated into three files of
//! three kinds (pcap, gzip-compressed pcap, pcapng), as a tracer's rotation and a user's compression leave them,
//! and every command reads the three together. `--long` adds a 60 s test in twelve zstd files and reports
//! over its first 3, 6 and 12 files: time should grow linearly with the frames and memory stay flat.
//!
//! The capture is `samples::bulk` in its saturation mix (4,096 QPs from 64 senders, ~5 % CE, ~1 % CNPs,
//! ~0.1 % PFC of all frames). Commands run and are timed like `cargo xtask bench` (median of three).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use roce_capture::LinkType;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use samples::bulk::{self, BulkSpec, FrameSink};

use super::benchmarks_md;
use super::inputs::{build_release_analyzer, release_analyzer};
use super::measure::{
    cores_note, dir_mb, path, time_once, time_once_keeping_stderr, wrapper_overhead,
};
use crate::install;
use crate::workspace::target_dir;

/// How one file of the rotation is stored.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Pcap,
    GzipPcap,
    ZstdPcap,
    Pcapng,
}

impl Kind {
    fn file_name(self, index: usize) -> String {
        match self {
            Kind::Pcap => format!("run.{index:02}.pcap"),
            Kind::GzipPcap => format!("run.{index:02}.pcap.gz"),
            Kind::ZstdPcap => format!("run.{index:02}.pcap.zst"),
            Kind::Pcapng => format!("run.{index:02}.pcapng"),
        }
    }
}

type Out = BufWriter<File>;

/// The file being written; each kind keeps its own writer so that compressed streams are finished properly.
enum Current {
    Pcap(PcapWriter<Out>),
    Gzip(PcapWriter<flate2::write::GzEncoder<Out>>),
    Zstd(PcapWriter<zstd::Encoder<'static, Out>>),
    Pcapng(PcapngWriter<Out>),
}

impl Current {
    fn open(kind: Kind, path: &Path, snap: u32) -> io::Result<Current> {
        let out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        Ok(match kind {
            Kind::Pcap => Current::Pcap(PcapWriter::new(out, LinkType::ETHERNET, snap)?),
            Kind::GzipPcap => {
                let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                Current::Gzip(PcapWriter::new(gz, LinkType::ETHERNET, snap)?)
            }
            Kind::ZstdPcap => {
                let z = zstd::Encoder::new(out, 3)?;
                Current::Zstd(PcapWriter::new(z, LinkType::ETHERNET, snap)?)
            }
            Kind::Pcapng => {
                let mut w =
                    PcapngWriter::new(out, &SectionInfo::application("xtask bench --scale"))?;
                w.add_interface(LinkType::ETHERNET, snap, Some("mirror0"), None)?;
                Current::Pcapng(w)
            }
        })
    }

    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        match self {
            Current::Pcap(w) => w.write_packet(ts_ns, data, orig_len),
            Current::Gzip(w) => w.write_packet(ts_ns, data, orig_len),
            Current::Zstd(w) => w.write_packet(ts_ns, data, orig_len),
            Current::Pcapng(w) => w.write_packet(0, ts_ns, data, orig_len),
        }
    }

    /// Ends the compressed stream (a dropped encoder would swallow the error of its last write).
    fn finish(self) -> io::Result<()> {
        match self {
            Current::Pcap(w) => w.into_inner()?.flush(),
            Current::Gzip(w) => w.into_inner()?.finish()?.flush(),
            Current::Zstd(w) => w.into_inner()?.finish()?.flush(),
            Current::Pcapng(w) => w.into_inner()?.flush(),
        }
    }
}

/// A rotation over files of the given kinds, `per_file` frames each.
struct Rotation {
    dir: PathBuf,
    kinds: Vec<Kind>,
    per_file: u64,
    snap: u32,
    in_file: u64,
    current: Option<Current>,
    written: Vec<PathBuf>,
}

impl FrameSink for Rotation {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        if self.current.is_none() || self.in_file == self.per_file {
            if let Some(c) = self.current.take() {
                c.finish()?;
            }
            let index = self.written.len();
            let kind = *self
                .kinds
                .get(index)
                .ok_or_else(|| io::Error::other("more frames than the rotation has files"))?;
            let path = self.dir.join(kind.file_name(index));
            self.current = Some(Current::open(kind, &path, self.snap)?);
            self.written.push(path);
            self.in_file = 0;
        }
        self.in_file += 1;
        match &mut self.current {
            Some(c) => c.packet(ts_ns, data, orig_len),
            None => Err(io::Error::other("no file open")),
        }
    }
}

/// Writes the rotation into `dir` unless a finished copy is there (a `done` file marks it finished).
fn generate(dir: &Path, kinds: &[Kind], per_file: u64) -> Result<Vec<PathBuf>> {
    let names: Vec<PathBuf> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| dir.join(k.file_name(i)))
        .collect();
    let done = dir.join("done");
    if done.exists() {
        return Ok(names);
    }
    std::fs::create_dir_all(dir)?;
    let spec = BulkSpec::saturation(per_file * kinds.len() as u64);
    eprintln!(
        "xtask: generating {} frames into {} files in {}",
        spec.frames,
        kinds.len(),
        dir.display()
    );
    let mut rot = Rotation {
        dir: dir.to_path_buf(),
        kinds: kinds.to_vec(),
        per_file,
        snap: bulk::snap_length(&spec),
        in_file: 0,
        current: None,
        written: Vec::new(),
    };
    let counts = bulk::generate(&mut rot, &spec)?;
    if let Some(c) = rot.current.take() {
        c.finish()?;
    }
    std::fs::write(&done, format!("{counts:?}\n"))?;
    eprintln!("xtask: wrote {counts:?}");
    Ok(names)
}

fn counts_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("done"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// One measured command.
struct Row {
    what: String,
    frames: u64,
    seconds: f64,
    rss_mb: f64,
    out_mb: Option<f64>,
}

/// The model's loud guard, if a report printed it: any model stopped early fails the target.
fn stopped_models(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("stopped early") || l.contains("cut short") || l.contains("event budget")
        })
        .map(str::to_string)
}

struct Bench {
    analyzer: String,
    overhead: f64,
    rows: Vec<Row>,
    warnings: Vec<String>,
}

impl Bench {
    fn stats(&mut self, what: &str, frames: u64, files: &[PathBuf]) -> Result<()> {
        eprintln!("xtask: measuring {what}");
        let mut argv = vec![self.analyzer.clone(), "stats".into()];
        argv.extend(files.iter().map(|f| path(f)));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(time_once(&argv, self.overhead)?);
        }
        self.push(what, frames, runs, None);
        Ok(())
    }

    fn report(&mut self, what: &str, frames: u64, files: &[PathBuf], out: &Path) -> Result<()> {
        eprintln!("xtask: measuring {what}");
        let mut argv = vec![self.analyzer.clone(), "report".into()];
        argv.extend(files.iter().map(|f| path(f)));
        argv.extend(["-o".into(), path(out)]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut runs = Vec::new();
        let mut out_mb = 0.0;
        for _ in 0..3 {
            let _ = std::fs::remove_dir_all(out);
            let (secs, rss, stderr) = time_once_keeping_stderr(&argv, self.overhead)?;
            if let Some(line) = stopped_models(&stderr) {
                self.warnings.push(format!("{what}: {line}"));
            }
            out_mb = dir_mb(out)?;
            runs.push((secs, rss));
        }
        self.push(what, frames, runs, Some(out_mb));
        Ok(())
    }

    fn push(&mut self, what: &str, frames: u64, mut runs: Vec<(f64, f64)>, out_mb: Option<f64>) {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let rss_mb = runs.iter().map(|r| r.1).fold(0.0, f64::max);
        self.rows.push(Row {
            what: what.into(),
            frames,
            seconds: runs[runs.len() / 2].0,
            rss_mb,
            out_mb,
        });
    }

    fn row(&self, what: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.what == what)
    }
}

/// Where the saturation set of `per_file` frames a file is kept between runs.
fn set_dir(per_file: u64) -> PathBuf {
    target_dir().join("bench").join(format!("scale-{per_file}"))
}

/// The saturation set: three rotated files of `per_file` frames each (pcap, gzip pcap, pcapng), written on
/// the first call and kept; this bench's capture, and `bench --cores`'s second.
pub(super) fn saturation_set(per_file: u64) -> Result<Vec<PathBuf>> {
    generate(
        &set_dir(per_file),
        &[Kind::Pcap, Kind::GzipPcap, Kind::Pcapng],
        per_file,
    )
}

const STATS3: &str = "stats, 3 files";
const REPORT3: &str = "report, 3 files";
const REPORT1: &str = "report, first file";

pub fn run(per_file: u64, long: bool) -> Result<()> {
    install::ensure_apt(&["time"])?;
    build_release_analyzer(&[])?;
    let base = target_dir().join("bench");
    let three = saturation_set(per_file)?;
    let mut b = Bench {
        analyzer: path(&release_analyzer()),
        overhead: wrapper_overhead()?,
        rows: Vec::new(),
        warnings: Vec::new(),
    };
    let out = base.join("scale-report");
    // Warm the page cache with the files' bytes.
    time_once(
        &[
            &b.analyzer,
            "stats",
            &path(&three[0]),
            &path(&three[1]),
            &path(&three[2]),
        ],
        0.0,
    )?;
    b.stats(STATS3, 3 * per_file, &three)?;
    b.report(REPORT3, 3 * per_file, &three, &out)?;
    b.report(REPORT1, per_file, &three[..1], &out)?;
    let mut long_rows = Vec::new();
    if long {
        let kinds = vec![Kind::ZstdPcap; 12];
        let twelve = generate(
            &base.join(format!("scale-long-{per_file}")),
            &kinds,
            per_file,
        )?;
        for n in [3usize, 6, 12] {
            let what = format!("report, {n} zstd files of the long run");
            b.report(&what, n as u64 * per_file, &twelve[..n], &out)?;
            long_rows.push(what);
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    let text = render(&b, per_file, &long_rows)?;
    println!("{text}");
    benchmarks_md::update("scale", &text, "")
}

fn render(b: &Bench, per_file: u64, long_rows: &[String]) -> Result<String> {
    let mut s = String::new();
    let dir = set_dir(per_file);
    let sizes: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "done")
        .map(|e| {
            let mb = e.metadata().map_or(0.0, |m| m.len() as f64 / 1e6);
            format!("`{}` {mb:.0} MB", e.file_name().to_string_lossy())
        })
        .collect();
    s.push_str(&format!(
        "Capture: `samples::bulk` in its saturation mix, {} frames per file over 4,096 QPs from 64 senders, one \
         frame per µs, header-only (128 B); written as {} ({}). Machine and timing as above: {}, median \
         of three runs, wall time and peak RSS by GNU time.\n\n",
        per_file,
        sizes.join(", "),
        counts_of(&dir),
        cores_note()
    ));
    s.push_str("| what | frames | seconds | M frames/s | peak RSS MB | report dir MB |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|\n");
    for r in &b.rows {
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {} |\n",
            r.what,
            r.frames,
            r.seconds,
            r.frames as f64 / r.seconds / 1e6,
            r.rss_mb,
            r.out_mb.map_or("–".into(), |m| format!("{m:.1}"))
        ));
    }
    let (Some(st), Some(r3), Some(r1)) = (b.row(STATS3), b.row(REPORT3), b.row(REPORT1)) else {
        bail!("a measurement is missing");
    };
    let ok = |c: bool| if c { "met" } else { "**missed**" };
    let ratio = r3.seconds / st.seconds;
    let rss_ratio = r3.rss_mb / r1.rss_mb;
    let st_fps = st.frames as f64 / st.seconds;
    let out_mb = r3.out_mb.unwrap_or(f64::MAX);
    s.push_str("\nTargets of issue #14:\n\n");
    s.push_str(&format!(
        "- `report` ≤ 3× `stats` on the same inputs: {ratio:.2}× — {}\n",
        ok(ratio <= 3.0)
    ));
    s.push_str(&format!(
        "- peak RSS < 1 GB and within 1.25× of the report over the first file: {:.0} MB, {rss_ratio:.2}× — {}\n",
        r3.rss_mb,
        ok(r3.rss_mb < 1000.0 && rss_ratio <= 1.25)
    ));
    s.push_str(&format!(
        "- no model cut short: {}\n",
        if b.warnings.is_empty() {
            "none was (no report printed the guard's warning) — met".to_string()
        } else {
            format!("**missed**: {}", b.warnings.join("; "))
        }
    ));
    s.push_str(&format!(
        "- report directory ≤ 200 MB: {out_mb:.1} MB — {}\n",
        ok(out_mb <= 200.0)
    ));
    s.push_str(&format!(
        "- `stats` over the three files ≥ 10 M frames/s and < 200 MB: {:.1} M frames/s, {:.0} MB — {}\n",
        st_fps / 1e6,
        st.rss_mb,
        ok(st_fps >= 10e6 && st.rss_mb < 200.0)
    ));
    if !long_rows.is_empty() {
        let rows: Vec<&Row> = long_rows.iter().filter_map(|w| b.row(w)).collect();
        let per_m: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.2}", r.seconds / (r.frames as f64 / 1e6)))
            .collect();
        let rss: Vec<String> = rows.iter().map(|r| format!("{:.0}", r.rss_mb)).collect();
        s.push_str(&format!(
            "- the long run (12 files, {} frames, {} s of traffic): seconds per million frames {} over 3, 6 and 12 \
             files (linear when these stay level); peak RSS {} MB (flat when these stay level)\n",
            12 * per_file,
            12 * per_file / 1_000_000,
            per_m.join(" / "),
            rss.join(" / ")
        ));
    }
    Ok(s)
}
