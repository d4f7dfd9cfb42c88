//! From the raw file to the checked [`Scenario`]: ranges, names resolved to indices, cross-references
//! (every host has exactly one link, every tap a link, every extra file a tap), and the units the engine
//! counts in. The first rule broken is the error, and it names its key.
//!
//! One method per table entry, called in the file's order of tables: hosts, then switches (so that node
//! numbers are hosts first), then what names them: links, flows, files and taps. Each rule is written once,
//! where the entry it checks is made.

use super::error::ScenarioError;
use super::raw::{RawFile, RawFlow, RawHost, RawLink, RawScenario, RawSwitch, RawTap};
use super::spec::{
    FileSpec, FlowSpec, HostSpec, LinkSpec, MarkAt, Op, Scenario, Storm, SwitchSpec, TapSpec,
};
use crate::sim::rp::RpKnobs;

/// Longest simulated time a scenario may ask for: the samples are meant to be short.
const MAX_DURATION_US: u64 = 10_000_000;

impl Scenario {
    /// The checked scenario named `name` from its raw file, or the first rule it breaks.
    pub(super) fn build(name: &str, raw: RawScenario) -> Result<Scenario, ScenarioError> {
        let mut b = Builder {
            file: name,
            nodes: Vec::new(),
        };
        b.globals(&raw)?;
        let knobs = b.knobs(&raw.dcqcn)?;
        let mut hosts = Vec::new();
        for (i, h) in raw.hosts.into_iter().enumerate() {
            hosts.push(b.host(i, h)?);
        }
        if hosts.is_empty() {
            return Err(b.bad("host".into(), "at least one [[host]] is needed".into()));
        }
        let mut switches = Vec::new();
        for (i, s) in raw.switches.into_iter().enumerate() {
            switches.push(b.switch(i, s)?);
        }
        let mut links = Vec::new();
        for (i, l) in raw.links.iter().enumerate() {
            let link = b.link(i, l, &links)?;
            links.push(link);
        }
        b.one_link_per_host(&hosts, &links)?;
        let duration_ns = raw.duration_us * 1_000;
        let mut flows = Vec::new();
        for (i, f) in raw.flows.into_iter().enumerate() {
            flows.push(b.flow(i, f, hosts.len(), duration_ns)?);
        }
        let mut files = vec![FileSpec {
            name: String::new(),
            clock_offset_ns: 0,
            clock_drift_ppm: 0.0,
        }];
        for (i, f) in raw.files.into_iter().enumerate() {
            let file = b.file(i, f, &files)?;
            files.push(file);
        }
        let mut taps = Vec::new();
        for (i, t) in raw.taps.into_iter().enumerate() {
            let tap = b.tap(i, t, &links, &files, &taps)?;
            taps.push(tap);
        }
        b.every_file_tapped(&files, &taps)?;
        Ok(Scenario {
            name: name.to_string(),
            description: raw.description.unwrap_or_default(),
            expect_findings: raw.expect_findings,
            seed: raw.seed,
            duration_ns,
            snaplen: raw.snaplen,
            vlan: raw.vlan,
            queue_sample_ns: raw.queue_sample_ns,
            knobs,
            hosts,
            switches,
            links,
            flows,
            taps,
            files,
        })
    }
}

/// What the checks share: the scenario's name, which every error carries, and the nodes named so far, which
/// links, flows and taps refer to.
struct Builder<'a> {
    file: &'a str,
    /// Hosts, then switches: a node's index here is its number in the [`Scenario`].
    nodes: Vec<String>,
}

impl Builder<'_> {
    /// A value that parses but breaks a rule, at `key`.
    fn bad(&self, key: String, message: String) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.to_string(),
            key,
            message,
        }
    }

    /// A host or switch name must be given once: links, flows and taps name nodes, and the truth names them
    /// back.
    fn check_name(&self, key: String, name: &str) -> Result<(), ScenarioError> {
        if name.is_empty() {
            return Err(self.bad(key, "must not be empty".into()));
        }
        if self.nodes.iter().any(|t| t == name) {
            return Err(self.bad(key, format!("`{name}` is used twice")));
        }
        Ok(())
    }

    /// The number of the node named `n`, which the entry at `key` refers to.
    fn node(&self, key: String, n: &str) -> Result<usize, ScenarioError> {
        self.nodes
            .iter()
            .position(|x| x == n)
            .ok_or_else(|| self.bad(key, format!("no host or switch is named `{n}`")))
    }

    /// The top-level keys.
    fn globals(&self, raw: &RawScenario) -> Result<(), ScenarioError> {
        if raw.duration_us == 0 || raw.duration_us > MAX_DURATION_US {
            return Err(self.bad(
                "duration_us".into(),
                format!("must be in 1..={MAX_DURATION_US}"),
            ));
        }
        if raw.vlan == 0 || raw.vlan > 4094 {
            return Err(self.bad("vlan".into(), "must be in 1..=4094".into()));
        }
        if raw.queue_sample_ns < 100 || raw.queue_sample_ns > MAX_DURATION_US * 1_000 {
            return Err(self.bad(
                "queue_sample_ns".into(),
                "must be at least 100 and at most the longest duration".into(),
            ));
        }
        if let Some(s) = raw.snaplen
            && !(64..=65_535).contains(&s)
        {
            return Err(self.bad("snaplen".into(), "must be in 64..=65535".into()));
        }
        Ok(())
    }

    /// `[dcqcn]`: the reaction point's defaults with the file's knobs set over them, by their sysfs names.
    fn knobs(&self, dcqcn: &toml::Table) -> Result<RpKnobs, ScenarioError> {
        let mut knobs = RpKnobs::default();
        for (k, v) in dcqcn {
            let value = match v {
                toml::Value::Integer(i) => *i,
                toml::Value::Boolean(b) => i64::from(*b),
                other => {
                    return Err(self.bad(
                        format!("dcqcn.{k}"),
                        format!("expected an integer, found {}", other.type_str()),
                    ));
                }
            };
            knobs.set(k, value).map_err(|error| ScenarioError::Knob {
                file: self.file.to_string(),
                error,
            })?;
        }
        Ok(knobs)
    }

    /// `[[host]]` number `i`, which becomes node `i`.
    fn host(&mut self, i: usize, h: RawHost) -> Result<HostSpec, ScenarioError> {
        let key = |f: &str| format!("host[{i}].{f}");
        self.check_name(key("name"), &h.name)?;
        if h.cnp_dscp > 63 {
            return Err(self.bad(key("cnp_dscp"), "must be in 0..=63".into()));
        }
        if h.cnp_prio > 7 {
            return Err(self.bad(key("cnp_prio"), "must be in 0..=7".into()));
        }
        if h.min_time_between_cnps_us > MAX_DURATION_US {
            return Err(self.bad(
                key("min_time_between_cnps_us"),
                format!("must be at most {MAX_DURATION_US}"),
            ));
        }
        if h.jitter_ns > 100_000 {
            return Err(self.bad(key("jitter_ns"), "must be at most 100000".into()));
        }
        let storm = match h.storm {
            None => None,
            Some(s) => {
                if s.end_us > MAX_DURATION_US {
                    return Err(self.bad(
                        key("storm.end_us"),
                        format!("must be at most {MAX_DURATION_US}"),
                    ));
                }
                if s.end_us <= s.start_us {
                    return Err(self.bad(key("storm.end_us"), "must be after start_us".into()));
                }
                if s.prio > 7 {
                    return Err(self.bad(key("storm.prio"), "must be in 0..=7".into()));
                }
                Some(Storm {
                    start_ns: s.start_us * 1_000,
                    end_ns: s.end_us * 1_000,
                    prio: s.prio,
                })
            }
        };
        self.nodes.push(h.name.clone());
        Ok(HostSpec {
            name: h.name,
            rp: h.rp,
            np: h.np,
            min_time_between_cnps_ns: h.min_time_between_cnps_us * 1_000,
            cnp_dscp: h.cnp_dscp,
            cnp_prio: h.cnp_prio,
            storm,
            jitter_ns: h.jitter_ns,
        })
    }

    /// `[[switch]]` number `i`, which becomes the next node after the hosts and the switches before it.
    fn switch(&mut self, i: usize, s: RawSwitch) -> Result<SwitchSpec, ScenarioError> {
        let key = |f: &str| format!("switch[{i}].{f}");
        self.check_name(key("name"), &s.name)?;
        if s.buffer_bytes < 16_384 {
            return Err(self.bad(key("buffer_bytes"), "must be at least 16384".into()));
        }
        if s.kmax_bytes <= s.kmin_bytes {
            return Err(self.bad(key("kmax_bytes"), "must be above kmin_bytes".into()));
        }
        if !(s.pmax > 0.0 && s.pmax <= 1.0) {
            return Err(self.bad(key("pmax"), "must be in (0, 1]".into()));
        }
        if s.xon_bytes >= s.xoff_bytes {
            return Err(self.bad(key("xon_bytes"), "must be below xoff_bytes".into()));
        }
        if s.xoff_bytes >= s.buffer_bytes {
            return Err(self.bad(key("xoff_bytes"), "must be below buffer_bytes".into()));
        }
        if s.queue_limit_bytes == 0 {
            return Err(self.bad(key("queue_limit_bytes"), "must be positive".into()));
        }
        let mark_at = match s.mark_at.as_str() {
            "enqueue" => MarkAt::Enqueue,
            "dequeue" => MarkAt::Dequeue,
            other => {
                return Err(self.bad(
                    key("mark_at"),
                    format!("`{other}` is not one of enqueue, dequeue"),
                ));
            }
        };
        let mut pfc_mask = 0u8;
        for &p in &s.pfc_priorities {
            if p > 7 {
                return Err(self.bad(
                    key("pfc_priorities"),
                    format!("priority {p} is not in 0..=7"),
                ));
            }
            pfc_mask |= 1 << p;
        }
        self.nodes.push(s.name.clone());
        Ok(SwitchSpec {
            name: s.name,
            buffer_bytes: s.buffer_bytes,
            ecn: s.ecn,
            kmin_bytes: s.kmin_bytes,
            kmax_bytes: s.kmax_bytes,
            pmax: s.pmax,
            pfc_mask,
            xoff_bytes: s.xoff_bytes,
            xon_bytes: s.xon_bytes,
            queue_limit_bytes: s.queue_limit_bytes,
            mark_at,
        })
    }

    /// `[[link]]` number `i`, given the links before it (two nodes are linked once).
    fn link(&self, i: usize, l: &RawLink, links: &[LinkSpec]) -> Result<LinkSpec, ScenarioError> {
        let a = self.node(format!("link[{i}].a"), &l.a)?;
        let b = self.node(format!("link[{i}].b"), &l.b)?;
        if a == b {
            return Err(self.bad(format!("link[{i}].b"), "a link needs two nodes".into()));
        }
        if links
            .iter()
            .any(|x| (x.a, x.b) == (a, b) || (x.a, x.b) == (b, a))
        {
            return Err(self.bad(
                format!("link[{i}]"),
                "these two nodes are already linked".into(),
            ));
        }
        if !(1..=800).contains(&l.gbps) {
            return Err(self.bad(format!("link[{i}].gbps"), "must be in 1..=800".into()));
        }
        if l.delay_ns > 1_000_000 {
            return Err(self.bad(
                format!("link[{i}].delay_ns"),
                "must be at most 1000000".into(),
            ));
        }
        Ok(LinkSpec {
            a,
            b,
            gbps: l.gbps,
            delay_ns: l.delay_ns,
        })
    }

    /// A host is one NIC with one port: exactly one link.
    fn one_link_per_host(
        &self,
        hosts: &[HostSpec],
        links: &[LinkSpec],
    ) -> Result<(), ScenarioError> {
        for (h, spec) in hosts.iter().enumerate() {
            let n = links.iter().filter(|l| l.a == h || l.b == h).count();
            if n != 1 {
                return Err(self.bad(
                    "link".into(),
                    format!(
                        "host `{}` has {n} links; a host needs exactly one",
                        spec.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[[flow]]` number `i`, between two of the `hosts` first nodes, within a run of `duration_ns`.
    fn flow(
        &self,
        i: usize,
        f: RawFlow,
        hosts: usize,
        duration_ns: u64,
    ) -> Result<FlowSpec, ScenarioError> {
        let key = |x: &str| format!("flow[{i}].{x}");
        let src = self.node(key("src"), &f.src)?;
        let dst = self.node(key("dst"), &f.dst)?;
        if src >= hosts {
            return Err(self.bad(key("src"), format!("`{}` is not a host", f.src)));
        }
        if dst >= hosts {
            return Err(self.bad(key("dst"), format!("`{}` is not a host", f.dst)));
        }
        if src == dst {
            return Err(self.bad(key("dst"), "must differ from src".into()));
        }
        let op = match f.op.as_str() {
            "write" => Op::Write,
            "send" => Op::Send,
            "read" => Op::Read,
            other => {
                return Err(self.bad(
                    key("op"),
                    format!("`{other}` is not one of write, send, read"),
                ));
            }
        };
        if f.mtu != 1024 && f.mtu != 4096 && f.mtu != 256 && f.mtu != 512 && f.mtu != 2048 {
            return Err(self.bad(
                key("mtu"),
                "must be an IB MTU: 256, 512, 1024, 2048 or 4096".into(),
            ));
        }
        if f.message_bytes == 0 || f.message_bytes > (1 << 30) {
            return Err(self.bad(key("message_bytes"), "must be in 1..=2^30".into()));
        }
        if f.prio > 7 {
            return Err(self.bad(key("prio"), "must be in 0..=7".into()));
        }
        if f.dscp > 63 {
            return Err(self.bad(key("dscp"), "must be in 0..=63".into()));
        }
        if f.ack_every == 0 {
            return Err(self.bad(key("ack_every"), "must be at least 1".into()));
        }
        if f.window_packets == 0 || f.window_packets > (1 << 22) {
            return Err(self.bad(key("window_packets"), "must be in 1..=4194304".into()));
        }
        if f.timeout_us == 0 || f.timeout_us > MAX_DURATION_US {
            return Err(self.bad(
                key("timeout_us"),
                format!("must be in 1..={MAX_DURATION_US}"),
            ));
        }
        if f.start_us > MAX_DURATION_US || f.stop_us.is_some_and(|s| s > MAX_DURATION_US) {
            return Err(self.bad(
                key("start_us"),
                format!("start_us and stop_us must be at most {MAX_DURATION_US}"),
            ));
        }
        if f.max_reads == 0 || f.max_reads > 1024 {
            return Err(self.bad(key("max_reads"), "must be in 1..=1024".into()));
        }
        let post_interval_ps = match f.offered_gbps {
            None => 0,
            Some(_) if op == Op::Read => {
                return Err(self.bad(
                    key("offered_gbps"),
                    "only for write and send: a READ's data is paced by its requests".into(),
                ));
            }
            Some(g) if g > 0.0 && g <= 800.0 => {
                (f64::from(f.message_bytes) * 8.0 * 1_000.0 / g).round() as u64
            }
            Some(_) => return Err(self.bad(key("offered_gbps"), "must be in (0, 800]".into())),
        };
        let stop_ns = f.stop_us.map_or(duration_ns, |s| s * 1_000);
        if f.start_us * 1_000 >= duration_ns || stop_ns <= f.start_us * 1_000 {
            return Err(self.bad(
                key("start_us"),
                "must be before stop_us and duration_us".into(),
            ));
        }
        Ok(FlowSpec {
            name: f.name.unwrap_or_else(|| format!("flow{i}")),
            src,
            dst,
            op,
            message_bytes: f.message_bytes,
            messages: f.messages,
            start_ns: f.start_us * 1_000,
            stop_ns,
            mtu: f.mtu,
            prio: f.prio,
            dscp: f.dscp,
            ack_every: f.ack_every,
            window_packets: f.window_packets,
            timeout_ns: f.timeout_us * 1_000,
            max_reads: f.max_reads,
            post_interval_ps,
        })
    }

    /// `[[file]]` number `i`, given the files before it (the main file first): its name names a file on disk.
    fn file(&self, i: usize, f: RawFile, files: &[FileSpec]) -> Result<FileSpec, ScenarioError> {
        let key = |x: &str| format!("file[{i}].{x}");
        if f.name.is_empty()
            || !f
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(self.bad(
                key("name"),
                "must be letters, digits, `-` and `_` (it names the file)".into(),
            ));
        }
        if files.iter().any(|x| x.name == f.name) {
            return Err(self.bad(key("name"), format!("`{}` is used twice", f.name)));
        }
        if f.clock_offset_ns > 1_000_000_000_000 {
            return Err(self.bad(
                key("clock_offset_ns"),
                "must be at most 10^12 (1000 s)".into(),
            ));
        }
        if !(-1000.0..=1000.0).contains(&f.clock_drift_ppm) {
            return Err(self.bad(key("clock_drift_ppm"), "must be in -1000..=1000".into()));
        }
        Ok(FileSpec {
            name: f.name,
            clock_offset_ns: f.clock_offset_ns,
            clock_drift_ppm: f.clock_drift_ppm,
        })
    }

    /// `[[tap]]` number `i`: a link that exists, a file that exists, a name no tap before it has.
    fn tap(
        &self,
        i: usize,
        t: RawTap,
        links: &[LinkSpec],
        files: &[FileSpec],
        taps: &[TapSpec],
    ) -> Result<TapSpec, ScenarioError> {
        let a = self.node(format!("tap[{i}].a"), &t.a)?;
        let b = self.node(format!("tap[{i}].b"), &t.b)?;
        let link = links
            .iter()
            .position(|l| (l.a, l.b) == (a, b) || (l.a, l.b) == (b, a))
            .ok_or_else(|| {
                self.bad(
                    format!("tap[{i}]"),
                    format!("no link joins `{}` and `{}`", t.a, t.b),
                )
            })?;
        let file = match &t.file {
            None => 0,
            Some(n) => files.iter().position(|f| &f.name == n).ok_or_else(|| {
                self.bad(
                    format!("tap[{i}].file"),
                    format!("no [[file]] is named `{n}`"),
                )
            })?,
        };
        let name = t.name.unwrap_or_else(|| format!("{}-{}", t.a, t.b));
        if taps.iter().any(|x| x.name == name) {
            return Err(self.bad(format!("tap[{i}].name"), format!("`{name}` is used twice")));
        }
        Ok(TapSpec { name, link, file })
    }

    /// A `[[file]]` is another capturing host's file: one that no tap writes to would be empty.
    fn every_file_tapped(&self, files: &[FileSpec], taps: &[TapSpec]) -> Result<(), ScenarioError> {
        for (i, f) in files.iter().enumerate().skip(1) {
            if !taps.iter().any(|t| t.file == i) {
                return Err(self.bad(
                    format!("file[{}]", i - 1),
                    format!("no tap writes to `{}`", f.name),
                ));
            }
        }
        Ok(())
    }
}
