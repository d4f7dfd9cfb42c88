//! `roce-analyzer annotate`: the capture written back as one pcapng file with the analysis in its packet
//! comments, for Wireshark and tshark (`tshark -Y frame.comment`).
//!
//! Two reads, as `report` reads twice for its hops: the analysis first, then the copy
//! ([`roce_capture::rewrite`]), which meets each frame again in the same order and numbering and adds what
//! the analysis says about it. The comments are the analysis' own results, never a second analysis:
//! [`cnps`] (each CNP: the flow it throttles or why none, and the model's rate after it), [`flows`] (each
//! flow's first packet: its row of the flows table, its DCQCN model in brief) and [`findings`] (the packets
//! a finding points at). Memory holds what the analysis holds plus a table per flow, never the packets.
//!
//! The output is written to a temporary file beside it and renamed into place once the copy has checked
//! that the second read met the same frames as the first: a file that changed in between fails the command
//! rather than leave comments on the wrong packets.

mod cnps;
mod findings;
mod flows;

use std::collections::BTreeMap;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use roce_capture::rewrite::{CopySummary, Rewriter};
use roce_capture::{Capture, SourceError};
use roce_core::decode::{Decoder, Frame, Kind};
use roce_core::passes::flows::FlowKey;

use crate::analysis::Analysis;
pub use cnps::CnpModels;

/// Why the annotated copy could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// Standard input (or a stream) cannot be read a second time for the copy.
    #[error(
        "annotate reads the capture twice (the analysis, then the copy), and standard input can be read only \
         once: save it to a file first"
    )]
    NotRereadable,
    /// The output would replace one of the inputs.
    #[error("{0} is one of the inputs: write the annotated copy to another file")]
    OutputIsInput(PathBuf),
    /// Reading the capture again failed before its first record.
    #[error("reading the capture again for the copy: {0}")]
    Reopen(#[from] SourceError),
    /// Writing the output failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The output's path.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// What the models did with each CNP could not be read back from its temporary file.
    #[error(
        "reading the DCQCN models' CNPs back from their temporary file in TMPDIR: {0}; nothing was written"
    )]
    Models(io::Error),
    /// The second read did not meet what the first one did.
    #[error(
        "the capture read differently the second time ({0}): did a file change during the run? Nothing was \
         written"
    )]
    Changed(String),
}

/// What the copy wrote.
#[derive(Debug, Clone)]
pub struct Annotated {
    /// Packets, comments, interfaces and blocks written, and what was not kept.
    pub copy: CopySummary,
    /// CNP frames commented.
    pub cnps: u64,
    /// CNP frames whose comment could name no model state (they did not line up with the model's CNPs) or
    /// no stream: the comment says so.
    pub cnps_unmatched: u64,
    /// First packets of flows commented.
    pub flows: u64,
    /// Comments on the packets findings point at, by finding.
    pub findings: BTreeMap<&'static str, u64>,
}

impl Annotated {
    /// What was written, in one line for the console.
    pub fn summary(&self, out: &Path) -> String {
        let c = &self.copy;
        let findings: Vec<String> = self
            .findings
            .iter()
            .map(|(code, n)| format!("{n} {code}"))
            .collect();
        let findings = if findings.is_empty() {
            String::new()
        } else {
            format!(", {} on the packets of findings", findings.join(", "))
        };
        format!(
            "{}: {} packets, {} interface(s), {} other block(s) kept; {} comments: {} on CNPs, {} on flows' \
             first packets{findings}",
            out.display(),
            c.packets,
            c.interfaces,
            c.blocks,
            c.comments,
            self.cnps,
            self.flows
        )
    }

    /// What the copy could not do as asked, a line each.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .copy
            .not_kept
            .iter()
            .map(|(why, n)| format!("not kept in the copy: {n} × {why}"))
            .collect();
        if self.copy.rounded_timestamps > 0 {
            out.push(format!(
                "{} packets of a rotated set's later files have timestamps finer than the first file's \
                 interface records: written at the nearest earlier tick",
                self.copy.rounded_timestamps
            ));
        }
        if self.cnps_unmatched > 0 {
            out.push(format!(
                "{} CNPs could not be matched with the analysis' CNPs (their comments say so)",
                self.cnps_unmatched
            ));
        }
        out
    }
}

/// Writes `capture` (already read for `analysis`, whose model events `models` gathered) to `out` with the
/// comments, reading it again with `decoder`; `progress` hears the bytes read now and then.
pub fn annotate(
    capture: &Capture,
    analysis: &Analysis,
    models: CnpModels,
    decoder: Decoder,
    out: &Path,
    mut progress: impl FnMut(u64),
) -> Result<Annotated, AnnotateError> {
    refuse_inputs(capture, out)?;
    let write_err = |source| AnnotateError::Write {
        path: out.to_path_buf(),
        source,
    };
    let mut copy = capture
        .reopen_to_copy()
        .ok_or(AnnotateError::NotRereadable)??;
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Made as any new file is (0666 less the umask), not private as scratch files are: it becomes the output.
    let tmp = tempfile::Builder::new()
        .prefix(".annotate-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(write_err)?;
    let note = format!(
        "roce-analyzer {} annotate: packet comments starting \"rocetrace:\" carry its analysis of this \
         capture (each CNP's flow and model rate, each flow's summary, the packets of findings)",
        env!("CARGO_PKG_VERSION")
    );
    let mut writer = Rewriter::new(BufWriter::with_capacity(1 << 20, tmp.as_file()), &note);
    let read_models = models.finish();
    let mut cnps = cnps::Cnps::new(&analysis.dcqcn, read_models);
    let mut first =
        flows::FirstPackets::new(&analysis.stats, &analysis.dcqcn, capture.taps().len());
    let mut marks = findings::Marks::new(analysis, capture.taps().len());
    let mut frames = 0u64;
    loop {
        let comments = {
            let Some((number, rec)) = copy.next_record() else {
                break;
            };
            let mut f = Frame::empty(number, &rec);
            decoder.decode_into(&mut f, rec.link);
            frames += 1;
            let key = FlowKey::of(&f);
            let mut c = Vec::new();
            if f.kind == Kind::Cnp {
                c.push(match key {
                    Some(k) => cnps.comment(&f, k),
                    None => {
                        "rocetrace: CNP cut short before its addresses or QP: no stream can hold it"
                            .to_owned()
                    }
                });
            }
            c.extend(first.comment(&f, key));
            marks.comments(&f, key, &mut c);
            c
        };
        writer
            .write_current(&mut copy, &comments)
            .map_err(write_err)?;
        if frames.is_multiple_of(65_536) {
            progress(copy.progress().0);
        }
    }
    let (buffered, summary) = writer.finish(&mut copy).map_err(write_err)?;
    buffered
        .into_inner()
        .map_err(|e| write_err(e.into_error()))?;
    check_same(capture, analysis, &copy, frames)?;
    // A series that could not be read back left CNPs commented as unmatched: fail rather than keep them.
    if let Some(e) = cnps
        .read_error()
        .or_else(|| analysis.dcqcn.kept_read_error())
    {
        return Err(AnnotateError::Models(e));
    }
    let findings = marks.commented.clone();
    if let Some(why) = marks_disagree(marks, analysis, &cnps, &first) {
        return Err(AnnotateError::Changed(why));
    }
    tmp.persist(out).map_err(|e| write_err(e.error))?;
    Ok(Annotated {
        copy: summary,
        cnps: cnps.commented,
        cnps_unmatched: cnps.unmatched,
        flows: first.commented,
        findings,
    })
}

/// Refuses inputs that cannot be read a second time (standard input), and an output that is one of the
/// inputs (the copy would replace the capture it was made from): before the analysis, so as not to spend a
/// read on a copy that cannot be made.
pub fn refuse_inputs(capture: &Capture, out: &Path) -> Result<(), AnnotateError> {
    if !capture.rereadable() {
        return Err(AnnotateError::NotRereadable);
    }
    let Ok(target) = std::fs::metadata(out) else {
        return Ok(());
    };
    use std::os::unix::fs::MetadataExt;
    let same = capture.input_paths().any(|p| {
        std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (target.dev(), target.ino()))
    });
    if same {
        return Err(AnnotateError::OutputIsInput(out.to_path_buf()));
    }
    Ok(())
}

/// The second read met as many frames, and the same damage, as the first.
fn check_same(
    first: &Capture,
    analysis: &Analysis,
    again: &Capture,
    frames: u64,
) -> Result<(), AnnotateError> {
    if frames != analysis.stats.capture.frames {
        return Err(AnnotateError::Changed(format!(
            "{} frames in the analysis, {frames} in the copy",
            analysis.stats.capture.frames
        )));
    }
    let errors = |c: &Capture| c.errors().map(ToString::to_string).collect::<Vec<_>>();
    let (before, after) = (errors(first), errors(again));
    if before != after {
        return Err(AnnotateError::Changed(format!(
            "damage found: {before:?} the first time, {after:?} the second"
        )));
    }
    Ok(())
}

/// Whether the comments' sources met every frame they expected, and the flows pass counted again what it
/// counted the first time.
fn marks_disagree(
    marks: findings::Marks,
    analysis: &Analysis,
    cnps: &cnps::Cnps<'_>,
    first: &flows::FirstPackets,
) -> Option<String> {
    if let Some(why) = marks.disagreement(analysis) {
        return Some(why);
    }
    if first.missed() > 0 {
        return Some(format!(
            "{} flows of the analysis were not met again",
            first.missed()
        ));
    }
    if !cnps.all_met() {
        return Some("some CNP stream had fewer CNPs than the model was fed".to_owned());
    }
    None
}
