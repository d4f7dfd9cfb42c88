//! The packet probe. Every frame costs one pass of [`tracer_common::classify`], reading the headers straight
//! from the packet (`bpf_skb_load_bytes` only for headers outside the linear part); a matching frame also
//! costs two per-CPU map updates and, when a snap length is set, one ring-buffer record holding the frame's
//! first bytes: at short snap lengths only its headers (and a CM MAD's payload), see
//! [`tracer_common::copy_len`]. Nothing here can drop or alter a frame: the probe always lets it continue.
//!
//! Where the time goes, and why the code is shaped this way (BENCHMARKS.md has the numbers): a helper call
//! per header read cost more than the classification itself, so headers are read directly; reading the
//! clock costs as much as the rest of a copy on a VM, so on ingress the stack's own receive stamp is used
//! when it took one; waking the reader for each record costs an interrupt, so records are submitted
//! without a wakeup until enough of them have been written (the reader also polls with a short timeout);
//! the configuration is a load-time constant, so the verifier removes the branches it rules out; the
//! probe's own counters are one per-CPU struct, looked up once per frame; and records are no larger than
//! their copy needs, because writing ring memory that no CPU has touched for a turn of the ring was the
//! largest cost of all.

use core::ptr::{addr_of, addr_of_mut, read_volatile};

use aya_ebpf::{
    bindings::{__sk_buff, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    btf_maps::{ArrayOfMaps, RingBuf},
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_skb_load_bytes},
    macros::{btf_map, classifier, map},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::TcContext,
};
use tracer_common::{
    Bytes, Config, EVENT_HEADER_LEN, MAX_IFACES, MAX_QPS, MAX_SNAPLEN, PRIO_SLOTS, PacketEvent,
    PrioCounters, ProbeCounters, QpCounters, RECORD_CLASSES, SMALL_SNAPLEN, flag, kind,
};

/// `TCX_NEXT` (and `TC_ACT_UNSPEC` for a classic tc filter): let the next program, or the stack, decide.
const CONTINUE: i32 = -1;

/// The rings, one slot per possible CPU (userspace sets the slot count and fills every slot; see
/// [`tracer_common::maps::RINGS`]). One ring shared by every CPU made each record take the ring's spinlock,
/// which every CPU running the probe contended for, and left one reader for all of them. The inner ring here
/// is only the template the kernel checks each ring against: one page, never written.
#[btf_map]
static RINGS: ArrayOfMaps<RingBuf<u8, 4096>, 1> = ArrayOfMaps::new();

/// Set by userspace when it loads the object ([`tracer_common::CONFIG_GLOBAL`]); read-only data, which the
/// verifier reads as constants. Read it through [`config`] only: the compiler would otherwise fold in
/// these zeros.
#[unsafe(no_mangle)]
static PROBE_CONFIG: Config = Config {
    snaplen: 0,
    all_frames: 0,
    wakeup_bytes: 0,
    headers_only: 0,
};

#[map]
static COUNTERS: PerCpuArray<ProbeCounters> = PerCpuArray::with_max_entries(1, 0);

#[map]
static QP_STATS: PerCpuHashMap<u32, QpCounters> = PerCpuHashMap::with_max_entries(MAX_QPS, 0);

#[map]
static PRIO_STATS: PerCpuArray<PrioCounters> = PerCpuArray::with_max_entries(PRIO_SLOTS, 0);

#[map]
static RING_FULL_BY_IF: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_max_entries(MAX_IFACES, 0);

#[classifier]
pub fn tracer_ingress(ctx: TcContext) -> i32 {
    probe(&ctx, 0);
    CONTINUE
}

#[classifier]
pub fn tracer_egress(ctx: TcContext) -> i32 {
    probe(&ctx, flag::EGRESS);
    CONTINUE
}

/// Returns at once. `cargo xtask bench --tracer` attaches it beside the probe, so that the kernel's run-time
/// count for a program that does nothing shows what `kernel.bpf_stats_enabled` itself adds to every run (the
/// clock reads around it), next to the probe's own count.
#[classifier]
pub fn tracer_baseline(_ctx: TcContext) -> i32 {
    CONTINUE
}

/// The frame's bytes: the linear part `[data, end)` read directly, anything beyond through
/// `bpf_skb_load_bytes` (which checks its own offsets and reaches paged data).
struct Skb<'a> {
    ctx: &'a TcContext,
    data: usize,
    end: usize,
}

impl Bytes for Skb<'_> {
    #[inline(always)]
    fn chunk<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        let start = self.data + offset;
        if start + N <= self.end {
            // SAFETY: `[start, start + N)` lies inside the linear packet data the kernel handed in (checked
            // just above, and checked again by the verifier, which rejects the program otherwise); the read
            // is unaligned-safe.
            Some(unsafe { core::ptr::read_unaligned(start as *const [u8; N]) })
        } else {
            self.ctx.load::<[u8; N]>(offset).ok()
        }
    }
}

/// The configuration as loaded.
#[inline(always)]
fn config() -> Config {
    // SAFETY: reads of a static's fields; volatile so that the values come from the loaded object.
    unsafe {
        Config {
            snaplen: read_volatile(addr_of!(PROBE_CONFIG.snaplen)),
            all_frames: read_volatile(addr_of!(PROBE_CONFIG.all_frames)),
            wakeup_bytes: read_volatile(addr_of!(PROBE_CONFIG.wakeup_bytes)),
            headers_only: read_volatile(addr_of!(PROBE_CONFIG.headers_only)),
        }
    }
}

#[inline(always)]
fn probe(ctx: &TcContext, direction: u32) {
    // Index 0 of a one-element array always exists; the check is for the verifier.
    let Some(c) = COUNTERS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a per-CPU map; nothing else touches it while the program runs (a TC
    // program is not re-entered on its CPU).
    let c = unsafe { &mut *c };
    c.seen += 1;
    let skb: *mut __sk_buff = ctx.skb.skb;
    // SAFETY: the context pointer the kernel passed in; these fields are readable by any TC program.
    let (vlan_present, vlan_tci, vlan_proto, ifindex) = unsafe {
        (
            (*skb).vlan_present,
            (*skb).vlan_tci,
            (*skb).vlan_proto,
            (*skb).ifindex,
        )
    };
    let offloaded = if vlan_present != 0 {
        Some(vlan_tci as u16)
    } else {
        None
    };
    let bytes = Skb {
        ctx,
        data: ctx.data(),
        end: ctx.data_end(),
    };
    let s = tracer_common::classify(&bytes, offloaded);
    let config = config();
    if s.kind == kind::OTHER && config.all_frames == 0 {
        return;
    }
    c.matched += 1;
    let len = ctx.len();
    count(&s, u64::from(len));
    if config.snaplen == 0 {
        return;
    }
    // On ingress the stack may already have stamped the frame (`CLOCK_REALTIME`, when anything on the host
    // asked for receive timestamps). The kernel hides a sender's delivery time here from programs that do
    // not ask for the stamp's type, so a non-zero value is a receive time. Egress stamps are delivery times
    // or nothing: the probe reads the clock itself there.
    let stamp = if direction == 0 {
        // SAFETY: as above.
        unsafe { (*skb).tstamp }
    } else {
        0
    };
    let frame = Frame {
        skb,
        len,
        ifindex,
        stamp,
        flags: direction
            | if vlan_present != 0 {
                flag::VLAN_OFFLOADED
            } else {
                0
            },
        vlan_tci: vlan_tci as u16,
        vlan_proto: u16::from_be(vlan_proto as u16),
        kind: s.kind,
    };
    let want = tracer_common::copy_len(&s, len, &config);
    // Records come in a few sizes (the verifier wants each reservation's size to be a constant), the
    // smallest that holds the copy: a header copy of 64 bytes then takes 96 bytes of ring rather than the
    // 296 of a 256-byte record, and consecutive records share cache lines. Ring memory the CPU has not
    // touched for a whole turn of the ring was the probe's largest cost (the commit waits for the record's
    // stores), so fewer lines per record is less of it. The copy is never longer than the snap length, so
    // a short snap length (a constant here) leaves the large records out.
    let data_len = if want <= RECORD_CLASSES[0] {
        RECORD_CLASSES[0]
    } else if want <= RECORD_CLASSES[1] {
        RECORD_CLASSES[1]
    } else if want <= SMALL_SNAPLEN || config.snaplen as usize <= SMALL_SNAPLEN {
        SMALL_SNAPLEN
    } else {
        MAX_SNAPLEN
    };
    emit(c, &frame, want, data_len, config.wakeup_bytes);
}

/// What goes into a ring record besides the bytes.
struct Frame {
    skb: *mut __sk_buff,
    len: u32,
    ifindex: u32,
    /// The stack's receive stamp, or 0.
    stamp: u64,
    flags: u32,
    vlan_tci: u16,
    vlan_proto: u16,
    kind: u32,
}

#[inline(always)]
fn ring_full(c: &mut ProbeCounters, ifindex: u32) {
    c.ring_full += 1;
    match RING_FULL_BY_IF.get_ptr_mut(ifindex) {
        // SAFETY: per-CPU value of an existing entry.
        Some(p) => unsafe { *p += 1 },
        None => {
            // A full map (more interfaces than MAX_IFACES) loses only the per-interface split.
            let _ = RING_FULL_BY_IF.insert(ifindex, 1u64, 0);
        }
    }
}

/// Writes one record of `data_len` bytes of frame data (one of the sizes above: a constant on each path
/// the verifier follows) and submits it.
#[inline(always)]
fn emit(c: &mut ProbeCounters, f: &Frame, want: usize, data_len: usize, wakeup_bytes: u32) {
    // SAFETY: a helper without arguments (the verifier inlines it as a per-CPU load).
    let cpu = unsafe { bpf_get_smp_processor_id() };
    // Userspace fills every slot, so a missing ring is not expected; it would lose the frame, counted.
    let Some(ring) = RINGS.get(cpu) else {
        ring_full(c, f.ifindex);
        return;
    };
    let Some(mut entry) = ring.reserve_bytes(EVENT_HEADER_LEN + data_len, 0) else {
        ring_full(c, f.ifindex);
        return;
    };
    // The header fields, then `data_len` bytes: a `PacketEvent` without its array.
    let ev = entry.as_mut_ptr().cast::<PacketEvent<0>>();
    let (ts, ts_flag) = if f.stamp != 0 {
        (f.stamp, flag::TS_REALTIME)
    } else {
        // SAFETY: a helper without arguments.
        (unsafe { bpf_ktime_get_ns() }, 0)
    };
    // SAFETY: `ev` points at a reserved record of `EVENT_HEADER_LEN + data_len` bytes, 8-byte aligned (the
    // kernel aligns every record); the fields are written before submit.
    unsafe {
        addr_of_mut!((*ev).ts_ns).write(ts);
        addr_of_mut!((*ev).len).write(f.len);
        addr_of_mut!((*ev).ifindex).write(f.ifindex);
        addr_of_mut!((*ev).flags).write((f.flags | ts_flag) as u8);
        addr_of_mut!((*ev).vlan_tci).write(f.vlan_tci);
        addr_of_mut!((*ev).vlan_proto).write(f.vlan_proto);
        addr_of_mut!((*ev).kind).write(f.kind as u8);
        // The copy's length goes through the record's memory on its way to the copy, so that the compiler
        // keeps the range check below: it can often prove the check redundant, but the verifier cannot
        // follow its proof and rejects a copy it cannot bound away from zero.
        let caplen_at = addr_of_mut!((*ev).caplen);
        caplen_at.write(if want < data_len { want } else { data_len } as u16);
        let caplen = core::ptr::read_volatile(caplen_at) as usize;
        // The bytes go straight from the packet into the reserved record. The verifier wants a size it can
        // bound away from zero and below the buffer's end: a minimum, then a test for zero, which it can
        // follow (the compiler turns `0 < n && n <= N` into one unsigned test on `n - 1` that it cannot).
        let caplen = if caplen < data_len { caplen } else { data_len };
        caplen_at.write(caplen as u16);
        if caplen != 0 {
            let data = ev
                .cast::<u8>()
                .add(EVENT_HEADER_LEN)
                .cast::<core::ffi::c_void>();
            if bpf_skb_load_bytes(f.skb.cast(), 0, data, caplen as u32) != 0 {
                caplen_at.write(0);
            }
        }
    }
    entry.submit(wakeup(c, wakeup_bytes, record_bytes(data_len)));
    c.emitted += 1;
}

/// Ring-buffer bytes a record of `data_len` data bytes takes: the kernel's 8-byte header, then the record
/// rounded up to 8 bytes.
#[inline(always)]
fn record_bytes(data_len: usize) -> u64 {
    (8 + EVENT_HEADER_LEN + data_len).next_multiple_of(8) as u64
}

/// The submit flags: wake the reader each time this CPU's records pass another multiple of `threshold`
/// bytes of ring (a power of two), and never otherwise. The ring is this CPU's own, so what this CPU wrote
/// is what the ring received. A wakeup costs an interrupt, so this is one per
/// several thousand records at the default threshold; the reader's poll timeout covers records that wait
/// for the next multiple. Counting what this CPU wrote, rather than asking the ring how much waits
/// (`bpf_ringbuf_query`), costs no helper call and no read of the reader's position. A threshold of 0
/// keeps the kernel's own policy.
#[inline(always)]
fn wakeup(c: &mut ProbeCounters, threshold: u32, record_bytes: u64) -> u64 {
    if threshold == 0 {
        return 0;
    }
    let before = c.ring_bytes;
    let after = before.wrapping_add(record_bytes);
    c.ring_bytes = after;
    if tracer_common::passes_multiple(before, after, u64::from(threshold)) {
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}

#[inline(always)]
fn count(s: &tracer_common::Summary, len: u64) {
    let ce = u64::from(s.ecn == 3);
    match s.kind {
        kind::ROCE | kind::CNP => {
            if let Some(p) = PRIO_STATS.get_ptr_mut(s.prio) {
                // SAFETY: per-CPU slot.
                unsafe {
                    (*p).roce_packets += 1;
                    (*p).roce_bytes += len;
                    (*p).ce += ce;
                }
            }
            if !s.has_bth {
                return;
            }
            let is_cnp = s.kind == kind::CNP;
            if let Some(p) = QP_STATS.get_ptr_mut(s.dest_qp) {
                // SAFETY: per-CPU value of an existing entry.
                unsafe {
                    if is_cnp {
                        (*p).cnps += 1;
                    } else {
                        (*p).packets += 1;
                        (*p).bytes += len;
                        (*p).ce += ce;
                    }
                }
            } else {
                let first = if is_cnp {
                    QpCounters {
                        cnps: 1,
                        ..QpCounters::default()
                    }
                } else {
                    QpCounters {
                        packets: 1,
                        bytes: len,
                        ce,
                        cnps: 0,
                    }
                };
                // A full map only loses the per-QP counter; the frame itself still goes to userspace.
                let _ = QP_STATS.insert(s.dest_qp, first, 0);
            }
        }
        kind::PFC => {
            // Without a branch per priority: eight of them, each on a bit of the frame, were a path per
            // combination for the verifier (most of what it checked in the whole program) and the largest
            // part of the program's code. A priority the frame does not name gets zeros added.
            let enable = u64::from(s.pfc_enable);
            let nonzero = u64::from(s.pfc_nonzero);
            let mut prio = 0u32;
            while prio < 8 {
                let named = (enable >> prio) & 1;
                let xoff = named & (nonzero >> prio);
                if let Some(p) = PRIO_STATS.get_ptr_mut(prio) {
                    // SAFETY: per-CPU slot.
                    unsafe {
                        (*p).pfc_frames += named;
                        (*p).pfc_xoff += xoff;
                        (*p).pfc_xon += named - xoff;
                    }
                }
                prio += 1;
            }
        }
        kind::PAUSE => {
            if let Some(p) = PRIO_STATS.get_ptr_mut(tracer_common::UNTAGGED) {
                // SAFETY: per-CPU slot.
                unsafe { (*p).pause_frames += 1 };
            }
        }
        _ => {}
    }
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
