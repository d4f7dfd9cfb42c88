//! The generic tracepoint recorder behind `--kernel-events`, attached to the RDMA tracepoints
//! (`rdma_cma:cm_qp_create`, `rdma_cma:cm_event_handler`, the `ib_mad` send and receive events,
//! `rdma_core:cq_poll`) and whatever `--tracepoint` adds.
//!
//! The record layout of these events changes between kernels, so nothing about it is compiled in: each
//! tracepoint gets its own copy of the program (`tracer_trace_N`, N its slot), which finds in element N of
//! `TRACE_CONFIG` the fields to copy (offsets and sizes userspace read from the event's `format` file). It
//! either sends the event with the time, the process and its name through a ring buffer, or, for events
//! that can fire millions of times a second, only counts it per value of one field. The slot cannot be
//! read from the record: the kernel overwrites the record's common header (`common_type`) before a BPF
//! program runs on it.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel_buf,
    },
    macros::{map, tracepoint},
    maps::{Array, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::TracePointContext,
};
use tracer_common::kevents::{
    BYTES_LEN, CountKey, CountValue, FIELD_DATA_LOC, FIELD_SIGNED, FieldSpec, MAX_BYTE_FIELDS,
    MAX_COUNT_KEYS, MAX_FIELDS, MAX_TRACEPOINTS, MODE_COUNT, TraceConfig, TraceEvent, stat,
};

#[map]
static TRACE_CONFIG: Array<TraceConfig> = Array::with_max_entries(MAX_TRACEPOINTS, 0);

/// A page by default, so that the packet engine's copy of this object costs nothing; `--kernel-events`
/// loads its own copy with a larger ring.
#[map]
static TRACE_EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);

#[map]
static TRACE_COUNTS: PerCpuHashMap<CountKey, CountValue> =
    PerCpuHashMap::with_max_entries(MAX_COUNT_KEYS, 0);

#[map]
static TRACE_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::LEN, 0);

/// One program per slot, all the same code with their slot number built in.
macro_rules! slots {
    ($($name:ident = $slot:literal),* $(,)?) => {
        $(
            #[tracepoint]
            pub fn $name(ctx: TracePointContext) -> u32 {
                record(&ctx, $slot);
                0
            }
        )*
        const _: () = assert!([$($slot),*].len() == MAX_TRACEPOINTS as usize);
    };
}

slots!(
    tracer_trace_0 = 0,
    tracer_trace_1 = 1,
    tracer_trace_2 = 2,
    tracer_trace_3 = 3,
    tracer_trace_4 = 4,
    tracer_trace_5 = 5,
    tracer_trace_6 = 6,
    tracer_trace_7 = 7,
    tracer_trace_8 = 8,
    tracer_trace_9 = 9,
    tracer_trace_10 = 10,
    tracer_trace_11 = 11,
    tracer_trace_12 = 12,
    tracer_trace_13 = 13,
    tracer_trace_14 = 14,
    tracer_trace_15 = 15,
);

#[inline(always)]
fn bump(index: u32) {
    if let Some(p) = TRACE_STATS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot, only this CPU touches it while the program runs.
        unsafe { *p += 1 };
    }
}

/// One integer field, sign-extended when signed; 0 for an unused slot or a failed read.
#[inline(always)]
fn read_int(ctx: &TracePointContext, f: &FieldSpec) -> u64 {
    let at = f.offset as usize;
    // SAFETY (each read): the offset and size come from the event's own format file; a bad one makes the
    // helper fail (and the value 0), it cannot read outside kernel memory the helper accepts.
    let (raw, bits) = match f.size {
        1 => (unsafe { ctx.read_at::<u8>(at) }.map(u64::from), 8),
        2 => (unsafe { ctx.read_at::<u16>(at) }.map(u64::from), 16),
        4 => (unsafe { ctx.read_at::<u32>(at) }.map(u64::from), 32),
        8 => (unsafe { ctx.read_at::<u64>(at) }, 64),
        _ => return 0,
    };
    let v = raw.unwrap_or(0);
    if f.flags & FIELD_SIGNED != 0 && bits < 64 {
        let shift = 64 - bits;
        (((v << shift) as i64) >> shift) as u64
    } else {
        v
    }
}

#[inline(always)]
fn record(ctx: &TracePointContext, slot: u32) {
    let Some(config) = TRACE_CONFIG.get(slot) else {
        bump(stat::UNCONFIGURED);
        return;
    };
    if config.slot != slot {
        bump(stat::UNCONFIGURED);
        return;
    }
    if config.mode == MODE_COUNT {
        count(ctx, config);
    } else {
        send(ctx, config);
    }
}

#[inline(always)]
fn count(ctx: &TracePointContext, config: &TraceConfig) {
    bump(stat::COUNTED);
    let field = |i: u32| {
        let mut spec = FieldSpec::default();
        let mut k = 0;
        // A constant-bound scan instead of indexing with a map value, which the verifier cannot bound.
        while k < MAX_FIELDS {
            if k as u32 == i {
                spec = config.fields[k];
            }
            k += 1;
        }
        spec
    };
    let key = CountKey {
        slot: config.slot,
        _pad: 0,
        key: read_int(ctx, &field(config.count_key)),
    };
    let add = read_int(ctx, &field(config.count_sum));
    // Only positive values add up (a negative `rc` is an error code, not a count).
    let add = if (add as i64) > 0 { add } else { 0 };
    match TRACE_COUNTS.get_ptr_mut(key) {
        // SAFETY: a per-CPU value, only this CPU touches it while the program runs.
        Some(p) => unsafe {
            (*p).events += 1;
            (*p).sum += add;
        },
        None => {
            let v = CountValue {
                events: 1,
                sum: add,
            };
            if TRACE_COUNTS.insert(key, v, 0).is_err() {
                bump(stat::COUNT_FULL);
            }
        }
    }
}

#[inline(always)]
fn send(ctx: &TracePointContext, config: &TraceConfig) {
    let Some(mut entry) = TRACE_EVENTS.reserve::<TraceEvent>(0) else {
        bump(stat::RING_FULL);
        return;
    };
    let p = entry.as_mut_ptr();
    // SAFETY: `p` is the reserved, exclusively owned record; every field is written before it is submitted.
    unsafe {
        (*p).ts_ns = bpf_ktime_get_ns();
        (*p).pid_tgid = bpf_get_current_pid_tgid();
        (*p).slot = config.slot;
        (*p)._pad = 0;
        (*p).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        let mut i = 0;
        while i < MAX_FIELDS {
            (*p).values[i] = read_int(ctx, &config.fields[i]);
            i += 1;
        }
        let mut i = 0;
        while i < MAX_BYTE_FIELDS {
            let f = config.bytes[i];
            let dst = &mut (*p).bytes[i];
            *dst = [0; BYTES_LEN];
            if f.size != 0 {
                let mut at = u32::from(f.offset);
                if f.flags & FIELD_DATA_LOC != 0 {
                    // The locator's low half is where the string is in the record.
                    at = ctx.read_at::<u32>(at as usize).unwrap_or(0) & 0xffff;
                }
                // A fixed-size copy: records sit in a per-CPU trace buffer much larger than any of them, so
                // reading past a short field's end reads that buffer's next bytes, which userspace drops by
                // the field's size.
                let base = aya_ebpf::EbpfContext::as_ptr(ctx).cast::<u8>();
                if at == 0 || bpf_probe_read_kernel_buf(base.add(at as usize), dst).is_err() {
                    *dst = [0; BYTES_LEN];
                }
            }
            i += 1;
        }
    }
    entry.submit(0);
    bump(stat::SENT);
}
