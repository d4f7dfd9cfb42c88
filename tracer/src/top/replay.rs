//! `top --replay`: captures read back through `roce-capture` (files, directories, patterns, compressed,
//! merged by time: whatever the analyzer takes) and handed to the view at a pace set by their timestamps.
//!
//! The reader thread waits for each frame's capture time to come round on a [`Clock`] that the keys can
//! pause and speed up, and tells the view with each batch up to what capture time every frame has been sent.
//! The view closes a bin only then, so that what it shows for a bin does not depend on the speed, nor on
//! when the batches happened to arrive.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_capture::{Capture, inputs};

use crate::engine::Captured;
use crate::watch::{Message, TapInfo, Watch};

/// Frames per batch at most, and the longest a frame waits in one.
const BATCH: usize = 4096;
const BATCH_WAIT: Duration = Duration::from_millis(20);

/// The replay's clock: capture time as a function of wall time, at a speed, paused or not.
#[derive(Debug)]
pub struct Clock {
    inner: Mutex<ClockState>,
}

#[derive(Debug, Clone, Copy)]
struct ClockState {
    /// Wall time and capture time at the last change of speed or pause.
    wall: Instant,
    capture: Option<u64>,
    /// Capture seconds per wall second; infinite plays as fast as the frames can be read.
    speed: f64,
    paused: bool,
}

impl ClockState {
    fn position(&self) -> Option<u64> {
        let at = self.capture?;
        if self.paused {
            return Some(at);
        }
        if self.speed.is_infinite() {
            return Some(u64::MAX);
        }
        let ns = self.wall.elapsed().as_secs_f64() * self.speed * 1e9;
        Some(at.saturating_add(ns as u64))
    }
}

/// The slowest and fastest a replay can be set to with the keys.
pub const SLOWEST: f64 = 1e-6;
/// See [`SLOWEST`].
pub const FASTEST: f64 = 1e6;

impl Clock {
    /// A clock at `speed` that starts at the first frame.
    pub fn new(speed: f64) -> Arc<Clock> {
        Arc::new(Clock {
            inner: Mutex::new(ClockState {
                wall: Instant::now(),
                capture: None,
                speed,
                paused: false,
            }),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut ClockState) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Capture time now; `None` before the first frame.
    pub fn position(&self) -> Option<u64> {
        self.with(|c| c.position())
    }

    /// Starts the clock at the first frame's time.
    fn start(&self, ts: u64) {
        self.with(|c| {
            if c.capture.is_none() {
                c.capture = Some(ts);
                c.wall = Instant::now();
            }
        });
    }

    /// Capture seconds per wall second.
    pub fn speed(&self) -> f64 {
        self.with(|c| c.speed)
    }

    /// Whether it stands still.
    pub fn paused(&self) -> bool {
        self.with(|c| c.paused)
    }

    /// Multiplies the speed by `factor`, within [`SLOWEST`] and [`FASTEST`], from where it is now.
    pub fn scale(&self, factor: f64) {
        self.with(|c| {
            let at = c.position();
            if c.speed.is_finite() {
                c.speed = (c.speed * factor).clamp(SLOWEST, FASTEST);
            }
            c.capture = at.filter(|&t| t != u64::MAX).or(c.capture);
            c.wall = Instant::now();
        });
    }

    /// Pauses, or goes on from where it stood.
    pub fn toggle_pause(&self) {
        self.with(|c| {
            let at = c.position();
            c.paused = !c.paused;
            c.capture = at.filter(|&t| t != u64::MAX).or(c.capture);
            c.wall = Instant::now();
        });
    }
}

/// Opens the inputs (on the caller's thread, so that a bad path is an error before the terminal is
/// taken) and starts the reader.
pub fn start(
    paths: &[PathBuf],
    clock: Arc<Clock>,
    watch: Watch,
) -> anyhow::Result<(String, JoinHandle<()>)> {
    let inputs = inputs::resolve(paths)?;
    let capture = Capture::open(inputs)?;
    let name = capture.name();
    let reader = std::thread::Builder::new()
        .name("replay".into())
        .spawn(move || read(capture, &clock, &watch))?;
    Ok((name, reader))
}

fn taps(capture: &Capture) -> Vec<TapInfo> {
    capture
        .taps()
        .iter()
        .map(|t| TapInfo {
            name: t.name.clone(),
            link: t.description.link,
            speed_bps: t.description.speed_bps,
        })
        .collect()
}

fn read(mut capture: Capture, clock: &Clock, watch: &Watch) {
    let (mut taps_sent, mut blocks_sent) = (0usize, 0usize);
    let mut batch: Vec<Captured> = Vec::with_capacity(BATCH);
    let mut since = Instant::now();
    let send = |batch: &mut Vec<Captured>, upto: u64| {
        let frames = std::mem::replace(batch, Vec::with_capacity(BATCH));
        watch.send_blocking(Message::Frames {
            frames,
            upto_ns: Some(upto),
        })
    };
    let why = loop {
        if watch.stopping() {
            return;
        }
        let Some(c) = capture.next_record().map(|(_, r)| Captured {
            iface: r.iface,
            ts_ns: r.ts_ns,
            len: r.len,
            data: r.data.to_vec(),
        }) else {
            break "end of the replay".to_string();
        };
        // New taps and blocks go ahead of the frame that brought them.
        if capture.taps().len() != taps_sent || capture.custom_blocks().len() != blocks_sent {
            if !batch.is_empty() && !send(&mut batch, c.ts_ns) {
                return;
            }
            taps_sent = capture.taps().len();
            blocks_sent = capture.custom_blocks().len();
            let blocks = capture
                .custom_blocks()
                .iter()
                .map(|b| b.data.clone())
                .collect();
            if !watch.send_blocking(Message::Taps(taps(&capture)))
                || !watch.send_blocking(Message::Blocks(blocks))
            {
                return;
            }
        }
        clock.start(c.ts_ns);
        // Wait for the frame's time, telling the view meanwhile that every earlier frame is in.
        loop {
            if watch.stopping() {
                return;
            }
            let pos = clock.position().unwrap_or(0);
            if pos >= c.ts_ns {
                break;
            }
            if !send(&mut batch, (pos + 1).min(c.ts_ns)) {
                return;
            }
            since = Instant::now();
            let speed = clock.speed();
            let wait = if clock.paused() || speed <= 0.0 {
                BATCH_WAIT
            } else {
                let ns = (c.ts_ns - pos) as f64 / speed;
                Duration::from_nanos(ns.min(2e7) as u64).max(Duration::from_micros(200))
            };
            std::thread::sleep(wait.min(BATCH_WAIT));
        }
        let ts = c.ts_ns;
        batch.push(c);
        if (batch.len() >= BATCH || since.elapsed() >= BATCH_WAIT) && !send(&mut batch, ts) {
            return;
        }
        if batch.is_empty() {
            since = Instant::now();
        }
    };
    let last = batch.last().map_or(0, |c| c.ts_ns);
    let errors: Vec<String> = capture.errors().map(|e| e.to_string()).collect();
    if send(&mut batch, last) {
        let why = if errors.is_empty() {
            why
        } else {
            format!("{why}, with errors: {}", errors.join("; "))
        };
        watch.send_blocking(Message::End(why));
    }
}
