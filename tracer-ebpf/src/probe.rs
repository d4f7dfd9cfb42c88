//! The packet probe. Every frame costs one pass of [`tracer_common::classify`], reading the headers straight
//! from the packet (`bpf_skb_load_bytes` only for headers outside the linear part); a matching frame also
//! costs two per-CPU map updates and, when a snap length is set, one ring-buffer record holding the frame's
//! first bytes: at short snap lengths only its headers (and a CM MAD's payload), see
//! [`tracer_common::copy_len`]. Nothing here can drop or alter a frame: the probe always lets it continue.
//!
//! Where the time goes, and why the code is shaped this way (BENCHMARKS.md has the numbers): a helper call
//! per header read cost more than the classification itself, so headers are read directly; reading the
//! clock costs as much as the rest of a copy on a VM, so on ingress the stack's own receive stamp is used
//! when it took one; and waking the reader for each record costs an interrupt, so records are submitted
//! without a wakeup until enough of them wait (the reader also polls with a short timeout).

use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::{__sk_buff, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_ktime_get_ns, bpf_skb_load_bytes},
    macros::{classifier, map},
    maps::{Array, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::TcContext,
};
use tracer_common::{
    Bytes, Config, MAX_IFACES, MAX_QPS, MAX_SNAPLEN, PRIO_SLOTS, PacketEvent, PrioCounters,
    QpCounters, SMALL_SNAPLEN, counter, flag, kind,
};

/// `TCX_NEXT` (and `TC_ACT_UNSPEC` for a classic tc filter): let the next program, or the stack, decide.
const CONTINUE: i32 = -1;

/// 64 MiB: 230 000 frames of slack at the default snap length (288-byte records), 32 000 at 2 KiB.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(64 << 20, 0);

#[map]
static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::LEN, 0);

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

#[inline(always)]
fn bump(index: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot, only this CPU touches it while the program runs.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn probe(ctx: &TcContext, direction: u32) {
    bump(counter::SEEN);
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
    let config = CONFIG.get(0).copied().unwrap_or_default();
    if s.kind == kind::OTHER && config.all_frames == 0 {
        return;
    }
    bump(counter::MATCHED);
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
    // Two record sizes, so that a short copy does not pay for 2 KiB of ring per frame.
    if want <= SMALL_SNAPLEN {
        emit::<SMALL_SNAPLEN>(&frame, want, config.wakeup_bytes);
    } else {
        emit::<MAX_SNAPLEN>(&frame, want, config.wakeup_bytes);
    }
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
fn ring_full(ifindex: u32) {
    bump(counter::RING_FULL);
    match RING_FULL_BY_IF.get_ptr_mut(ifindex) {
        // SAFETY: per-CPU value of an existing entry.
        Some(p) => unsafe { *p += 1 },
        None => {
            // A full map (more interfaces than MAX_IFACES) loses only the per-interface split.
            let _ = RING_FULL_BY_IF.insert(ifindex, 1u64, 0);
        }
    }
}

#[inline(always)]
fn emit<const N: usize>(f: &Frame, want: usize, wakeup_bytes: u32) {
    let Some(mut entry) = EVENTS.reserve::<PacketEvent<N>>(0) else {
        ring_full(f.ifindex);
        return;
    };
    let ev = entry.as_mut_ptr();
    // `want` is already at most the frame's length. Read back through memory so that the compiler keeps
    // the range check below: it can often prove the check redundant, but the verifier cannot follow its
    // proof and rejects a copy it cannot bound away from zero.
    let bounded = if want < N { want } else { N };
    // SAFETY: a read of a local.
    let mut caplen = unsafe { core::ptr::read_volatile(&bounded) };
    let (ts, ts_flag) = if f.stamp != 0 {
        (f.stamp, flag::TS_REALTIME)
    } else {
        // SAFETY: a helper without arguments.
        (unsafe { bpf_ktime_get_ns() }, 0)
    };
    // SAFETY: `ev` points at a reserved record of the right size; fields are written before submit.
    unsafe {
        addr_of_mut!((*ev).ts_ns).write(ts);
        addr_of_mut!((*ev).len).write(f.len);
        addr_of_mut!((*ev).ifindex).write(f.ifindex);
        addr_of_mut!((*ev).flags).write(f.flags | ts_flag);
        addr_of_mut!((*ev).vlan_tci).write(f.vlan_tci);
        addr_of_mut!((*ev).vlan_proto).write(f.vlan_proto);
        addr_of_mut!((*ev).kind).write(f.kind);
        // The bytes go straight from the packet into the reserved record. The verifier wants a size it can
        // bound away from zero and below the buffer's end.
        if caplen > 0 && caplen <= N {
            let data = addr_of_mut!((*ev).data).cast::<core::ffi::c_void>();
            if bpf_skb_load_bytes(f.skb.cast(), 0, data, caplen as u32) != 0 {
                caplen = 0;
            }
        } else {
            caplen = 0;
        }
        addr_of_mut!((*ev).caplen).write(caplen as u32);
    }
    entry.submit(wakeup::<N>(wakeup_bytes));
    bump(counter::EMITTED);
}

/// Ring-buffer bytes a record of `N` data bytes takes: the kernel's 8-byte header, then the record rounded
/// up to 8 bytes.
const fn record_bytes<const N: usize>() -> u64 {
    ((core::mem::size_of::<PacketEvent<N>>() + 8 + 7) / 8 * 8) as u64
}

/// The submit flags: wake the reader each time the data waiting in the ring grows past a multiple of
/// `threshold` (with this record), and never otherwise. A wakeup costs an interrupt; waking on every record
/// while a backlog exists (what `avail >= threshold` would do) costs one per frame exactly when the reader is
/// behind. A wakeup missed because several CPUs raced past a multiple is covered by the reader's poll
/// timeout. A threshold of 0 keeps the kernel's own policy.
#[inline(always)]
fn wakeup<const N: usize>(threshold: u32) -> u64 {
    if threshold == 0 {
        return 0;
    }
    let threshold = u64::from(threshold);
    let avail = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
    let before = avail.saturating_sub(record_bytes::<N>());
    if avail / threshold != before / threshold {
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
            let mut prio = 0u32;
            while prio < 8 {
                if s.pfc_enable & (1 << prio) != 0
                    && let Some(p) = PRIO_STATS.get_ptr_mut(prio)
                {
                    // SAFETY: per-CPU slot.
                    unsafe {
                        (*p).pfc_frames += 1;
                        if s.pfc_nonzero & (1 << prio) != 0 {
                            (*p).pfc_xoff += 1;
                        } else {
                            (*p).pfc_xon += 1;
                        }
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
