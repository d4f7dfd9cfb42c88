//! `roce-sim`: a packet-level discrete-event simulator of a small RoCEv2 fabric, for the teaching captures.
//!
//! Nobody can hand us real captures of every congestion behaviour, so we make them, with the ground truth beside
//! them. Hosts run RC queue pairs (WRITE, SEND, READ, coalesced ACKs, go-back-N) paced by a DCQCN reaction point
//! of the simulator's own ([`rp`]), independent of the analyzer's model so that the truth can prove that model
//! wrong, and driven by the bytes each sender really sends. Switches mark ECN (the CP), share a buffer, send real PFC frames and drop when a priority is
//! lossy. Mirror taps write one pcapng interface each.
//!
//! A run is a pure function of its [`Scenario`]: [`run`] returns the [`Truth`] and, on request, a log of every
//! packet movement, which the invariant tests read.

mod engine;
pub mod rp;
pub mod scenario;
pub mod truth;

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

pub use engine::RunInternals;
pub use scenario::{Op, Scenario, ScenarioError};
pub use truth::Truth;

/// Why a run failed.
#[derive(Debug, Error)]
pub enum SimError {
    /// The scenario file could not be read or makes no sense; the message names the key.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A capture or truth file could not be written.
    #[error("writing the capture")]
    Io(#[from] io::Error),
    /// Node and flow indices are kept small in the packets; the samples are meant to be small too.
    #[error("scenario too large: at most 250 nodes and 60000 flows")]
    TooBig,
    /// [`run`] was given writers for some of the scenario's capture files but not all.
    #[error("the scenario writes {want} capture files, but {got} writers were given")]
    Captures {
        /// Capture files the scenario has.
        want: usize,
        /// Writers given.
        got: usize,
    },
}

/// What a simulated frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketKind {
    /// WRITE/SEND payload or READ response: what the reaction point paces.
    Data,
    /// An RDMA READ REQUEST: what makes a READ responder send.
    ReadReq,
    /// A coalesced ACK: what moves the requester's window.
    Ack,
    /// A NAK (PSN sequence error): what makes the requester go back.
    Nak,
    /// A CNP: what the reaction point reacts to.
    Cnp,
    /// A PFC frame: what stops a port's priority.
    Pfc,
}

impl PacketKind {
    /// The name as the truth writes it (`drops[].kind`).
    pub fn name(self) -> &'static str {
        match self {
            PacketKind::Data => "data",
            PacketKind::ReadReq => "read_request",
            PacketKind::Ack => "ack",
            PacketKind::Nak => "nak",
            PacketKind::Cnp => "cnp",
            PacketKind::Pfc => "pfc",
        }
    }
}

/// A step in a packet's life. A packet is created at a node, then alternates `TxStart` (a port starts sending it)
/// and `Arrive` (the port at the other end has all of it); at a switch it is `Enqueue`d or `Drop`ped; it ends
/// `Consume`d by a host (or, for PFC, by the port it paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// Made by a host (or, PFC, by a port).
    Create,
    /// A port started sending it.
    TxStart,
    /// The port at the other end of the link has all of it.
    Arrive,
    /// A switch queued it at an egress port.
    Enqueue,
    /// A switch dropped it.
    Drop,
    /// A host (or, PFC, the port it paused) took it: its life ended.
    Consume,
}

/// One line of the run log.
#[derive(Debug, Clone, Copy)]
pub struct LogEntry {
    /// When, in the simulator's picoseconds, so that the order of steps within a nanosecond is kept.
    pub t_ps: u64,
    /// The step.
    pub kind: LogKind,
    /// Where: the node (hosts first, then switches).
    pub node: u16,
    /// Port index, see [`RunInternals::port_node`]. For `Enqueue` the egress port, for `Drop` the ingress port.
    pub port: u32,
    /// Which packet: unique in the run, so a test can follow one packet through the log.
    pub packet: u64,
    /// Frame length in bytes (without FCS).
    pub len: u32,
    /// Its priority, which PFC pauses act on.
    pub prio: u8,
    /// What it is.
    pub packet_kind: PacketKind,
    /// Flow index (`u32::MAX` for PFC).
    pub flow: u32,
    /// Linear PSN within the flow (0 = the flow's start PSN; never wraps).
    pub seq: u64,
    /// `Enqueue` only: shared-buffer occupancy of the switch right after the enqueue.
    pub buffer_bytes: u64,
}

/// The result of a run.
#[derive(Debug)]
pub struct Run {
    /// What happened, as written to `NAME.truth.json`.
    pub truth: Truth,
    /// What the invariant tests need besides: the log, what is left in the network, the ports.
    pub internals: RunInternals,
}

/// Runs a scenario. With `captures` (one writer per [`Scenario::files`], the main file first), the taps are
/// written to them as pcapng; with none, nothing is written. With `keep_log`, every packet movement is kept in
/// [`RunInternals::log`] (memory grows with packets: for tests).
pub fn run<W: Write>(sc: &Scenario, captures: Vec<W>, keep_log: bool) -> Result<Run, SimError> {
    if !captures.is_empty() && captures.len() != sc.files.len() {
        return Err(SimError::Captures {
            want: sc.files.len(),
            got: captures.len(),
        });
    }
    let world = engine::World::new(sc, captures, keep_log)?;
    let (truth, internals) = world.run()?;
    Ok(Run { truth, internals })
}

/// The truth as written to `NAME.truth.json`: one compact JSON document and a newline.
pub fn truth_json(truth: &Truth) -> String {
    let mut s = serde_json::to_string(truth).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}

/// What [`write_run`] wrote: the capture files (the main one first), the truth file, and the truth.
#[derive(Debug)]
pub struct Written {
    /// The capture files, in the order of [`Scenario::files`].
    pub captures: Vec<PathBuf>,
    /// `NAME.truth.json`.
    pub truth_file: PathBuf,
    /// What it holds, for the caller to report from.
    pub truth: Truth,
}

/// Runs a scenario and writes its capture files (`NAME.pcapng`, and `NAME.<file>.pcapng` for each
/// `[[file]]`) and `NAME.truth.json` into `out_dir`.
pub fn write_run(sc: &Scenario, out_dir: &Path) -> Result<Written, SimError> {
    std::fs::create_dir_all(out_dir)?;
    let captures: Vec<PathBuf> = (0..sc.files.len())
        .map(|i| out_dir.join(sc.file_name(i)))
        .collect();
    let mut writers = Vec::new();
    for p in &captures {
        writers.push(BufWriter::new(std::fs::File::create(p)?));
    }
    let r = run(sc, writers, false)?;
    let truth_file = out_dir.join(format!("{}.truth.json", sc.name));
    std::fs::write(&truth_file, truth_json(&r.truth))?;
    Ok(Written {
        captures,
        truth_file,
        truth: r.truth,
    })
}

/// Loads the scenario file `scenario` and [`write_run`]s it.
pub fn write_sample(scenario: &Path, out_dir: &Path) -> Result<Written, SimError> {
    write_run(&Scenario::load(scenario)?, out_dir)
}

/// Every `*.toml` in a directory, sorted by name.
pub fn scenario_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    Ok(v)
}
