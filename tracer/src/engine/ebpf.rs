//! The eBPF engine: the `tracer-ebpf` TC probe on ingress and egress of each interface, a ring buffer per
//! CPU ([`super::rings`]) read by `--threads` threads ([`super::consumer`], each ring in batches, see
//! [`super::ring`]), and the probe's per-CPU counters read at the end.
//!
//! The probe selects RoCE, CNP, PFC and PAUSE frames (or all with `--all-frames`); a user's `--filter` is
//! compiled by libpcap and run by the readers on each record, so it narrows that selection and cannot widen
//! it. The probe wakes a reader only once per many records (see [`wakeup_bytes`]), so the readers also poll.
//! Ring-buffer losses are counted per CPU, so per ring, and per interface, for each interface's statistics
//! block. A loopback interface gets the probe on ingress only: everything it sends, it receives, and a
//! probe on both hooks wrote each frame twice.
//!
//! The probe is attached through TCX links (kernel 6.6 and later), which belong to this process: they go
//! away when it exits, even on SIGKILL, so no tc filter or qdisc is ever left behind. Older kernels get
//! aya's netlink attachment to a clsact qdisc, which we then remove ourselves at exit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::thread::JoinHandle;

use aya::Ebpf;
use aya::maps::{ArrayOfMaps, MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::tc::{NlOptions, TcAttachOptions};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::util::KernelVersion;
use roce_capture::LinkType;
use roce_capture::blocks::records::{Probe, ProbePrio, ProbeQp, ProbeRing, VERSION};
use tracer_common::{
    Config, MAX_SNAPLEN, PRIO_SLOTS, PrioCounters, ProbeCounters, QpCounters, SMALL_SNAPLEN, maps,
};

use super::consumer::{self, Share, Tally};
pub use super::record::RingRecord;
use super::ring::{RingError, RingReader};
use super::rings::{RingPlan, RingSetupError};
use super::{Engine, EngineConfig, IfaceStats, Plumbing};
use crate::sys;

/// The probe object built by `build.rs` (empty when the build skipped it).
static PROBE: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-probe"));

/// The name in the object of the program on each interface's ingress hook.
pub const INGRESS: &str = "tracer_ingress";
/// The name in the object of the program on each interface's egress hook.
pub const EGRESS: &str = "tracer_egress";
/// A program that returns at once, for measuring what the kernel's run-time statistics add to each run.
pub const BASELINE: &str = "tracer_baseline";

/// The rings' budget unless `--ring-bytes` says otherwise, shared among the CPUs' rings
/// ([`super::rings::share`]).
pub const DEFAULT_RING_BYTES: u32 = 64 << 20;

/// The readers unless `--threads` says otherwise: one per ring, up to this many. One writer merges and
/// writes what they read, and past a few readers it is that writer that sets the pace.
pub const DEFAULT_MAX_THREADS: usize = 4;

/// Whether the probe copies only each frame's headers ([`tracer_common::copy_len`]) at this snap length.
/// Snap lengths up to [`SMALL_SNAPLEN`] (the default 256 among them) are for headers: copying 256 bytes
/// into the ring was most of the probe's cost per frame, and a RoCE frame's headers take 54 to about
/// 120 of them. A larger snap length asks for payloads, and gets its bytes as before.
pub fn headers_only(snaplen: u32) -> bool {
    snaplen as usize <= SMALL_SNAPLEN
}

/// The probe wakes the reader each time one CPU's records have filled another sixteenth of its ring: rarely
/// enough that a fast stream costs a wakeup per several thousand frames, early enough that the reader starts
/// draining long before the ring is full (it also wakes every [`consumer::POLL_MS`] by itself).
pub fn wakeup_bytes(ring_bytes: u32) -> u32 {
    (ring_bytes / 16).max(1)
}

/// When set, the probes attach as netlink tc filters under a clsact qdisc, as on kernels before 6.6, even
/// where TCX links exist: that path's cleanup is tested on whatever kernel the tests run.
pub const FORCE_NETLINK_ENV: &str = "ROCETRACE_TC_NETLINK";

/// Why the eBPF engine could not start, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum EbpfStartError {
    /// The tracer was built without the probe object.
    #[error(
        "this roce-tracer was built without its eBPF probe (AYA_BUILD_SKIP); rebuild with the nightly \
         toolchain, rust-src and bpf-linker installed (see the README), or use --engine pcap"
    )]
    NotBuilt,
    /// The kernel refused the object.
    #[error("loading the eBPF probe failed")]
    Load(#[from] aya::EbpfError),
    /// A program the tracer needs is not in the object.
    #[error("eBPF program {0} is missing from the object")]
    MissingProgram(&'static str),
    /// A map the tracer needs is not in the object.
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    /// A map could not be opened, read or written.
    #[error("eBPF map {name}")]
    Map {
        /// The map.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::maps::MapError,
    },
    /// A program could not be loaded.
    #[error("eBPF program {name}")]
    Program {
        /// The program.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// An `-i` interface does not exist.
    #[error("no interface named {0}")]
    NoSuchInterface(String),
    /// The `--filter` expression does not compile.
    #[error("the capture filter {filter:?} does not compile for Ethernet")]
    Filter {
        /// The expression.
        filter: String,
        /// Why.
        #[source]
        source: pcap::Error,
    },
    /// A program could not be attached to an interface.
    #[error(
        "attaching the probe to {iface} ({direction}) failed (on kernels before 6.6 make sure the clsact \
         qdisc can be added: `tc qdisc add dev {iface} clsact`; or use --engine pcap)"
    )]
    Attach {
        /// The interface.
        iface: String,
        /// `ingress` or `egress`.
        direction: &'static str,
        /// Why.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A reader thread could not be started.
    #[error("cannot start the ring-buffer readers")]
    Thread(#[from] std::io::Error),
    /// The per-CPU rings could not be made.
    #[error("cannot set up the probe's ring buffers")]
    Rings(#[from] RingSetupError),
    /// The ring buffer cannot be read.
    #[error("cannot read the probe's ring buffer")]
    Ring(#[from] RingError),
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> EbpfStartError {
    move |source| EbpfStartError::Map { name, source }
}

fn prog_err(name: &'static str) -> impl Fn(aya::programs::ProgramError) -> EbpfStartError {
    move |source| EbpfStartError::Program { name, source }
}

/// The embedded eBPF object, or why there is none.
pub fn probe_object() -> Result<&'static [u8], EbpfStartError> {
    if PROBE.is_empty() {
        return Err(EbpfStartError::NotBuilt);
    }
    Ok(PROBE)
}

/// A loaded probe: the object, with its rings made and put in place (not yet read).
#[derive(Debug)]
pub struct LoadedProbe {
    /// The object: programs, counters.
    pub ebpf: Ebpf,
    /// The rings, by number, until a reader takes them (the probe's array keeps them alive meanwhile).
    rings: Vec<Option<MapData>>,
    /// Which CPU writes into which ring.
    pub plan: RingPlan,
}

/// Loads the probe with its configuration, makes the rings `plan` asks for and puts them in place, and
/// loads (verifies) both programs, without attaching them: the capture attaches them, the tests run them
/// through `BPF_PROG_TEST_RUN`. The configuration is written into the object's read-only data before the
/// programs are verified, so the verifier sees it as constants and removes what it rules out (the large
/// records at short snap lengths, for one). The snap length is capped at [`MAX_SNAPLEN`], and
/// `wakeup_bytes` rounded down to a power of two, which the probe's test for passing a multiple needs.
pub fn load_probe(config: Config, plan: RingPlan) -> Result<LoadedProbe, EbpfStartError> {
    let object = probe_object()?;
    let config = Config {
        snaplen: config.snaplen.min(MAX_SNAPLEN as u32),
        wakeup_bytes: match config.wakeup_bytes {
            0 => 0,
            n => 1 << n.ilog2(),
        },
        ..config
    };
    let slots = u32::try_from(plan.ring_of_cpu.len()).unwrap_or(u32::MAX);
    let mut ebpf = aya::EbpfLoader::new()
        .map_max_entries(maps::RINGS, slots.max(1))
        .override_global(tracer_common::CONFIG_GLOBAL, &config, true)
        .load(object)?;
    let rings = (0..plan.rings)
        .map(|r| super::rings::create_ring(plan.ring_bytes, &format!("rt_ring_{r}")))
        .collect::<Result<Vec<_>, _>>()?;
    {
        let map = ebpf
            .map_mut(maps::RINGS)
            .ok_or(EbpfStartError::MissingMap(maps::RINGS))?;
        let mut slots: ArrayOfMaps<&mut MapData, MapData> =
            ArrayOfMaps::try_from(map).map_err(map_err(maps::RINGS))?;
        for (cpu, &ring) in plan.ring_of_cpu.iter().enumerate() {
            let Some(ring) = rings.get(ring as usize) else {
                continue;
            };
            slots
                .set(cpu as u32, ring, 0)
                .map_err(map_err(maps::RINGS))?;
        }
    }
    for name in [INGRESS, EGRESS] {
        let prog: &mut SchedClassifier = ebpf
            .program_mut(name)
            .ok_or(EbpfStartError::MissingProgram(name))?
            .try_into()
            .map_err(prog_err(name))?;
        prog.load().map_err(prog_err(name))?;
    }
    Ok(LoadedProbe {
        ebpf,
        rings: rings.into_iter().map(Some).collect(),
        plan,
    })
}

impl LoadedProbe {
    /// Ring `ring` as aya reads it, record by record (the tests' reader).
    pub fn take_ring(&mut self, ring: u32) -> Result<RingBuf<MapData>, EbpfStartError> {
        let map = self.take(ring)?;
        RingBuf::try_from(aya::maps::Map::RingBuf(map)).map_err(map_err(maps::RINGS))
    }

    /// Ring `ring` as the capture reads it: through [`RingReader`], which gives space back to the kernel
    /// once per batch of records (see [`super::ring`]).
    pub fn take_reader(&mut self, ring: u32) -> Result<RingReader, EbpfStartError> {
        Ok(RingReader::new(self.take(ring)?)?)
    }

    /// Every ring, as the capture reads them.
    pub fn take_readers(&mut self) -> Result<Vec<RingReader>, EbpfStartError> {
        (0..self.plan.rings).map(|r| self.take_reader(r)).collect()
    }

    fn take(&mut self, ring: u32) -> Result<MapData, EbpfStartError> {
        // Each ring is read by one reader: a ring asked for twice is not there the second time.
        self.rings
            .get_mut(ring as usize)
            .and_then(Option::take)
            .ok_or(EbpfStartError::MissingMap(maps::RINGS))
    }
}

/// The probe's own counters of each possible CPU, in CPU order.
pub fn per_cpu_counters(ebpf: &Ebpf) -> Result<Vec<ProbeCounters>, EbpfStartError> {
    let map = ebpf
        .map(maps::COUNTERS)
        .ok_or(EbpfStartError::MissingMap(maps::COUNTERS))?;
    let counters: PerCpuArray<&MapData, ProbeCounters> =
        PerCpuArray::try_from(map).map_err(map_err(maps::COUNTERS))?;
    let values = counters.get(&0, 0).map_err(map_err(maps::COUNTERS))?;
    Ok(values.iter().copied().collect())
}

/// Frames lost to a full ring buffer so far, summed over CPUs.
pub fn ring_full(ebpf: &Ebpf) -> Option<u64> {
    Some(
        per_cpu_counters(ebpf)
            .ok()?
            .iter()
            .map(|c| c.ring_full)
            .sum(),
    )
}

/// Each ring's counts from the probe's per-CPU counters (a ring's are those of the CPUs that write into
/// it): `(emitted, lost)` per ring.
pub fn per_ring(plan: &RingPlan, per_cpu: &[ProbeCounters]) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0); plan.rings as usize];
    for (cpu, c) in per_cpu.iter().enumerate() {
        let ring = plan.ring_of_cpu.get(cpu).copied().unwrap_or(0);
        if let Some(slot) = out.get_mut(ring as usize) {
            slot.0 += c.emitted;
            slot.1 += c.ring_full;
        }
    }
    out
}

/// Frames lost to a full ring buffer so far, per interface index, summed over CPUs.
pub fn ring_full_by_ifindex(ebpf: &Ebpf) -> Result<BTreeMap<u32, u64>, EbpfStartError> {
    let map = ebpf
        .map(maps::RING_FULL_BY_IF)
        .ok_or(EbpfStartError::MissingMap(maps::RING_FULL_BY_IF))?;
    let per_if: PerCpuHashMap<&MapData, u32, u64> =
        PerCpuHashMap::try_from(map).map_err(map_err(maps::RING_FULL_BY_IF))?;
    let mut out = BTreeMap::new();
    for item in per_if.iter() {
        let (ifindex, per_cpu) = item.map_err(map_err(maps::RING_FULL_BY_IF))?;
        out.insert(ifindex, per_cpu.iter().sum());
    }
    Ok(out)
}

/// What the capture's readers and writer counted per ring, for the probe's record.
#[derive(Debug, Clone, Default)]
pub struct RingCounts {
    /// Records read from each ring.
    pub read: Vec<u64>,
    /// Frames of each ring written after a later frame.
    pub late: Vec<u64>,
}

/// Reads the probe's maps (the per-CPU values summed, and per ring after `plan`), with what the readers
/// counted per ring.
pub fn probe_stats(
    ebpf: &Ebpf,
    plan: &RingPlan,
    counts: &RingCounts,
) -> Result<Probe, EbpfStartError> {
    let mut st = Probe {
        version: VERSION,
        ts_ns: sys::now_ns(),
        ..Probe::default()
    };
    let per_cpu = per_cpu_counters(ebpf)?;
    for c in &per_cpu {
        st.seen += c.seen;
        st.matched += c.matched;
        st.emitted += c.emitted;
        st.ring_full += c.ring_full;
    }
    st.rings = per_ring(plan, &per_cpu)
        .into_iter()
        .enumerate()
        .map(|(r, (emitted, lost))| ProbeRing {
            ring: r as u32,
            cpus: plan.cpus_of(r as u32),
            bytes: u64::from(plan.ring_bytes),
            emitted,
            lost,
            read: counts.read.get(r).copied().unwrap_or(0),
            late: counts.late.get(r).copied().unwrap_or(0),
        })
        .collect();

    let map = ebpf
        .map(maps::QP_STATS)
        .ok_or(EbpfStartError::MissingMap(maps::QP_STATS))?;
    let qps: PerCpuHashMap<&MapData, u32, QpCounters> =
        PerCpuHashMap::try_from(map).map_err(map_err(maps::QP_STATS))?;
    for item in qps.iter() {
        let (qp, per_cpu) = item.map_err(map_err(maps::QP_STATS))?;
        let mut row = ProbeQp {
            dest_qp: qp,
            ..ProbeQp::default()
        };
        for c in per_cpu.iter() {
            row.packets += c.packets;
            row.bytes += c.bytes;
            row.ce += c.ce;
            row.cnps += c.cnps;
        }
        st.qps.push(row);
    }
    st.qps.sort_by_key(|r| r.dest_qp);

    let map = ebpf
        .map(maps::PRIO_STATS)
        .ok_or(EbpfStartError::MissingMap(maps::PRIO_STATS))?;
    let prios: PerCpuArray<&MapData, PrioCounters> =
        PerCpuArray::try_from(map).map_err(map_err(maps::PRIO_STATS))?;
    for slot in 0..PRIO_SLOTS {
        let per_cpu = prios.get(&slot, 0).map_err(map_err(maps::PRIO_STATS))?;
        let mut row = ProbePrio {
            priority: u8::try_from(slot).ok().filter(|&p| p < 8),
            ..ProbePrio::default()
        };
        for c in per_cpu.iter() {
            row.roce_packets += c.roce_packets;
            row.roce_bytes += c.roce_bytes;
            row.ce += c.ce;
            row.pfc_frames += c.pfc_frames;
            row.pfc_xoff += c.pfc_xoff;
            row.pfc_xon += c.pfc_xon;
            row.pause_frames += c.pause_frames;
        }
        if row
            != (ProbePrio {
                priority: row.priority,
                ..ProbePrio::default()
            })
        {
            st.prios.push(row);
        }
    }
    Ok(st)
}

/// Compiles a libpcap filter for Ethernet frames, to run in userspace on what the probe hands over (the
/// probe cannot run classic BPF itself). `len`, `greater` and `less` then test the captured length.
pub fn compile_filter(expr: &str) -> Result<pcap::BpfProgram, EbpfStartError> {
    let err = |source| EbpfStartError::Filter {
        filter: expr.to_owned(),
        source,
    };
    pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .map_err(err)?
        .compile(expr, true)
        .map_err(err)
}

/// The running eBPF engine: the loaded probe, its attachments and the ring readers.
#[derive(Debug)]
pub struct EbpfEngine {
    ebpf: Ebpf,
    plan: RingPlan,
    readers: Vec<JoinHandle<Tally>>,
    /// Interface index → position in the `-i` list.
    index_of: HashMap<u32, u32>,
    ifaces: usize,
    /// Per `-i` interface: a loopback device, probed on ingress only.
    loopback: Vec<bool>,
    filter: Option<String>,
    all_frames: bool,
    /// Interfaces whose probes hang off a clsact qdisc we added (pre-6.6 kernels): removed at exit.
    netlink_ifaces: Vec<String>,
}

/// How many readers `--threads` (`None`: the default) gives `rings` rings: at least one, at most one per
/// ring (a reader without a ring would only sleep).
pub fn reader_count(threads: Option<usize>, rings: u32) -> usize {
    let rings = (rings as usize).max(1);
    threads.unwrap_or(DEFAULT_MAX_THREADS).clamp(1, rings)
}

/// The hooks the probe goes on for an interface: both, except on a loopback device, which receives
/// every frame it sends (and on ingress the frame can carry the stack's receive stamp).
fn hooks(loopback: bool) -> &'static [(&'static str, &'static str, TcAttachType)] {
    const BOTH: &[(&str, &str, TcAttachType)] = &[
        (INGRESS, "ingress", TcAttachType::Ingress),
        (EGRESS, "egress", TcAttachType::Egress),
    ];
    if loopback { &BOTH[..1] } else { BOTH }
}

/// Loads the probe, attaches it to every interface (ingress and egress, a loopback device's ingress
/// only) and starts the ring readers.
pub fn start(config: &EngineConfig, plumbing: &Plumbing) -> Result<EbpfEngine, EbpfStartError> {
    // Before loading anything, so that a bad expression leaves nothing to detach.
    compile_filter_opt(config.filter.as_deref())?;
    let plan = RingPlan::this_host(config.ring_bytes.unwrap_or(DEFAULT_RING_BYTES))?;
    let threads = reader_count(config.threads, plan.rings);
    let mut probe = load_probe(
        Config {
            // `load_probe` caps it at what a record holds.
            snaplen: config.snaplen,
            all_frames: u32::from(config.all_frames),
            wakeup_bytes: wakeup_bytes(plan.ring_bytes),
            headers_only: u32::from(headers_only(config.snaplen)),
        },
        plan,
    )?;
    let mut index_of = HashMap::new();
    for (i, name) in config.interfaces.iter().enumerate() {
        let idx =
            sys::ifindex(name).ok_or_else(|| EbpfStartError::NoSuchInterface(name.clone()))?;
        index_of.insert(idx, i as u32);
    }
    let loopback: Vec<bool> = config
        .interfaces
        .iter()
        .map(|n| sys::is_loopback(n))
        .collect();
    let tcx = std::env::var_os(FORCE_NETLINK_ENV).is_none()
        && KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
    let mut netlink_ifaces = Vec::new();
    for (name, &lo) in config.interfaces.iter().zip(&loopback) {
        if !tcx {
            if aya::programs::tc::qdisc_add_clsact(name).is_ok() {
                // Ours: removed again at exit.
                netlink_ifaces.push(name.clone());
            } else {
                // Already there: another tool's, or one that a run of ours killed by SIGKILL left behind
                // with its filters still attached. Those filters go now, before ours attach, and such a
                // qdisc is removed at exit as if this run had made it.
                let mut leftovers = false;
                for (prog_name, kind) in [
                    (INGRESS, TcAttachType::Ingress),
                    (EGRESS, TcAttachType::Egress),
                ] {
                    leftovers |=
                        aya::programs::tc::qdisc_detach_program(name, kind, prog_name).is_ok();
                }
                if leftovers {
                    netlink_ifaces.push(name.clone());
                }
            }
        }
        for &(prog_name, direction, kind) in hooks(lo) {
            let prog: &mut SchedClassifier = probe
                .ebpf
                .program_mut(prog_name)
                .ok_or(EbpfStartError::MissingProgram(prog_name))?
                .try_into()
                .map_err(prog_err(prog_name))?;
            let attached = if tcx {
                prog.attach(name, kind)
            } else {
                prog.attach_with_options(name, kind, TcAttachOptions::Netlink(NlOptions::default()))
            };
            attached.map_err(|source| EbpfStartError::Attach {
                iface: name.clone(),
                direction,
                source,
            })?;
        }
    }
    let mut shares: Vec<Vec<Share>> = (0..threads).map(|_| Vec::new()).collect();
    for (r, reader) in probe.take_readers()?.into_iter().enumerate() {
        if let Some(s) = shares.get_mut(r % threads) {
            s.push(Share {
                ring: r as u32,
                reader,
            });
        }
    }
    let setup = Arc::new(consumer::Setup {
        index_of: index_of.clone(),
        names: config.interfaces.clone(),
        mono_to_real: sys::monotonic_to_realtime_offset(),
    });
    let mut readers = Vec::with_capacity(threads);
    for (k, share) in shares.into_iter().enumerate() {
        let filter = compile_filter_opt(config.filter.as_deref())?;
        readers.push(consumer::spawn(
            k,
            share,
            filter,
            k == 0,
            Arc::clone(&setup),
            plumbing.clone(),
        )?);
    }
    Ok(EbpfEngine {
        ebpf: probe.ebpf,
        plan: probe.plan,
        readers,
        index_of,
        ifaces: config.interfaces.len(),
        loopback,
        filter: config.filter.clone(),
        all_frames: config.all_frames,
        netlink_ifaces,
    })
}

fn compile_filter_opt(expr: Option<&str>) -> Result<Option<pcap::BpfProgram>, EbpfStartError> {
    expr.map(compile_filter).transpose()
}

impl EbpfEngine {
    /// Each interface's own ring-buffer losses. Lost frames are counted before the user's filter could
    /// look at them, so with --filter they are an upper bound on what the filter would have kept.
    fn lost_by_iface(&self) -> Option<Vec<u64>> {
        let by_index = ring_full_by_ifindex(&self.ebpf).ok()?;
        let mut v = vec![0u64; self.ifaces];
        for (ifindex, n) in by_index {
            if let Some(slot) = self
                .index_of
                .get(&ifindex)
                .and_then(|&i| v.get_mut(i as usize))
            {
                *slot += n;
            }
        }
        Some(v)
    }
}

impl Engine for EbpfEngine {
    fn link_types(&self) -> Vec<LinkType> {
        vec![LinkType::ETHERNET; self.ifaces]
    }

    fn describe(&self, iface: u32) -> String {
        let mut d = if self.loopback.get(iface as usize).copied().unwrap_or(false) {
            String::from(
                "roce-tracer engine=ebpf (TC probe, ingress only: a loopback device receives what it sends): ",
            )
        } else {
            String::from("roce-tracer engine=ebpf (TC probe, ingress and egress): ")
        };
        d.push_str(if self.all_frames {
            "every frame"
        } else {
            "RoCEv2, RoCEv1, CNP, PFC, PAUSE"
        });
        if let Some(f) = &self.filter {
            d.push_str(" filter=");
            d.push_str(f);
        }
        d
    }

    fn dropped_so_far(&self) -> Vec<u64> {
        self.lost_by_iface().unwrap_or_else(|| vec![0; self.ifaces])
    }

    fn sources(&self) -> usize {
        self.plan.rings as usize
    }

    fn dropped_by_source(&self) -> Vec<u64> {
        match per_cpu_counters(&self.ebpf) {
            Ok(c) => per_ring(&self.plan, &c).into_iter().map(|r| r.1).collect(),
            Err(_) => vec![0; self.plan.rings as usize],
        }
    }

    fn finish(mut self: Box<Self>, late: &[u64]) -> (Vec<IfaceStats>, Option<Vec<u8>>) {
        let mut received = vec![0u64; self.ifaces];
        let mut counts = RingCounts {
            read: vec![0; self.plan.rings as usize],
            late: late.to_vec(),
        };
        for reader in std::mem::take(&mut self.readers) {
            let Ok(tally) = reader.join() else {
                continue;
            };
            for (slot, n) in received.iter_mut().zip(&tally.received) {
                *slot += n;
            }
            for (ring, n) in tally.read {
                if let Some(slot) = counts.read.get_mut(ring as usize) {
                    *slot += n;
                }
            }
        }
        let probe = probe_stats(&self.ebpf, &self.plan, &counts).ok();
        let by_iface = self.lost_by_iface();
        let stats = (0..self.ifaces)
            .map(|i| {
                let got = received.get(i).copied().unwrap_or(0);
                let dropped = by_iface.as_ref().and_then(|v| v.get(i).copied());
                IfaceStats {
                    received: Some(got + dropped.unwrap_or(0)),
                    dropped,
                }
            })
            .collect();
        let block = probe.and_then(|p| roce_capture::blocks::encode_record(&p).ok());
        for name in &self.netlink_ifaces {
            // Deleting the qdisc deletes every filter under it: only when all of them are ours.
            if only_our_filters(name) {
                let _ = std::process::Command::new("tc")
                    .args(["qdisc", "del", "dev", name, "clsact"])
                    .status();
            }
        }
        (stats, block)
    }
}

/// Whether every tc filter on the interface's clsact hooks is one of the probe's programs (or there are
/// none). Anything else, or a `tc` that cannot be asked, keeps the qdisc.
fn only_our_filters(iface: &str) -> bool {
    ["ingress", "egress"].iter().all(|hook| {
        std::process::Command::new("tc")
            .args(["filter", "show", "dev", iface, hook])
            .output()
            .is_ok_and(|out| {
                out.status.success()
                    && String::from_utf8_lossy(&out.stdout)
                        .lines()
                        // `tc` prints a header line per priority, then one per filter (with its handle).
                        .filter(|l| l.starts_with("filter") && l.contains(" handle "))
                        .all(|l| l.contains(INGRESS) || l.contains(EGRESS))
            })
    })
}
