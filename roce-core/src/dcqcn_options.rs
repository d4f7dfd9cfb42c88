//! How the DCQCN analysis runs, and whose knobs speak for each host: the user's or the capture's recorded
//! knobs, and the choice, per sender and per notification point, between a host's own and the analysis' set.
//!
//! A module of its own beside `dcqcn` (which `recorded` stands on, while this reads `recorded`'s knobs), and
//! here rather than in the analyzer because `roce-tracer top` feeds the same model live: which knobs a
//! sender's model takes, at which line rate, with which CNP delay, and whether its reaction point is on, must
//! be decided once for both, or the live column and `roce-analyzer dcqcn` would disagree on a definition.
//! The fields only the analyzer reads (bins, bursts, the fit) stay beside them rather than split a struct
//! that every analyzer step takes whole.

use std::net::IpAddr;

use crate::dcqcn::{
    DcqcnError, EcnConfig, Event, Feed, Knobs, NpKnobs, PriorityEnable, Profile, Rp,
};
use crate::line::{LineRate, LineRates};
use crate::priority::PriorityMap;

/// How the analysis runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which NIC's reading of the DCQCN arithmetic the model follows: the result must match the hardware under test.
    pub profile: Profile,
    /// The reaction point's knobs (with the model's options).
    pub knobs: Knobs,
    /// `roce_rp/enable/N`: a flow on a priority where the RP is known to be off ignores its CNPs.
    pub rp_enable: PriorityEnable,
    /// The notification point's knobs, for the checks of the receiver's CNPs.
    pub np: NpKnobs,
    /// `roce_np/enable/N`.
    pub np_enable: PriorityEnable,
    /// Files of the knob source that the model does not know, shown rather than dropped.
    pub ignored_knobs: Vec<String>,
    /// Where the knob values came from, shown next to the results (dcqcn.md: disagreement usually means
    /// different knobs).
    pub knob_source: String,
    /// How each tap gets its line rate (`--link-speed`, else its recorded `if_speed`, else assumed): a flow's
    /// model starts at the line of the tap its data was taken from and never exceeds it.
    pub lines: LineRates,
    /// Every tap's recorded `if_speed`, by tap index, for [`Options::line_of`]; set from the capture after
    /// the read ([`Options::learn_taps`]), when every tap is known.
    pub tap_speeds: Vec<Option<u64>>,
    /// Added to every CNP time before it reaches the model: the one-way delay from the capture point to the
    /// sender NIC when the capture was not taken at the sender (negative if it was taken behind it).
    pub cnp_delay_ns: i64,
    /// A fixed bin width, or automatic.
    pub bin_ns: Option<u64>,
    /// CNPs closer together than this belong to one burst.
    pub burst_gap_ns: u64,
    /// How long after a burst's first CNP the observed rate is searched for its low point.
    pub reaction_window_ns: u64,
    /// Fit the alpha gain and the cut factor.
    pub fit: bool,
    /// Fit only this many flows, those with the most CNPs.
    pub fit_flows: usize,
    /// Use the knobs the tracer recorded in the capture, when it did (set false when the user gave knobs).
    pub recorded_knobs: bool,
    /// How untagged frames get their priority (`--dscp-map`); a map the tracer recorded replaces it.
    pub priorities: PriorityMap,
    /// The guard on each flow's model: instants with events it may take before it stops. `None` sizes it from
    /// the flow's CNPs ([`step_guard`](crate::dcqcn::step_guard)), so that no real capture meets it.
    pub max_model_steps: Option<u64>,
    /// Every host whose knobs the capture recorded with its addresses: a check of a notification point takes
    /// the receiver's own, and a flow's `enable/N` its own host's.
    pub hosts: Vec<HostEcn>,
    /// The interface whose recorded knobs are the ones above, and the addresses of its host (empty when the
    /// record does not say); `None` when they were not recorded (defaults, or given by the user).
    pub knobs_recorded_from: Option<(String, Vec<IpAddr>)>,
}

/// One host's DCQCN configuration as the capture recorded it, with the addresses that say whose it is.
#[derive(Debug, Clone)]
pub struct HostEcn {
    /// The interface the knobs were recorded under.
    pub iface: String,
    /// The host's addresses (its RoCE GIDs').
    pub addrs: Vec<IpAddr>,
    /// Its knobs, over the same base as the analysis' own.
    pub ecn: EcnConfig,
}

/// The knobs that speak for one host, and whose they are.
#[derive(Debug, Clone, Copy)]
pub struct KnobsOf<'a> {
    /// Its reaction point's knobs (with the model's options).
    pub rp: &'a Knobs,
    /// Its notification point's knobs.
    pub np: &'a NpKnobs,
    /// Its `roce_rp/enable/N`.
    pub rp_enable: PriorityEnable,
    /// Its `roce_np/enable/N`.
    pub np_enable: PriorityEnable,
    /// Its own recorded knobs, or knobs that are meant for every host (given, defaults, or a record that
    /// does not say whose): `enable/N` of them says something of this host. False when they are known to be
    /// another host's.
    pub applies: bool,
    /// They are the host's own, recorded for it.
    pub own: bool,
}

impl Options {
    /// The line rate of tap `iface`.
    pub fn line_of(&self, iface: u32) -> LineRate {
        self.lines
            .of(self.tap_speeds.get(iface as usize).copied().flatten())
    }

    /// Learns every tap's recorded `if_speed`, once the capture has been read.
    pub fn learn_taps(&mut self, taps: &[roce_capture::Tap]) {
        self.tap_speeds = taps.iter().map(|t| t.description.speed_bps).collect();
    }

    /// The knobs as one NIC configuration.
    pub fn ecn(&self) -> EcnConfig {
        EcnConfig {
            rp: self.knobs.clone(),
            rp_enable: self.rp_enable,
            np: self.np.clone(),
            np_enable: self.np_enable,
            ignored: self.ignored_knobs.clone(),
        }
    }

    /// The knobs that speak for `host`: its own when the capture recorded them (and the user gave none),
    /// else the analysis' own, with a note of whose they are, for the output.
    pub fn knobs_of(&self, host: IpAddr) -> (KnobsOf<'_>, String) {
        if self.recorded_knobs
            && let Some(h) = self.hosts.iter().find(|h| h.addrs.contains(&host))
        {
            let of = KnobsOf {
                rp: &h.ecn.rp,
                np: &h.ecn.np,
                rp_enable: h.ecn.rp_enable,
                np_enable: h.ecn.np_enable,
                applies: true,
                own: true,
            };
            return (of, format!("{host}'s own ({})", h.iface));
        }
        let (applies, note) = match &self.knobs_recorded_from {
            Some((iface, addrs)) if !addrs.is_empty() => {
                let whose: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
                let note = format!(
                    "another host's ({iface}, {}): none recorded for {host}",
                    whose.join(" ")
                );
                (false, note)
            }
            Some((iface, _)) => (true, format!("{iface}'s (the record does not say whose)")),
            None => (true, self.knob_source.clone()),
        };
        let of = KnobsOf {
            rp: &self.knobs,
            np: &self.np,
            rp_enable: self.rp_enable,
            np_enable: self.np_enable,
            applies,
            own: false,
        };
        (of, note)
    }

    /// Takes every field of `c`.
    pub fn set_ecn(&mut self, c: EcnConfig) {
        self.knobs = c.rp;
        self.rp_enable = c.rp_enable;
        self.np = c.np;
        self.np_enable = c.np_enable;
        self.ignored_knobs = c.ignored;
    }

    /// Takes the knobs the capture recorded, when allowed and present: the first captured interface's, else
    /// the first by name, on top of the current ones (so that model options survive). A recorded value the
    /// model rejects leaves the knobs as they were and says so in `knob_source`.
    pub fn apply_recorded_knobs(&mut self, recorded: &crate::recorded::Recorded) {
        // The host's DSCP → priority map is a fact of its setup, not a knob choice: it applies whatever knobs
        // the user gave.
        self.priorities = self.priorities.effective(recorded.priorities.as_ref());
        if !self.recorded_knobs {
            return;
        }
        let base = self.ecn();
        // Every host that says who it is, on the same base: a refused value leaves that host out.
        self.hosts = recorded
            .ecn
            .iter()
            .filter(|r| !r.addrs.is_empty())
            .filter_map(|r| {
                Some(HostEcn {
                    iface: r.iface.clone(),
                    addrs: r.addrs.clone(),
                    ecn: r.config(&base).ok()?,
                })
            })
            .collect();
        let Some(rec) = recorded.ecn.first() else {
            return;
        };
        match rec.config(&base) {
            Ok(c) => {
                self.set_ecn(c);
                self.knob_source = format!(
                    "the capture ({}/roce_rp and roce_np, recorded by roce-tracer)",
                    rec.iface
                );
                self.knobs_recorded_from = Some((rec.iface.clone(), rec.addrs.clone()));
            }
            Err(e) => {
                self.knob_source = format!(
                    "{} (the capture's recorded knobs were refused: {e})",
                    self.knob_source
                );
            }
        }
    }
}

/// Enough for every flow of a small test, and for the heaviest ones of a large capture, whose findings
/// lead the report anyway.
pub const DEFAULT_FIT_FLOWS: usize = 32;

impl Default for Options {
    fn default() -> Self {
        Options {
            profile: Profile::ConnectX,
            knobs: Knobs::default(),
            rp_enable: PriorityEnable::default(),
            np: NpKnobs::default(),
            np_enable: PriorityEnable::default(),
            ignored_knobs: Vec::new(),
            knob_source: "defaults".into(),
            lines: LineRates::default(),
            tap_speeds: Vec::new(),
            cnp_delay_ns: 0,
            bin_ns: None,
            burst_gap_ns: 100_000,
            reaction_window_ns: 200_000,
            fit: true,
            fit_flows: DEFAULT_FIT_FLOWS,
            recorded_knobs: true,
            priorities: PriorityMap::default(),
            max_model_steps: None,
            hosts: Vec::new(),
            knobs_recorded_from: None,
        }
    }
}

/// The knobs the model of a sender runs with, and whose they are: the sender's own when the capture recorded
/// them and the model takes them, else the analysis' knobs (the hosts of one fabric are configured alike).
pub fn model_knobs(opts: &Options, sender: IpAddr, line_mbps: f64) -> (&Knobs, String) {
    let (of, whose) = opts.knobs_of(sender);
    if !of.own {
        return (of.rp, whose);
    }
    // The analysis' own knobs were checked before any work; a host's recorded set may still be refused.
    match Rp::new(opts.profile, of.rp, line_mbps) {
        Ok(_) => (of.rp, whose),
        Err(e) => (
            &opts.knobs,
            format!("{} ({whose} were refused: {e})", opts.knob_source),
        ),
    }
}

impl Options {
    /// The sorted CNP arrival times as the sender's reaction point sees them: shifted by the CNP delay.
    pub fn model_times(&self, cnp_ts: &[u64]) -> Vec<u64> {
        cnp_ts.iter().map(|&t| self.model_time(t)).collect()
    }

    /// One CNP's capture time as the sender's reaction point sees it.
    pub fn model_time(&self, cnp_ts: u64) -> u64 {
        cnp_ts.saturating_add_signed(self.cnp_delay_ns)
    }

    /// Whether `host`'s reaction point (`np` false) or notification point (`np` true) is on for
    /// `priority`, as the host's own record (or knobs meant for every host) says; `None` when nothing that
    /// speaks for this host says.
    pub fn enabled(&self, host: IpAddr, priority: Option<u8>, np: bool) -> Option<bool> {
        let (of, _) = self.knobs_of(host);
        let e = if np { of.np_enable } else { of.rp_enable };
        priority.and_then(|p| e.get(p)).filter(|_| of.applies)
    }

    /// The model of `sender`'s reaction point on a line of `line_mbps`, fed CNP by CNP under the guard
    /// (`max_model_steps`, else sized from the CNPs fed so far), and whose knobs it runs with.
    pub fn feed(&self, sender: IpAddr, line_mbps: f64) -> Result<(Feed, String), DcqcnError> {
        let (knobs, whose) = model_knobs(self, sender, line_mbps);
        let rp = Rp::new(self.profile, knobs, line_mbps)?;
        Ok((Feed::new(rp, self.max_model_steps), whose))
    }

    /// A replay of `cnps` (model times, sorted) with `knobs` on a line of `line_mbps` up to `end` under the
    /// guard, each event handed to `emit`; the instant the guard stopped it, if it did.
    pub fn run_model(
        &self,
        (knobs, line_mbps): (&Knobs, f64),
        cnps: &[u64],
        end: u64,
        emit: impl FnMut(Event),
    ) -> Result<Option<u64>, DcqcnError> {
        let rp = Rp::new(self.profile, knobs, line_mbps)?;
        let guard = self
            .max_model_steps
            .unwrap_or_else(|| crate::dcqcn::step_guard(cnps.len()));
        Ok(crate::dcqcn::replay_with(rp, cnps, end, guard, emit))
    }
}

/// The least gap of a notification point, ns, and whose knob it is: the NP is the host that sends the CNPs.
pub fn np_gap(opts: &Options, np: IpAddr) -> (u64, String) {
    let (of, whose) = opts.knobs_of(np);
    (
        u64::from(of.np.min_time_between_cnps).saturating_mul(1_000),
        whose,
    )
}
