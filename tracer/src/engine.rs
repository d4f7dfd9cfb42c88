//! What both capture engines hand to the writer loop, so the loop does not care which one runs.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::SyncSender;

use roce_capture::LinkType;

pub mod consumer;
pub mod ebpf;
pub mod pcap;
pub mod rdma;
pub mod record;
pub mod ring;
pub mod rings;

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Position of the interface in the `-i` list (= its pcapng interface id).
    pub iface: u32,
    /// ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub len: u32,
    /// The bytes captured (at most the snap length).
    pub data: Vec<u8>,
}

/// Frames of one of an engine's sources (one of the eBPF engine's rings), in the order the source held
/// them, for the writer to merge with the other sources' by time ([`crate::merge`]).
#[derive(Debug, Default)]
pub struct SourceBatch {
    /// The source, below [`Engine::sources`].
    pub source: u32,
    /// Its frames.
    pub frames: Vec<Captured>,
    /// When the reader found the source empty after these frames, on the frames' clock (ns since the
    /// epoch, read before it looked): what the source delivers next was stamped no earlier, up to the
    /// merge's window. `None` when it stopped for another reason (a budget, a record still being written).
    pub caught_up_at: Option<u64>,
}

/// What flows from an engine to the writer loop.
#[derive(Debug)]
pub enum Event {
    /// A frame to write.
    Frame(Captured),
    /// Frames of several sources, to merge by time before writing.
    Batch(Vec<SourceBatch>),
    /// The interface went away or failed; the engine will send nothing more for it.
    Ended {
        /// The interface, as in [`Captured::iface`].
        iface: u32,
        /// What happened to it, for the message.
        reason: String,
    },
}

/// Per-interface counters for the pcapng statistics block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfaceStats {
    /// Frames the interface received, lost ones included, when the engine knows.
    pub received: Option<u64>,
    /// Frames lost before they reached the tracer, when the engine knows.
    pub dropped: Option<u64>,
}

/// What every engine needs to start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The `-i` interfaces, in file order.
    pub interfaces: Vec<String>,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// The user's libpcap filter expression. The pcap engine hands it to the kernel instead of its default
    /// filter; the eBPF engine runs it in userspace on what the probe selected, so it can only narrow that.
    pub filter: Option<String>,
    /// eBPF only: send every frame, not only RoCE, CNP, PFC and PAUSE.
    pub all_frames: bool,
    /// eBPF only: the rings' budget in bytes (a power of two, at least a page), shared among the CPUs'
    /// rings; `None` keeps the default 64 MiB.
    pub ring_bytes: Option<u32>,
    /// eBPF only: how many threads read the rings; `None` for the default (one per ring, at most four).
    pub threads: Option<usize>,
}

/// A started engine: frames arrive on the channel given to `start` until `stop` is set.
pub trait Engine {
    /// Link type of each interface, in `-i` order.
    fn link_types(&self) -> Vec<LinkType>;
    /// A line for the pcapng interface description (engine and filter).
    fn describe(&self, iface: u32) -> String;
    /// Frames lost so far, per interface in `-i` order (for the live line, the metrics, and the statistics
    /// of each rotated file).
    fn dropped_so_far(&self) -> Vec<u64>;
    /// How many sources the engine's [`Event::Batch`]es come from, all of which the merge waits for; 0 for
    /// an engine that sends [`Event::Frame`]s in the order they are to be written.
    fn sources(&self) -> usize {
        0
    }
    /// Frames lost so far per source (the eBPF engine's rings), for the live line and the metrics.
    fn dropped_by_source(&self) -> Vec<u64> {
        Vec::new()
    }
    /// Waits for the engine's threads, detaches everything, and returns each interface's counters plus an
    /// optional custom-block record with engine statistics. `late` is, per source, how many of its frames
    /// the writer had to write after later ones (see [`crate::merge`]), for that record.
    fn finish(self: Box<Self>, late: &[u64]) -> (Vec<IfaceStats>, Option<Vec<u8>>);
}

/// Shared arguments of the engines' start functions.
#[derive(Debug, Clone)]
pub struct Plumbing {
    /// Where the engine's threads send what they capture.
    pub tx: SyncSender<Event>,
    /// Set when the capture ends: the threads stop reading.
    pub stop: Arc<AtomicBool>,
}

/// One reader thread per interface and the drop count each publishes while it runs: what the two
/// thread-per-interface engines (libpcap, rdma) share, so the live line's drops and the end's join are one code.
#[derive(Debug)]
pub struct ReaderThreads {
    threads: Vec<std::thread::JoinHandle<IfaceStats>>,
    dropped: Arc<Vec<std::sync::atomic::AtomicU64>>,
}

impl ReaderThreads {
    /// Room for `ifaces` interfaces' drop counters, all at 0.
    pub fn new(ifaces: usize) -> Self {
        ReaderThreads {
            threads: Vec::new(),
            dropped: Arc::new((0..ifaces).map(|_| Default::default()).collect()),
        }
    }

    /// Starts a reader thread named `name`; `run` gets every interface's counters and stores into its own.
    pub fn spawn(
        &mut self,
        name: String,
        run: impl FnOnce(&[std::sync::atomic::AtomicU64]) -> IfaceStats + Send + 'static,
    ) -> std::io::Result<()> {
        let dropped = Arc::clone(&self.dropped);
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&dropped))?;
        self.threads.push(handle);
        Ok(())
    }

    /// Each interface's drops as its thread last published them.
    pub fn dropped_so_far(&self) -> Vec<u64> {
        self.dropped
            .iter()
            .map(|d| d.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Waits for every thread; a thread that panicked reports empty statistics rather than none.
    pub fn join(self) -> Vec<IfaceStats> {
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect()
    }
}
