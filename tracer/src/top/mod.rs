//! `roce-tracer top`: what DCQCN does right now, on a terminal, during a saturation test (or a replay).
//!
//! The parts: [`state`] (frames in, bins of capture time out: the numbers, with no terminal), [`models`]
//! (the live model column), [`notice`] (the events worth a line), [`replay`] (captures read back at a
//! pace), [`view`] (the screen), [`keys`] (what each key does), and this module's event loop, which owns the
//! terminal and takes key events, ticks, the source's batches and the metrics endpoint on one tokio runtime.
//! The capture itself stays [`crate::capture::run_watched`]'s, on a thread of its own: the file comes first,
//! and the view is handed what was written.

pub mod keys;
pub mod models;
pub mod notice;
pub mod replay;
pub mod state;
pub mod view;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{Event as TermEvent, EventStream};
use futures_util::StreamExt;
use roce_core::dcqcn_options::Options;
use roce_core::passes::flows::FlowKey;
use rustc_hash::FxHashSet;
use tokio::signal::unix::{SignalKind, signal};

use crate::capture::{self, CaptureOptions};
use crate::metrics::Metrics;
use crate::watch::{Message, Watch};
use keys::{Action, Ui};
use replay::Clock;
use state::{Bin, Config, State};
use view::Header;

/// Where the frames come from.
#[derive(Debug)]
pub enum Source {
    /// A live capture, as `capture` runs it (its output may be `/dev/null`).
    Live(Box<CaptureOptions>),
    /// Captures read back, at `speed` capture seconds per wall second (infinite: as fast as they read).
    Replay {
        /// Files, directories, patterns: whatever the analyzer takes.
        paths: Vec<PathBuf>,
        /// Capture seconds per wall second.
        speed: f64,
    },
}

/// What `top` was asked.
#[derive(Debug)]
pub struct TopOptions {
    /// The frames.
    pub source: Source,
    /// The bin width in capture time; `None` picks one (a second live, [`default_bin_ns`] for a replay).
    pub bin_ns: Option<u64>,
    /// The model's options (`--link-speed` is in them).
    pub dcqcn: Options,
    /// Serve Prometheus metrics here.
    pub metrics: Option<SocketAddr>,
}

/// The bins kept: the sparklines' length on the widest terminal, and how long an idle flow stays listed.
const HISTORY: usize = 240;
/// How far behind the clock a live capture's frames may arrive and still land in their bin.
const LIVE_DELAY_NS: u64 = 250_000_000;
/// How long without a frame before the header says so.
const QUIET: Duration = Duration::from_secs(3);
/// Set, `top` panics half a second after it took the terminal: how the tests check that a panic gives the
/// terminal back (nothing else reaches the panic hook on purpose).
pub const PANIC_ENV: &str = "ROCETRACE_TOP_TEST_PANIC";

/// The bin a replay at `speed` gets by default: about a quarter of a second of wall time, rounded down to
/// 1, 2 or 5 times a power of ten, so that the numbers move a few times a second at any speed (a 3 ms
/// sample at `--speed 0.001` makes 15 bins of 200 µs).
pub fn default_bin_ns(speed: f64) -> u64 {
    if !speed.is_finite() || speed <= 0.0 {
        return 1_000_000;
    }
    let ns = (speed * 0.25e9).clamp(1_000.0, 1e9);
    let decade = 10f64.powi(ns.log10().floor() as i32);
    let step = [5.0, 2.0, 1.0]
        .into_iter()
        .find(|m| m * decade <= ns)
        .unwrap_or(1.0);
    (step * decade).round() as u64
}

/// Hands one message of the source to the state.
pub fn apply(state: &mut State, m: Message) {
    match m {
        Message::Taps(t) => state.set_taps(t),
        Message::Blocks(b) => state.set_blocks(b),
        Message::Frames { frames, upto_ns } => {
            for f in &frames {
                state.frame(f);
            }
            if let Some(t) = upto_ns {
                state.advance(t);
            }
        }
        Message::Losses { .. } => {}
        Message::End(why) => state.finish(why),
    }
}

/// Runs `top` to its end; what to say after.
pub fn run(o: TopOptions) -> Result<String> {
    let speed = match &o.source {
        Source::Replay { speed, .. } => Some(*speed),
        Source::Live(_) => None,
    };
    let bin_ns = o
        .bin_ns
        .unwrap_or_else(|| speed.map_or(1_000_000_000, default_bin_ns));
    let state = State::new(Config {
        bin_ns,
        history: HISTORY,
        dcqcn: o.dcqcn.clone(),
    });
    if !std::io::stdout().is_terminal() {
        return plain(o, state);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the event loop")?;
    rt.block_on(interactive(o, state))
}

/// Without a terminal (`| cat`, CI): a live `top` is `capture` with its line per second; a replay prints
/// the same line per bin, labelled with the bin's capture time.
fn plain(o: TopOptions, mut state: State) -> Result<String> {
    match o.source {
        Source::Live(opts) => {
            let mut opts = *opts;
            opts.quiet = false;
            let out = capture::run(&opts)?;
            Ok(capture_summary(&opts, &out))
        }
        Source::Replay { paths, speed } => {
            let (watch, mut rx) = Watch::channel();
            let (name, reader) = replay::start(&paths, Clock::new(speed), watch)?;
            let mut printed = 0;
            while let Some(m) = rx.blocking_recv() {
                apply(&mut state, m);
                for b in new_bins(&state, &mut printed) {
                    let first = state.first_ns().unwrap_or(0);
                    let at = view::offset(b.start_ns.saturating_sub(first));
                    println!(
                        "{}",
                        crate::live::line_at(&at, &b.interval, &Default::default())
                    );
                }
            }
            let _ = reader.join();
            Ok(format!(
                "roce-tracer top: {} frames of {name} replayed ({})",
                state.frames,
                state.ended.as_deref().unwrap_or("stopped")
            ))
        }
    }
}

/// The bins closed since `seen` bins were, oldest first.
fn new_bins<'a>(state: &'a State, seen: &mut u64) -> Vec<&'a Bin> {
    let fresh = (state.closed - *seen).min(state.bins().len() as u64) as usize;
    *seen = state.closed;
    let bins = state.bins();
    bins.iter().skip(bins.len() - fresh).collect()
}

fn capture_summary(opts: &CaptureOptions, out: &capture::Outcome) -> String {
    format!(
        "roce-tracer: {} frames written to {}, {} dropped",
        out.frames,
        opts.output.display(),
        out.dropped
    )
}

/// Puts the terminal back as it was: raw mode off, the main screen, the cursor shown.
pub fn restore_terminal() {
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

/// Restores the terminal when dropped: on `q`, on a signal, on an error, and (unwinding) on a panic.
struct TermGuard;

impl Drop for TermGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

fn take_terminal() -> Result<(
    ratatui::Terminal<ratatui::backend::CrosstermBackend<std::io::Stdout>>,
    TermGuard,
)> {
    // The hook runs before the panic's message is printed, so that the message lands on a usable screen.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
    crossterm::terminal::enable_raw_mode().context("the terminal refused raw mode")?;
    let guard = TermGuard;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
    let term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))?;
    Ok((term, guard))
}

async fn interactive(o: TopOptions, mut state: State) -> Result<String> {
    let (watch, mut rx) = Watch::channel();
    let metrics = match o.metrics {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            let m = Metrics::new();
            tokio::spawn(m.clone().serve_on(listener));
            Some(m)
        }
        None => None,
    };
    let mut header = Header::default();
    let clock = match &o.source {
        Source::Replay { speed, .. } => Some(Clock::new(*speed)),
        Source::Live(_) => None,
    };
    // The source starts before the terminal is taken, so that its errors (a bad path, missing privileges)
    // print on a normal screen.
    let (source, summary): (std::thread::JoinHandle<()>, Summary) = match o.source {
        Source::Replay { paths, .. } => {
            let clock = clock.clone().unwrap_or_else(|| Clock::new(1.0));
            let (name, reader) = replay::start(&paths, clock, watch.clone())?;
            header.source = format!("replay {name}");
            header.engine = "replay".into();
            (reader, Arc::new(std::sync::Mutex::new(Ok(String::new()))))
        }
        Source::Live(opts) => {
            header.source = format!("live {}", opts.interfaces.join(" "));
            header.engine = format!("engine {}", opts.engine.name());
            let summary = Arc::new(std::sync::Mutex::new(Ok(String::new())));
            let said = Arc::clone(&summary);
            let (w, served) = (watch.clone(), metrics.clone());
            let t = std::thread::Builder::new()
                .name("capture".into())
                .spawn(move || {
                    let out = capture::run_watched(&opts, Some(&w), served);
                    let end = match &out {
                        Ok(o) => o.reason.describe(),
                        Err(e) => format!("the capture failed: {e}"),
                    };
                    if let Ok(mut x) = said.lock() {
                        *x = out
                            .map(|o| capture_summary(&opts, &o))
                            .map_err(|e| anyhow::Error::from(e).context("top's capture"));
                    }
                    w.send_blocking(Message::End(end));
                })?;
            (t, summary)
        }
    };
    let (mut term, guard) = take_terminal()?;
    let mut ui = Ui::default();
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let started = Instant::now();
    let panic_at = std::env::var_os(PANIC_ENV).map(|_| started + Duration::from_millis(500));
    let mut last_frame = Instant::now();
    let mut shown = 0u64;
    let mut known = FxHashSet::default();
    let mut source_open = true;
    loop {
        tokio::select! {
            m = rx.recv(), if source_open => match m {
                Some(m) => {
                    if let Message::Frames { frames, .. } = &m
                        && !frames.is_empty()
                    {
                        last_frame = Instant::now();
                    }
                    if let Message::Losses { by_iface, .. } = &m {
                        let total: u64 = by_iface.iter().sum();
                        if total > header.dropped {
                            let at = state.now_ns();
                            state.notice(notice::Notice::lost(at, total - header.dropped, total));
                        }
                        header.dropped = total;
                    }
                    // A capture that could not start leaves at once: there is nothing to watch.
                    let failed = matches!(&m, Message::End(why) if why.starts_with(FAILED));
                    apply(&mut state, m);
                    if failed && state.frames == 0 {
                        break;
                    }
                    continue;
                }
                None => source_open = false,
            },
            k = keys.next() => match k {
                Some(Ok(TermEvent::Key(k))) => {
                    let rows = view::listed(&state, ui.sort).len();
                    match ui.key(k, rows) {
                        Action::Quit => break,
                        Action::Pause => if let Some(c) = &clock { c.toggle_pause() },
                        Action::Speed(f) => if let Some(c) = &clock { c.scale(f) },
                        Action::Filter(f) => state.set_filter(f),
                        Action::None => {}
                    }
                }
                Some(Ok(_)) => {}
                // The terminal is gone: nothing to show on.
                Some(Err(_)) | None => break,
            },
            _ = tick.tick() => {
                if panic_at.is_some_and(|t| Instant::now() >= t) {
                    panic!("{PANIC_ENV} is set: a panic, to show that the terminal comes back");
                }
                if clock.is_none() && state.ended.is_none() {
                    state.advance(crate::sys::now_ns().saturating_sub(LIVE_DELAY_NS));
                }
            }
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
        if let Some(m) = &metrics {
            publish(m, &state, &mut shown, &mut known, clock.is_some());
        }
        header.speed = clock.as_ref().map(|c| (c.speed(), c.paused()));
        header.uptime_s = Some(started.elapsed().as_secs());
        header.unseen = watch.unseen.load(Ordering::Relaxed);
        let quiet = last_frame.elapsed();
        header.quiet_s =
            (clock.is_none() && state.ended.is_none() && quiet >= QUIET).then_some(quiet.as_secs());
        term.draw(|f| view::draw(f, &state, &mut ui, &header))?;
    }
    watch.stop.store(true, Ordering::SeqCst);
    drop(term);
    drop(guard);
    // Frames still queued are not wanted any more; the source may be blocked handing one over.
    drop(rx);
    let _ = tokio::task::spawn_blocking(move || source.join()).await;
    // A capture that failed fails `top` too, with its error, now that the terminal is back.
    let said = match summary.lock() {
        Ok(mut s) => std::mem::replace(&mut *s, Ok(String::new()))?,
        Err(_) => String::new(),
    };
    Ok(if said.is_empty() {
        format!("roce-tracer top: {} frames shown", state.frames)
    } else {
        said
    })
}

/// How the end of a capture that failed begins.
const FAILED: &str = "the capture failed";

/// What the capture thread says once it has ended: its closing line, or its error.
type Summary = Arc<std::sync::Mutex<Result<String>>>;

/// Exports the bins closed since the last call: each flow's observed and modelled rate (a flow known before
/// and idle in the bin at 0, not at its last rate), and (for a replay, which has no capture loop to count
/// them) the counters.
fn publish(
    m: &Metrics,
    state: &State,
    shown: &mut u64,
    known: &mut FxHashSet<FlowKey>,
    counters: bool,
) {
    for b in new_bins(state, shown) {
        let secs = b.secs();
        let mut flows: Vec<_> = b
            .flows
            .iter()
            .map(|f| {
                let g = f.bytes as f64 * 8.0 / secs / 1e9;
                (
                    f.key.src,
                    f.key.dst,
                    f.key.dest_qp,
                    g,
                    f.model_mbps.map(|r| r / 1000.0),
                )
            })
            .collect();
        let active: FxHashSet<FlowKey> = b.flows.iter().map(|f| f.key).collect();
        flows.extend(
            known
                .difference(&active)
                .map(|k| (k.src, k.dst, k.dest_qp, 0.0, None)),
        );
        known.extend(active);
        m.update_flows(&flows);
        if counters {
            let r = &b.rows;
            m.update(&r.kinds, &r.flows, &r.cnps, &r.pfc, b.interval.roce_gbps, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replays_bin_is_about_a_quarter_second_of_wall_time() {
        assert_eq!(default_bin_ns(1.0), 200_000_000);
        assert_eq!(default_bin_ns(4.0), 1_000_000_000);
        assert_eq!(default_bin_ns(100.0), 1_000_000_000);
        assert_eq!(default_bin_ns(0.001), 200_000);
        assert_eq!(default_bin_ns(0.0004), 100_000);
        assert_eq!(default_bin_ns(0.0002), 50_000);
        assert_eq!(default_bin_ns(1e-9), 1_000);
        assert_eq!(default_bin_ns(f64::INFINITY), 1_000_000);
    }
}
