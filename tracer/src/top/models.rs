//! The live model column: one reaction point per CNP stream, fed each CNP as it arrives.
//!
//! A CNP stream names the sender and the sender's QP, which is all the reaction point is: so its model can
//! run before the pairing knows which data flow the stream throttles, and nothing is replayed once it does.
//! The model, the knobs each sender takes, its line rate and the CNP delay are `roce_core::dcqcn`'s, the
//! ones `roce-analyzer dcqcn` uses; only the order differs (one CNP at a time instead of all at once), and
//! [`roce_core::dcqcn::Feed`] is the loop both go through.

use rustc_hash::FxHashMap;

use roce_core::dcqcn::{EventKind, Feed};
use roce_core::dcqcn_options::Options;
use roce_core::passes::flows::FlowKey;

use super::notice::Notice;

/// One stream's model.
#[derive(Debug)]
pub struct StreamModel {
    /// The model, or why it could not run (the sender's recorded knobs were refused).
    pub feed: Result<Feed, String>,
    /// The tap its CNPs are taken from: the first that saw one. A CNP seen at two taps is one CNP.
    pub tap: u32,
    /// The line it starts at and is released to.
    pub line_mbps: f64,
    /// Whose knobs it runs with.
    pub whose: String,
}

impl StreamModel {
    /// Rc now, or `None` when the model could not run.
    pub fn rc_mbps(&self) -> Option<f64> {
        self.feed.as_ref().ok().map(|f| f.rp().rc_mbps())
    }

    /// Rc at `t_ns`, without moving the model: the view shows the model between the instants the bins
    /// close at, and those must find it where the analyzer would.
    pub fn rc_at(&self, t_ns: u64) -> Option<f64> {
        let mut f = self.feed.as_ref().ok()?.clone();
        f.advance(t_ns, &mut |_| {});
        Some(f.rp().rc_mbps())
    }
}

/// Every stream's model.
#[derive(Debug, Default)]
pub struct Models {
    streams: FxHashMap<FlowKey, StreamModel>,
}

impl Models {
    /// The stream's model, once it had a CNP.
    pub fn get(&self, stream: &FlowKey) -> Option<&StreamModel> {
        self.streams.get(stream)
    }

    /// A CNP of `stream` seen at tap `iface` at capture time `ts_ns`: the stream's model is made at its first
    /// CNP, with its sender's knobs and the line of the tap.
    pub fn cnp(
        &mut self,
        opts: &Options,
        (stream, iface, ts_ns): (FlowKey, u32, u64),
        notices: &mut Vec<Notice>,
    ) {
        let m = self.streams.entry(stream).or_insert_with(|| {
            let line_mbps = opts.line_of(iface).mbps();
            let (feed, whose) = match opts.feed(stream.dst, line_mbps) {
                Ok((feed, whose)) => (Ok(feed), whose),
                Err(e) => (Err(e.to_string()), String::new()),
            };
            StreamModel {
                feed,
                tap: iface,
                line_mbps,
                whose,
            }
        });
        if m.tap != iface {
            return;
        }
        let line = m.line_mbps;
        if let Ok(feed) = m.feed.as_mut() {
            let t = opts.model_time(ts_ns);
            feed.cnp(t, &mut |e| cut_notice(&stream, line, &e, notices));
        }
    }

    /// Runs every model up to `t_ns` (model time), noting the deep cuts.
    pub fn advance(&mut self, opts: &Options, t_ns: u64, notices: &mut Vec<Notice>) {
        let t = opts.model_time(t_ns);
        for (stream, m) in &mut self.streams {
            let line = m.line_mbps;
            if let Ok(feed) = m.feed.as_mut() {
                feed.advance(t, &mut |e| cut_notice(stream, line, &e, notices));
            }
        }
    }
}

/// A cut that takes the sender below a tenth of its line: the event an engineer watching wants to see.
fn cut_notice(
    stream: &FlowKey,
    line_mbps: f64,
    e: &roce_core::dcqcn::Event,
    notices: &mut Vec<Notice>,
) {
    let tenth = line_mbps / 10.0;
    if e.kind == EventKind::Cut && e.rc_mbps < tenth && e.rc_before_mbps >= tenth {
        notices.push(Notice::deep_cut(e.t_ns, stream, e.rc_mbps, line_mbps));
    }
}
