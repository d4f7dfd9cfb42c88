//! Kernel events (`--kernel-events`).
//!
//! Two eBPF programs feed the capture's custom blocks:
//! - `skb:kfree_skb` counts the kernel's drops of IPv4, IPv6, RoCEv1 and MAC Control packets per drop
//!   reason. Every `--interval` the drops since the previous interval go into an `EVNT` block (with the
//!   interval's start and end, so they can be placed on a timeline), and each file ends with a `DROP` block
//!   holding what was dropped while it was open.
//! - A generic recorder is attached to the RDMA tracepoints this kernel has (`rdma_cma:cm_qp_create`,
//!   `rdma_cma:cm_event_handler`, the `ib_mad` send and receive events; see [`rdma_specs`]) and to any
//!   `--tracepoint`. Each event travels with its time, the process and thread it fired in and that thread's
//!   name, and the fields asked for; `rdma_core:cq_poll`, which can fire millions of times a second, is
//!   only counted in the kernel, per CQ. Tracepoints the kernel lacks are listed at start and skipped.
//! - At start and every `--interval`, the QPs `rdma res show qp` lists that the previous snapshot did not
//!   (see [`crate::qp_owners`]) join the events as `rdma_res:qp`: owners of QPs no tracepoint sees.
//!
//! Record layouts differ between kernels, so every offset, size and enum name is read at run time from the
//! event's `format` file in tracefs and handed to the programs through their configuration maps.
//!
//! Times: the programs stamp events with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC). Packets carry wall-clock
//! time (libpcap's, or the eBPF engine's monotonic stamp plus the offset it sampled at start), so events get
//! the same treatment: the monotonic-to-wall-clock offset is sampled once at start and added, which puts
//! them on the packets' time axis.

//!
//! The parts, each of one job: [`format`](mod@format) reads tracefs format files, [`spec`] says what to record and
//! resolves it against them, [`decode`] turns ring records into events, [`encode`] turns an interval into
//! block records; this module runs the programs and keeps the interval's state.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::TracePoint;
use roce_capture::blocks::records::{self, Event, IpDrops, Tracepoints};
use tracer_common::kevents::{
    self as shared, CountKey, CountValue, MAX_TRACEPOINTS, TRACE_PROGRAM_PREFIX, TraceConfig, stat,
};
use tracer_common::{DropConfig, DropKey, KFREE_SKB_PROGRAM, NO_LAYOUT, NO_REASON, maps};

use crate::engine::ebpf::{EbpfStartError, probe_object};

pub mod decode;
pub mod encode;
pub mod format;
pub mod spec;

pub use decode::{decode_event, sockaddr};
pub use encode::{MAX_BLOCK_BYTES, encode_split};
pub use format::{FormatError, KfreeSkbFormat, parse_kfree_skb};
pub use spec::{BadSpec, Resolved, TraceSpec, rdma_specs, resolve};

use encode::drop_rows;

/// Where tracefs is usually mounted, newest convention first.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Size of the recorder's ring: about 27 000 events between two reads.
const RING_BYTES: u32 = 4 << 20;
/// The ring is emptied at least this often, so a burst of MADs does not have to fit in it for a whole
/// interval.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// Events kept between two `EVNT` blocks; past this they are counted as lost rather than kept in memory.
/// About 16 MiB of JSON per interval: the analyzer keeps at most 64 MiB of custom blocks per file.
const MAX_PENDING: usize = 1 << 16;

/// Why `--kernel-events` could not start, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum KernelEventsError {
    /// Tracefs is not mounted and could not be.
    #[error(
        "tracefs is not mounted and could not be mounted at /sys/kernel/tracing (try `mount -t tracefs \
         nodev /sys/kernel/tracing`)"
    )]
    NoTracefs(#[source] std::io::Error),
    /// The kernel lacks `skb:kfree_skb`.
    #[error("this kernel has no skb:kfree_skb tracepoint, which --kernel-events needs")]
    NoKfreeSkb,
    /// Tracefs is mounted for root only.
    #[error(
        "{path} is not readable by this user: tracefs belongs to root unless mounted otherwise (run as root, \
         or mount tracefs with `-o gid=GROUP,mode=0750` for a group of this user)"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
    },
    /// A format file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A format file does not say what the tracer needs.
    #[error("{path}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: FormatError,
    },
    /// The probe object did not load.
    #[error(transparent)]
    Load(#[from] EbpfStartError),
    /// A program did not load or attach.
    #[error("eBPF program {name}")]
    Program {
        /// The program.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A map could not be opened or written.
    #[error("eBPF map {name}")]
    Map {
        /// The map.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::maps::MapError,
    },
}

/// The mounted tracefs, mounting it at the usual place when it is not (aya looks for it there as well).
pub fn tracefs() -> Result<PathBuf, KernelEventsError> {
    let mounted = |p: &Path| p.join("events").is_dir();
    if let Some(p) = TRACEFS.iter().map(Path::new).find(|p| mounted(p)) {
        return Ok(p.to_path_buf());
    }
    let target = Path::new(TRACEFS[0]);
    let c = |s: &str| CString::new(s).map_err(std::io::Error::other);
    let (src, dst, fs) = (
        c("nodev").map_err(KernelEventsError::NoTracefs)?,
        c(TRACEFS[0]).map_err(KernelEventsError::NoTracefs)?,
        c("tracefs").map_err(KernelEventsError::NoTracefs)?,
    );
    // SAFETY: three NUL-terminated strings that live across the call, and no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(KernelEventsError::NoTracefs(std::io::Error::last_os_error()));
    }
    eprintln!("roce-tracer: mounted tracefs at {}", target.display());
    Ok(target.to_path_buf())
}

/// The format file of a tracepoint, `None` when this kernel does not have it.
fn format_path(tracefs: &Path, system: &str, event: &str) -> Option<PathBuf> {
    let p = tracefs
        .join("events")
        .join(system)
        .join(event)
        .join("format");
    p.is_file().then_some(p)
}

/// The start-up line about the tracepoints.
pub fn describe(report: &Tracepoints) -> String {
    let mut line = format!(
        "roce-tracer: kernel events: attached {}",
        report.attached.join(", ")
    );
    if !report.unavailable.is_empty() {
        line.push_str(&format!(
            "; unavailable on this kernel: {}",
            report.unavailable.join(", ")
        ));
    }
    for (name, fields) in &report.incomplete {
        line.push_str(&format!("; {name} without {}", fields.join(", ")));
    }
    line
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> KernelEventsError {
    move |source| KernelEventsError::Map { name, source }
}

fn prog_err(name: &'static str) -> impl Fn(aya::programs::ProgramError) -> KernelEventsError {
    move |source| KernelEventsError::Program { name, source }
}

/// The attached programs and what has been reported of their counts.
pub struct KernelEvents {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    format: KfreeSkbFormat,
    /// Recorded tracepoints, by slot.
    traced: Vec<Resolved>,
    offset_ns: u64,
    report: Tracepoints,
    /// The line listing the tracepoints, for the caller to print.
    pub description: String,
    /// Drop counts already written into earlier files: each `DROP` block holds what happened during its file.
    reported: BTreeMap<DropKey, u64>,
    /// Drop counts as of the previous `EVNT` block.
    interval_drops: BTreeMap<DropKey, u64>,
    interval_counts: BTreeMap<CountKey, CountValue>,
    interval_lost: u64,
    interval_start_ns: u64,
    pending: Vec<Event>,
    /// Events read but not kept, [`MAX_PENDING`] being reached.
    overflow: u64,
    header_due: bool,
    last_poll: Instant,
    /// QP owners from `rdma res show qp`, as `rdma_res:qp` events.
    qp_owners: crate::qp_owners::QpSnapshots,
    /// Whether IP drops are counted for RoCEv2 only (the sk_buff layout was found).
    rocev2_only: bool,
}

/// The name of the recorder program of `slot`.
pub fn trace_program(slot: u32) -> String {
    format!("{TRACE_PROGRAM_PREFIX}{slot}")
}

/// Loads the recorder program of `slot` and attaches it to `system:event`. An error names what failed, for
/// the list of unavailable tracepoints.
fn attach_slot(ebpf: &mut Ebpf, slot: u32, system: &str, event: &str) -> Result<(), String> {
    let name = trace_program(slot);
    let prog: &mut TracePoint = ebpf
        .program_mut(&name)
        .ok_or_else(|| format!("no program {name} in the eBPF object"))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| e.to_string())?;
    prog.load().map_err(|e| format!("loading {name}: {e}"))?;
    prog.attach(system, event)
        .map(|_| ())
        .map_err(|e| format!("attaching: {e}"))
}

impl std::fmt::Debug for KernelEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelEvents")
            .field("report", &self.report)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl KernelEvents {
    /// Finds tracefs, reads the format files, loads a copy of the probe object, attaches the drop counter
    /// to `skb:kfree_skb` and the recorder to each of [`rdma_specs`] and `extra` this kernel has. The QP
    /// snapshots read the ports' GID tables under `sysfs_root` (`/sys` when `None`).
    pub fn start(
        extra: &[TraceSpec],
        sysfs_root: Option<&std::path::Path>,
    ) -> Result<KernelEvents, KernelEventsError> {
        let started_ns = crate::sys::now_ns();
        let root = tracefs()?;
        let path = format_path(&root, "skb", "kfree_skb").ok_or(KernelEventsError::NoKfreeSkb)?;
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                KernelEventsError::Unreadable { path: path.clone() }
            } else {
                KernelEventsError::Read {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        let format =
            parse_kfree_skb(&text).map_err(|source| KernelEventsError::Format { path, source })?;
        // To count RoCEv2 drops rather than every IP drop, the counter reads the packet's UDP port, which
        // needs the buffer's address in the record and sk_buff's layout from the kernel's BTF.
        let (layout, ip_drops) = match (format.skbaddr_offset, crate::btf::running_kernel()) {
            (Some(_), Ok(l)) => (
                Some(l),
                "IPv4/IPv6 drops counted for RoCEv2 (UDP 4791) only".to_string(),
            ),
            (None, _) => (
                None,
                "every IPv4/IPv6 drop counted, RoCEv2 or not: the tracepoint has no skbaddr"
                    .to_string(),
            ),
            (_, Err(why)) => (
                None,
                format!("every IPv4/IPv6 drop counted, RoCEv2 or not: no sk_buff layout ({why})"),
            ),
        };
        // A separate instance of the object, of which only the tracepoint programs and their maps are used:
        // the packet probe's array of rings keeps its one empty slot, and no ring is made for it.
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(shared::maps::TRACE_EVENTS, RING_BYTES)
            .load(probe_object()?)
            .map_err(EbpfStartError::from)?;
        {
            let map = ebpf
                .map_mut(maps::DROP_CONFIG)
                .ok_or(EbpfStartError::MissingMap(maps::DROP_CONFIG))?;
            let mut array: Array<&mut MapData, DropConfig> =
                Array::try_from(map).map_err(map_err(maps::DROP_CONFIG))?;
            let config = DropConfig {
                protocol_offset: format.protocol_offset,
                reason_offset: format.reason_offset.unwrap_or(NO_REASON),
                skbaddr_offset: format.skbaddr_offset.unwrap_or(NO_LAYOUT),
                skb_head: layout.map_or(NO_LAYOUT, |l| l.head),
                skb_network_header: layout.map_or(NO_LAYOUT, |l| l.network_header),
            };
            array
                .set(0, config, 0)
                .map_err(map_err(maps::DROP_CONFIG))?;
        }
        let prog: &mut TracePoint = ebpf
            .program_mut(KFREE_SKB_PROGRAM)
            .ok_or(EbpfStartError::MissingProgram(KFREE_SKB_PROGRAM))?
            .try_into()
            .map_err(prog_err(KFREE_SKB_PROGRAM))?;
        prog.load().map_err(prog_err(KFREE_SKB_PROGRAM))?;
        prog.attach("skb", "kfree_skb")
            .map_err(prog_err(KFREE_SKB_PROGRAM))?;
        let mut report = Tracepoints {
            attached: vec!["skb:kfree_skb".into()],
            ..Tracepoints::default()
        };

        // Each spec this kernel has, with its configuration; the rest are listed as unavailable.
        let mut traced: Vec<Resolved> = Vec::new();
        for spec in rdma_specs().iter().chain(extra) {
            let name = spec.name();
            let Some(path) = format_path(&root, &spec.system, &spec.event) else {
                report.unavailable.push(name);
                continue;
            };
            if traced.len() >= MAX_TRACEPOINTS as usize {
                report
                    .unavailable
                    .push(format!("{name} (more than {MAX_TRACEPOINTS} tracepoints)"));
                continue;
            }
            let resolved = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| resolve(spec, &t, traced.len() as u32).map_err(|e| e.to_string()));
            match resolved {
                Ok(r) => traced.push(r),
                Err(why) => report.unavailable.push(format!("{name} ({why})")),
            }
        }
        if !traced.is_empty() {
            let map = ebpf
                .map_mut(shared::maps::TRACE_CONFIG)
                .ok_or(EbpfStartError::MissingMap(shared::maps::TRACE_CONFIG))?;
            let mut configs: Array<&mut MapData, TraceConfig> =
                Array::try_from(map).map_err(map_err(shared::maps::TRACE_CONFIG))?;
            for t in &traced {
                configs
                    .set(t.config.slot, t.config, 0)
                    .map_err(map_err(shared::maps::TRACE_CONFIG))?;
            }
        }
        for t in &traced {
            let (system, event) = t.name.split_once(':').unwrap_or((&t.name, ""));
            match attach_slot(&mut ebpf, t.config.slot, system, event) {
                Ok(()) => {
                    report.attached.push(t.name.clone());
                    if !t.missing.is_empty() {
                        report.incomplete.insert(t.name.clone(), t.missing.clone());
                    }
                }
                Err(e) => report.unavailable.push(format!("{} ({e})", t.name)),
            }
        }
        let ring = ebpf
            .take_map(shared::maps::TRACE_EVENTS)
            .ok_or(EbpfStartError::MissingMap(shared::maps::TRACE_EVENTS))?;
        let ring = RingBuf::try_from(ring).map_err(map_err(shared::maps::TRACE_EVENTS))?;
        let offset_ns = crate::sys::monotonic_to_realtime_offset();
        let (qp_owners, owners, warning) =
            crate::qp_owners::QpSnapshots::start_default(started_ns, sysfs_root);
        let mut description = describe(&report);
        description.push_str(&format!("\nroce-tracer: kernel drops: {ip_drops}"));
        if let Some(w) = warning {
            description.push('\n');
            description.push_str(&w);
        }
        Ok(KernelEvents {
            ebpf,
            ring,
            format,
            traced,
            offset_ns,
            description,
            report,
            rocev2_only: layout.is_some(),
            reported: BTreeMap::new(),
            interval_drops: BTreeMap::new(),
            interval_counts: BTreeMap::new(),
            interval_lost: 0,
            interval_start_ns: started_ns,
            pending: owners,
            overflow: 0,
            header_due: true,
            last_poll: Instant::now(),
            qp_owners,
        })
    }

    /// What became of each tracepoint.
    pub fn report(&self) -> &Tracepoints {
        &self.report
    }

    /// Moves the events waiting in the ring into memory.
    pub fn poll(&mut self) {
        self.last_poll = Instant::now();
        while let Some(item) = self.ring.next() {
            if self.pending.len() >= MAX_PENDING {
                self.overflow += 1;
                continue;
            }
            if let Some(row) = decode_event(&self.traced, &item, self.offset_ns) {
                self.pending.push(row);
            }
        }
    }

    /// [`KernelEvents::poll`] when the last one is older than `POLL_EVERY`; cheap enough to call per frame.
    pub fn poll_if_due(&mut self) {
        if self.last_poll.elapsed() >= POLL_EVERY {
            self.poll();
        }
    }

    /// Current drop totals per key, summed over CPUs.
    fn drop_totals(&self) -> Result<BTreeMap<DropKey, u64>, KernelEventsError> {
        let map = self
            .ebpf
            .map(maps::DROPS)
            .ok_or(EbpfStartError::MissingMap(maps::DROPS))?;
        let drops: PerCpuHashMap<&MapData, DropKey, u64> =
            PerCpuHashMap::try_from(map).map_err(map_err(maps::DROPS))?;
        let mut out = BTreeMap::new();
        for item in drops.iter() {
            let (key, per_cpu) = item.map_err(map_err(maps::DROPS))?;
            out.insert(key, per_cpu.iter().sum());
        }
        Ok(out)
    }

    fn count_totals(&self) -> Result<BTreeMap<CountKey, CountValue>, KernelEventsError> {
        let name = shared::maps::TRACE_COUNTS;
        let map = self
            .ebpf
            .map(name)
            .ok_or(EbpfStartError::MissingMap(name))?;
        let counts: PerCpuHashMap<&MapData, CountKey, CountValue> =
            PerCpuHashMap::try_from(map).map_err(map_err(name))?;
        let mut out = BTreeMap::new();
        for item in counts.iter() {
            let (key, per_cpu) = item.map_err(map_err(name))?;
            let mut v = CountValue::default();
            for c in per_cpu.iter() {
                v.events += c.events;
                v.sum += c.sum;
            }
            out.insert(key, v);
        }
        Ok(out)
    }

    /// Events the kernel side could not keep: ring full, count map full.
    fn lost_total(&self) -> Result<u64, KernelEventsError> {
        let name = shared::maps::TRACE_STATS;
        let map = self
            .ebpf
            .map(name)
            .ok_or(EbpfStartError::MissingMap(name))?;
        let stats: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(map_err(name))?;
        let mut lost = self.overflow;
        for i in [stat::RING_FULL, stat::COUNT_FULL] {
            lost += stats.get(&i, 0).map_err(map_err(name))?.iter().sum::<u64>();
        }
        Ok(lost)
    }

    fn count_rows(&self, now: &BTreeMap<CountKey, CountValue>) -> Vec<records::CountRow> {
        now.iter()
            .filter_map(|(key, v)| {
                let before = self.interval_counts.get(key).copied().unwrap_or_default();
                let events = v.events.saturating_sub(before.events);
                let t = self.traced.get(key.slot as usize)?;
                let field = |i: u32| t.ints.get(i as usize).map(|f| f.name.clone());
                let key_name = field(t.config.count_key)?;
                let mut sum = BTreeMap::new();
                if let Some(s) = field(t.config.count_sum) {
                    sum.insert(s, v.sum.saturating_sub(before.sum));
                }
                (events > 0).then(|| records::CountRow {
                    tracepoint: t.name.clone(),
                    key: BTreeMap::from([(key_name, key.key)]),
                    events,
                    sum,
                })
            })
            .collect()
    }

    /// Everything since the previous call (since the start for the first), as `EVNT` records: one, or
    /// several when the events would make a block larger than the analyzer reads ([`MAX_BLOCK_BYTES`]).
    /// Written every `--interval`, even when empty, so a reader can tell a quiet interval from a missing one.
    pub fn interval_blocks(&mut self) -> Vec<Vec<u8>> {
        let owners = self.qp_owners.snapshot(crate::sys::now_ns());
        self.pending.extend(owners);
        let now_ns = crate::sys::now_ns();
        let drops = self.drop_totals().unwrap_or_default();
        let counts = self.count_totals().unwrap_or_default();
        let lost = self.lost_total().unwrap_or(self.interval_lost);
        self.poll();
        // Events stamped after the interval's end wait for the next block, so each block's events fall
        // inside its interval (but for one still being written when the interval closed).
        let (mut events, later): (Vec<Event>, Vec<Event>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.ts_ns < now_ns);
        self.pending = later;
        events.sort_by_key(|e| e.ts_ns);
        let block = records::Events {
            version: records::VERSION,
            ts_ns: now_ns,
            from_ns: self.interval_start_ns,
            to_ns: now_ns,
            tracepoints: self.header_due.then(|| self.report.clone()),
            events,
            drops: drop_rows(&drops, &self.interval_drops, &self.format.reasons),
            ip: Some(self.ip_drops()),
            counts: self.count_rows(&counts),
            lost: lost.saturating_sub(self.interval_lost),
        };
        self.header_due = false;
        self.interval_drops = drops;
        self.interval_counts = counts;
        self.interval_lost = lost;
        self.interval_start_ns = now_ns;
        encode_split(block)
    }

    /// The drops since the previous call (since the start for the first), as a `DROP` record.
    pub fn take_block(&mut self) -> Option<Vec<u8>> {
        let totals = self.drop_totals().ok()?;
        let block = records::Drops {
            version: records::VERSION,
            ts_ns: crate::sys::now_ns(),
            ip: Some(self.ip_drops()),
            drops: drop_rows(&totals, &self.reported, &self.format.reasons),
        };
        self.reported = totals;
        roce_capture::blocks::encode_record(&block).ok()
    }

    /// What the IP rows of the drop records count.
    fn ip_drops(&self) -> IpDrops {
        if self.rocev2_only {
            IpDrops::Rocev2
        } else {
            IpDrops::Any
        }
    }

    /// What a closing file gets last: the events since the last `EVNT` block, then its `DROP` totals. The
    /// next file's first `EVNT` block repeats the tracepoint list.
    pub fn closing_blocks(&mut self) -> Vec<Vec<u8>> {
        let mut blocks = self.interval_blocks();
        blocks.extend(self.take_block());
        self.header_due = true;
        self.qp_owners.forget();
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_names_what_is_missing() {
        let report = Tracepoints {
            attached: vec!["skb:kfree_skb".into(), "ib_mad:ib_mad_ib_send_mad".into()],
            unavailable: vec!["rdma_cma:cm_qp_create".into()],
            incomplete: BTreeMap::from([(
                "ib_mad:ib_mad_ib_send_mad".to_string(),
                vec!["rqpn (not in this kernel's record)".to_string()],
            )]),
        };
        let line = describe(&report);
        assert!(line.contains("attached skb:kfree_skb, ib_mad:ib_mad_ib_send_mad"));
        assert!(line.contains("unavailable on this kernel: rdma_cma:cm_qp_create"));
        assert!(line.contains("ib_mad:ib_mad_ib_send_mad without rqpn"));
    }
}
