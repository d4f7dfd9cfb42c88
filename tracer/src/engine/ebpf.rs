//! The eBPF engine: the `tracer-ebpf` TC probe on ingress and egress of each interface, a ring buffer read by
//! one thread (in batches, see [`super::ring`]), and the probe's per-CPU counters read at the end.
//!
//! The probe selects RoCE, CNP, PFC and PAUSE frames (or all with `--all-frames`); a user's `--filter` is
//! compiled by libpcap and run here on each record, so it narrows that selection and cannot widen it. The
//! probe wakes the reader only once per many records (see [`wakeup_bytes`]), so the reader also polls every
//! [`POLL_MS`]. Ring-buffer losses are counted per interface, for each interface's statistics block.
//!
//! The probe is attached through TCX links (kernel 6.6 and later), which belong to this process: they go
//! away when it exits, even on SIGKILL, so no tc filter or qdisc is ever left behind. Older kernels get
//! aya's netlink attachment to a clsact qdisc, which we then remove ourselves at exit.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::tc::{NlOptions, TcAttachOptions};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::util::KernelVersion;
use roce_capture::LinkType;
use roce_capture::blocks::records::{Probe, ProbePrio, ProbeQp, VERSION};
use tracer_common::{
    Config, EVENT_HEADER_LEN, MAX_SNAPLEN, PRIO_SLOTS, PacketEvent, PrioCounters, ProbeCounters,
    QpCounters, SMALL_SNAPLEN, flag, maps,
};

use super::ring::{RingError, RingReader, Stop};
use super::{Captured, Engine, EngineConfig, Event, IfaceStats, Plumbing};
use crate::sys;

/// The probe object built by `build.rs` (empty when the build skipped it).
static PROBE: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-probe"));

/// The name in the object of the program on each interface's ingress hook.
pub const INGRESS: &str = "tracer_ingress";
/// The name in the object of the program on each interface's egress hook.
pub const EGRESS: &str = "tracer_egress";
/// A program that returns at once, for measuring what the kernel's run-time statistics add to each run.
pub const BASELINE: &str = "tracer_baseline";

/// The probe's ring-buffer size unless `--ring-bytes` says otherwise (the map's size in the object).
pub const DEFAULT_RING_BYTES: u32 = 64 << 20;

/// Whether the probe copies only each frame's headers ([`tracer_common::copy_len`]) at this snap length.
/// Snap lengths up to [`SMALL_SNAPLEN`] (the default 256 among them) are for headers: copying 256 bytes
/// into the ring was most of the probe's cost per frame, and a RoCE frame's headers take 54 to about
/// 120 of them. A larger snap length asks for payloads, and gets its bytes as before.
pub fn headers_only(snaplen: u32) -> bool {
    snaplen as usize <= SMALL_SNAPLEN
}

/// How long the ring reader sleeps when nothing woke it: the probe submits records without a wakeup until a
/// CPU has written another [`wakeup_bytes`] of them, so this bounds how late a frame of a slow stream
/// reaches the file.
pub const POLL_MS: i32 = 10;

/// The probe wakes the reader each time one CPU's records have filled another sixteenth of the ring: rarely
/// enough that a fast stream costs a wakeup per several thousand frames, early enough that the reader starts
/// draining long before the ring is full (it also wakes every [`POLL_MS`] by itself).
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
    /// The reader thread could not be started.
    #[error("cannot start the ring-buffer reader")]
    Thread(#[from] std::io::Error),
    /// A map the tracer reads as a ring buffer is something else.
    #[error("eBPF map {0} is not a ring buffer")]
    NotARing(&'static str),
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

/// Loads the probe with its configuration and loads (verifies) both programs, without attaching them: the
/// capture attaches them, the tests run them through `BPF_PROG_TEST_RUN`. The configuration is written into
/// the object's read-only data before the programs are verified, so the verifier sees it as constants and
/// removes what it rules out (the large records at short snap lengths, for one). The snap length is capped
/// at [`MAX_SNAPLEN`], and `wakeup_bytes` rounded down to a power of two, which the probe's test for
/// passing a multiple needs.
pub fn load_probe(config: Config, ring_bytes: Option<u32>) -> Result<Ebpf, EbpfStartError> {
    let object = probe_object()?;
    let config = Config {
        snaplen: config.snaplen.min(MAX_SNAPLEN as u32),
        wakeup_bytes: match config.wakeup_bytes {
            0 => 0,
            n => 1 << n.ilog2(),
        },
        ..config
    };
    let mut loader = aya::EbpfLoader::new();
    if let Some(bytes) = ring_bytes {
        loader.map_max_entries(maps::EVENTS, bytes);
    }
    loader.override_global(tracer_common::CONFIG_GLOBAL, &config, true);
    let mut ebpf = loader.load(object)?;
    for name in [INGRESS, EGRESS] {
        let prog: &mut SchedClassifier = ebpf
            .program_mut(name)
            .ok_or(EbpfStartError::MissingProgram(name))?
            .try_into()
            .map_err(prog_err(name))?;
        prog.load().map_err(prog_err(name))?;
    }
    Ok(ebpf)
}

/// Takes the ring buffer out of a loaded probe (for a reader on another thread).
pub fn take_ring(ebpf: &mut Ebpf) -> Result<RingBuf<MapData>, EbpfStartError> {
    let map = ebpf
        .take_map(maps::EVENTS)
        .ok_or(EbpfStartError::MissingMap(maps::EVENTS))?;
    RingBuf::try_from(map).map_err(map_err(maps::EVENTS))
}

/// Takes the ring buffer out of a loaded probe as the capture reads it: through [`RingReader`], which
/// gives space back to the kernel once per batch of records (see [`super::ring`]).
pub fn take_ring_reader(ebpf: &mut Ebpf) -> Result<RingReader, EbpfStartError> {
    match ebpf.take_map(maps::EVENTS) {
        Some(aya::maps::Map::RingBuf(map)) => Ok(RingReader::new(map)?),
        Some(_) => Err(EbpfStartError::NotARing(maps::EVENTS)),
        None => Err(EbpfStartError::MissingMap(maps::EVENTS)),
    }
}

/// A ring-buffer record, decoded from its bytes (no pointer casts: the record is plain data in a known
/// layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRecord {
    /// The probe's time stamp (see [`RingRecord::wall_ns`]).
    pub ts_ns: u64,
    /// Length on the wire, without a tag the kernel had removed.
    pub len: u32,
    /// The interface the frame was seen on.
    pub ifindex: u32,
    /// `tracer_common::flag` bits.
    pub flags: u32,
    /// The tag the kernel had removed, when [`flag::VLAN_OFFLOADED`] is set.
    pub vlan_tci: u16,
    /// That tag's TPID.
    pub vlan_proto: u16,
    /// A `tracer_common::kind` value.
    pub kind: u32,
    /// The frame as it was on the wire: a tag the kernel had moved into the skb is put back.
    pub data: Vec<u8>,
    /// Length on the wire including that tag.
    pub wire_len: u32,
}

impl RingRecord {
    /// The record's time in ns since the epoch: the stack's receive stamp as it is, or the probe's monotonic
    /// clock reading plus `mono_to_real` (see [`sys::monotonic_to_realtime_offset`]).
    pub fn wall_ns(&self, mono_to_real: u64) -> u64 {
        if self.flags & flag::TS_REALTIME != 0 {
            self.ts_ns
        } else {
            self.ts_ns.saturating_add(mono_to_real)
        }
    }
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl RingRecord {
    /// Reads a record; `None` for one too short to be ours.
    pub fn parse(b: &[u8]) -> Option<RingRecord> {
        use core::mem::offset_of;
        type Header = PacketEvent<0>;
        let ts_ns = u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?);
        let len = ne_u32(b, offset_of!(Header, len))?;
        let ifindex = ne_u32(b, offset_of!(Header, ifindex))?;
        let caplen = usize::from(ne_u16(b, offset_of!(Header, caplen))?);
        let vlan_tci = ne_u16(b, offset_of!(Header, vlan_tci))?;
        let vlan_proto = ne_u16(b, offset_of!(Header, vlan_proto))?;
        let flags = u32::from(*b.get(offset_of!(Header, flags))?);
        let kind = u32::from(*b.get(offset_of!(Header, kind))?);
        let bytes = b.get(EVENT_HEADER_LEN..EVENT_HEADER_LEN + caplen.min(MAX_SNAPLEN))?;
        let mut data = Vec::with_capacity(bytes.len() + 4);
        let mut wire_len = len;
        if flags & flag::VLAN_OFFLOADED != 0 && bytes.len() >= 12 {
            data.extend_from_slice(bytes.get(..12)?);
            data.extend_from_slice(&vlan_proto.to_be_bytes());
            data.extend_from_slice(&vlan_tci.to_be_bytes());
            data.extend_from_slice(bytes.get(12..)?);
            wire_len = len.saturating_add(4);
        } else {
            data.extend_from_slice(bytes);
        }
        Some(RingRecord {
            ts_ns,
            len,
            ifindex,
            flags,
            vlan_tci,
            vlan_proto,
            kind,
            data,
            wire_len,
        })
    }
}

/// Frames lost to a full ring buffer so far, summed over CPUs.
pub fn ring_full(ebpf: &Ebpf) -> Option<u64> {
    let counters: PerCpuArray<&MapData, ProbeCounters> =
        PerCpuArray::try_from(ebpf.map(maps::COUNTERS)?).ok()?;
    let v = counters.get(&0, 0).ok()?;
    Some(v.iter().map(|c| c.ring_full).sum())
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

/// Reads the probe's maps (the per-CPU values summed).
pub fn probe_stats(ebpf: &Ebpf) -> Result<Probe, EbpfStartError> {
    let mut st = Probe {
        version: VERSION,
        ts_ns: sys::now_ns(),
        ..Probe::default()
    };
    let map = ebpf
        .map(maps::COUNTERS)
        .ok_or(EbpfStartError::MissingMap(maps::COUNTERS))?;
    let counters: PerCpuArray<&MapData, ProbeCounters> =
        PerCpuArray::try_from(map).map_err(map_err(maps::COUNTERS))?;
    for c in counters.get(&0, 0).map_err(map_err(maps::COUNTERS))?.iter() {
        st.seen += c.seen;
        st.matched += c.matched;
        st.emitted += c.emitted;
        st.ring_full += c.ring_full;
    }

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

/// The running eBPF engine: the loaded probe, its attachments and the ring-buffer reader.
#[derive(Debug)]
pub struct EbpfEngine {
    ebpf: Ebpf,
    reader: Option<JoinHandle<Vec<u64>>>,
    /// Interface index → position in the `-i` list.
    index_of: HashMap<u32, u32>,
    ifaces: usize,
    filter: Option<String>,
    all_frames: bool,
    /// Interfaces whose probes hang off a clsact qdisc we added (pre-6.6 kernels): removed at exit.
    netlink_ifaces: Vec<String>,
}

/// Loads the probe, attaches it to ingress and egress of every interface and starts the ring reader.
pub fn start(config: &EngineConfig, plumbing: &Plumbing) -> Result<EbpfEngine, EbpfStartError> {
    // Before loading anything, so that a bad expression leaves nothing to detach.
    let filter = config.filter.as_deref().map(compile_filter).transpose()?;
    let mut ebpf = load_probe(
        Config {
            // `load_probe` caps it at what a record holds.
            snaplen: config.snaplen,
            all_frames: u32::from(config.all_frames),
            wakeup_bytes: wakeup_bytes(config.ring_bytes.unwrap_or(DEFAULT_RING_BYTES)),
            headers_only: u32::from(headers_only(config.snaplen)),
        },
        config.ring_bytes,
    )?;
    let mut index_of = HashMap::new();
    for (i, name) in config.interfaces.iter().enumerate() {
        let idx =
            sys::ifindex(name).ok_or_else(|| EbpfStartError::NoSuchInterface(name.clone()))?;
        index_of.insert(idx, i as u32);
    }
    let tcx = std::env::var_os(FORCE_NETLINK_ENV).is_none()
        && KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
    let mut netlink_ifaces = Vec::new();
    for name in &config.interfaces {
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
        for (prog_name, direction, kind) in [
            (INGRESS, "ingress", TcAttachType::Ingress),
            (EGRESS, "egress", TcAttachType::Egress),
        ] {
            let prog: &mut SchedClassifier = ebpf
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
    let ring = take_ring_reader(&mut ebpf)?;
    let names = config.interfaces.clone();
    let plumbing = plumbing.clone();
    let reader_index = index_of.clone();
    let reader = std::thread::Builder::new()
        .name("ebpf-ring".into())
        .spawn(move || read_ring(ring, reader_index, names, filter, plumbing))?;
    Ok(EbpfEngine {
        ebpf,
        reader: Some(reader),
        index_of,
        ifaces: config.interfaces.len(),
        filter: config.filter.clone(),
        all_frames: config.all_frames,
        netlink_ifaces,
    })
}

fn read_ring(
    mut ring: RingReader,
    index_of: HashMap<u32, u32>,
    names: Vec<String>,
    filter: Option<pcap::BpfProgram>,
    p: Plumbing,
) -> Vec<u64> {
    let offset = sys::monotonic_to_realtime_offset();
    let mut received = vec![0u64; names.len()];
    let mut gone = vec![false; names.len()];
    let mut last_check = Instant::now();
    let batch = ring_batch(ring.size());
    loop {
        let stopping = p.stop.load(Ordering::Relaxed);
        let mut read = 0;
        loop {
            let walk = ring.drain(batch, |bytes| {
                let Some(rec) = RingRecord::parse(bytes) else {
                    return ControlFlow::Continue(());
                };
                let Some(&iface) = index_of.get(&rec.ifindex) else {
                    return ControlFlow::Continue(());
                };
                // On the frame as it was on the wire (a tag the kernel removed is back in place).
                if filter.as_ref().is_some_and(|f| !f.filter(&rec.data)) {
                    return ControlFlow::Continue(());
                }
                if let Some(r) = received.get_mut(iface as usize) {
                    *r += 1;
                }
                let frame = Captured {
                    iface,
                    ts_ns: rec.wall_ns(offset),
                    len: rec.wire_len,
                    data: rec.data,
                };
                if p.tx.send(Event::Frame(frame)).is_err() {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if let Ok(w) = &walk {
                read += w.records;
            }
            match walk {
                Ok(w) if w.stop == Stop::Limit => continue,
                Ok(w) if w.stop == Stop::Callback => return received,
                Ok(_) => break,
                Err(e) => {
                    // Nothing after a corrupt record can be trusted. The probe keeps counting what it can no
                    // longer hand over as ring-buffer losses, so the statistics still add up.
                    for (i, g) in gone.iter().enumerate() {
                        if !g {
                            let _ = p.tx.send(Event::Ended {
                                iface: i as u32,
                                reason: format!("the eBPF ring buffer cannot be read: {e}"),
                            });
                        }
                    }
                    return received;
                }
            }
        }
        if stopping {
            return received;
        }
        if last_check.elapsed() >= Duration::from_millis(500) {
            last_check = Instant::now();
            for (i, name) in names.iter().enumerate() {
                let present = index_of
                    .iter()
                    .any(|(idx, &j)| j as usize == i && sys::ifindex(name) == Some(*idx));
                if !present && !gone.get(i).copied().unwrap_or(true) {
                    if let Some(g) = gone.get_mut(i) {
                        *g = true;
                    }
                    let _ = p.tx.send(Event::Ended {
                        iface: i as u32,
                        reason: format!("interface {name} disappeared"),
                    });
                }
            }
        }
        if read > 0 {
            // Frames are arriving and the reader has caught up: let a batch build up rather than chase the
            // probe record by record (see [`NAP`]).
            std::thread::sleep(NAP);
        } else {
            sys::wait_readable(ring.as_raw_fd(), POLL_MS);
        }
    }
}

/// How long the reader sleeps after catching up with a stream of frames before it reads again. Polling
/// would return at once, since the ring is readable as soon as it holds one record, and a reader that
/// follows the probe record by record pulls the ring's positions and newest records over to its own CPU
/// for every frame, which the probe then pays for: each of its reservations reads the consumer position
/// and writes the producer position, and consecutive records share cache lines, so the line the reader
/// just read is often the one the probe writes next. A millisecond is 500 frames at half a million frames
/// per second, a small part of any ring but the smallest.
pub const NAP: Duration = Duration::from_millis(1);

/// How many bytes of records the reader reads before it gives their space back to the kernel. Each time
/// it does, the cache line with the consumer position moves to the reader's CPU and back to the probe's
/// (which reads it for every record it reserves), so this should be many records; but space not yet given
/// back looks full to the probe, so it should be a small part of the ring. A thirty-second: 2 MiB, about
/// 20 000 header copies, of the default ring; each record of 2 KiB in a 16 KiB ring.
pub fn ring_batch(ring_bytes: usize) -> usize {
    (ring_bytes / 32).max(1)
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

    fn describe(&self, _iface: u32) -> String {
        let mut d = String::from("roce-tracer engine=ebpf (TC probe, ingress and egress): ");
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

    fn finish(mut self: Box<Self>) -> (Vec<IfaceStats>, Option<Vec<u8>>) {
        let received = self
            .reader
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        let probe = probe_stats(&self.ebpf).ok();
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
