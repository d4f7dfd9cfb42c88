//! What a frame source hands `roce-tracer top`'s event loop: the capture's writer loop, or the replay's
//! reader. One message type for both, so that the view cannot tell a replay from a live capture except by
//! what the header says.
//!
//! The writer sends frames it has already written: the file comes first. When the view falls behind, the
//! channel fills and the writer drops the view's copy rather than wait, counting what the view did not see,
//! so that a slow terminal can never cost the capture a frame.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use roce_capture::LinkType;
use tokio::sync::mpsc;

use crate::engine::Captured;

/// One tap as the view names it and reads its frames.
#[derive(Debug, Clone, PartialEq)]
pub struct TapInfo {
    /// `FILE:IFACE` for a replay, the interface for a live capture.
    pub name: String,
    /// How its frames are framed.
    pub link: LinkType,
    /// Its recorded line rate (pcapng `if_speed`, or sysfs), if known.
    pub speed_bps: Option<u64>,
}

/// What the source says.
#[derive(Debug)]
pub enum Message {
    /// The taps so far, in the order of the frames' `iface` (sent again when more appear).
    Taps(Vec<TapInfo>),
    /// Custom blocks (the tracer's records: knobs above all), every one so far.
    Blocks(Vec<Vec<u8>>),
    /// Frames in capture order, and the capture time up to which every frame has now been sent (a replay
    /// knows it; a live capture does not, and the view goes by the clock).
    Frames {
        /// The frames.
        frames: Vec<Captured>,
        /// Every frame before this time has been sent.
        upto_ns: Option<u64>,
    },
    /// What the capture lost so far: per interface, per eBPF ring, and late frames.
    Losses {
        /// Per interface, in the `-i` order.
        by_iface: Vec<u64>,
        /// Per ring (the eBPF engine), else empty.
        by_ring: Vec<u64>,
        /// Frames written after a later one.
        late: u64,
    },
    /// The source ended, and why (a replay's end, the capture's stop reason or error).
    End(String),
}

/// The sending end, shared by the writer loop and whoever stops it.
#[derive(Debug, Clone)]
pub struct Watch {
    tx: mpsc::Sender<Message>,
    /// Set by the view to stop the source (`q`).
    pub stop: Arc<AtomicBool>,
    /// Frames the view did not get because it was behind.
    pub unseen: Arc<AtomicU64>,
}

/// Batches queued for the view at most: about a second of a busy capture in 4,096-frame batches.
pub const QUEUE: usize = 256;

impl Watch {
    /// A source end and the view's receiving end.
    pub fn channel() -> (Watch, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let w = Watch {
            tx,
            stop: Arc::new(AtomicBool::new(false)),
            unseen: Arc::new(AtomicU64::new(0)),
        };
        (w, rx)
    }

    /// Whether the view asked the source to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Hands a message over without waiting: a full queue loses it (frames are counted as unseen), a
    /// closed one (the view is gone) too.
    pub fn offer(&self, m: Message) {
        let frames = match &m {
            Message::Frames { frames, .. } => frames.len() as u64,
            _ => 0,
        };
        if self.tx.try_send(m).is_err() {
            self.unseen.fetch_add(frames, Ordering::Relaxed);
        }
    }

    /// Hands a message over, waiting for room: for a replay, which has all the time it needs and must not
    /// lose a frame. False once the view is gone.
    pub fn send_blocking(&self, m: Message) -> bool {
        self.tx.blocking_send(m).is_ok()
    }
}
