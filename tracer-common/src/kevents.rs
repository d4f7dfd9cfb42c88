//! What the generic tracepoint recorder (`--kernel-events`) and its userspace agree on.
//!
//! The eBPF object holds [`MAX_TRACEPOINTS`] copies of one recorder program, `tracer_trace_0`,
//! `tracer_trace_1`...: each recorded tracepoint gets its own copy, whose number (its slot) selects its
//! configuration in [`maps::TRACE_CONFIG`]. The record itself cannot say which tracepoint it comes from: the
//! kernel overwrites its common header (`common_type` included) with a register pointer before a BPF
//! program sees it. The configuration says which fields to copy; their offsets and sizes come from the
//! event's `format` file at run time, since the layout of `rdma_cma`, `ib_mad` and `rdma_core` records
//! differs between kernel versions and nothing about them is compiled in.

/// Names of the recorder's maps in the eBPF object.
pub mod maps {
    /// `Array<TraceConfig>` indexed by slot, written by userspace before attaching.
    pub const TRACE_CONFIG: &str = "TRACE_CONFIG";
    /// Ring buffer of [`super::TraceEvent`] records.
    pub const TRACE_EVENTS: &str = "TRACE_EVENTS";
    /// `PerCpuHashMap<CountKey, CountValue>`: the aggregated tracepoints.
    pub const TRACE_COUNTS: &str = "TRACE_COUNTS";
    /// `PerCpuArray<u64>` indexed by [`super::stat`].
    pub const TRACE_STATS: &str = "TRACE_STATS";
}

/// The recorder program of slot `n` is named this followed by `n`.
pub const TRACE_PROGRAM_PREFIX: &str = "tracer_trace_";

/// Tracepoints that can be recorded at once: the copies of the recorder program in the object.
pub const MAX_TRACEPOINTS: u32 = 16;

/// Integer fields copied per event.
pub const MAX_FIELDS: usize = 6;
/// Byte-array fields (socket addresses, names) copied per event.
pub const MAX_BYTE_FIELDS: usize = 2;
/// Bytes copied of each byte-array field: a `struct sockaddr_in6`, the largest address the `rdma_cma`
/// events carry, is 28. Longer arrays are cut; userspace keeps only the field's own size of shorter ones.
pub const BYTES_LEN: usize = 32;
/// Keys of the in-kernel aggregation (tracepoint × key value, e.g. `rdma_core:cq_poll` per CQ).
pub const MAX_COUNT_KEYS: u32 = 4096;

/// [`TraceConfig::mode`]: send every event through the ring buffer.
pub const MODE_EVENT: u32 = 0;
/// [`TraceConfig::mode`]: count in the kernel per value of one field, for tracepoints that fire too often
/// to send one by one (`rdma_core:cq_poll`).
pub const MODE_COUNT: u32 = 1;
/// [`TraceConfig::count_sum`] when nothing is summed.
pub const NO_FIELD: u32 = u32::MAX;

/// Where one field is in the record. `size` 0 marks an unused slot (or a field this kernel lacks).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldSpec {
    /// Byte offset of the field in the tracepoint's record.
    pub offset: u16,
    /// 1, 2, 4 or 8 for integers; the array's length for byte fields.
    pub size: u8,
    /// [`FIELD_SIGNED`], [`FIELD_DATA_LOC`].
    pub flags: u8,
}

/// [`FieldSpec::flags`] of an integer: sign-extend it to 64 bits.
pub const FIELD_SIGNED: u8 = 1;
/// [`FieldSpec::flags`] of a byte field declared `__data_loc` (a string whose length varies): the field is
/// a 4-byte locator, the bytes' offset in the record in its low 16 bits and their length in the high 16.
pub const FIELD_DATA_LOC: u8 = 2;
const _: () = assert!(core::mem::size_of::<FieldSpec>() == 4);

/// What to record of one tracepoint: element `slot` of `TRACE_CONFIG`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceConfig {
    /// The slot again, copied into each record; a configuration whose `slot` does not match its index is
    /// unset, and its program records nothing.
    pub slot: u32,
    /// [`MODE_EVENT`] or [`MODE_COUNT`].
    pub mode: u32,
    /// The integer fields to copy, in the order their values go into [`TraceEvent::values`].
    pub fields: [FieldSpec; MAX_FIELDS],
    /// The byte fields (arrays, strings) to copy, in [`TraceEvent::bytes`] order.
    pub bytes: [FieldSpec; MAX_BYTE_FIELDS],
    /// [`MODE_COUNT`]: index in `fields` of the key, and of the field whose positive values are summed (or
    /// [`NO_FIELD`]).
    pub count_key: u32,
    /// See `count_key`.
    pub count_sum: u32,
}
const _: () = assert!(core::mem::size_of::<TraceConfig>() == 48);

/// One event as the recorder hands it to userspace through
/// [`maps::TRACE_EVENTS`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, like the packet probe's records.
    pub ts_ns: u64,
    /// `bpf_get_current_pid_tgid()`: the process (tgid, high half) and thread (low half) in whose context the
    /// tracepoint fired.
    pub pid_tgid: u64,
    /// The configuration slot that recorded the event: which tracepoint it is.
    pub slot: u32,
    /// Zero: every byte of the record defined.
    pub _pad: u32,
    /// `bpf_get_current_comm()`: the thread's name, NUL-padded.
    pub comm: [u8; 16],
    /// The integer fields in [`TraceConfig::fields`] order, sign-extended where the field is signed.
    pub values: [u64; MAX_FIELDS],
    /// The byte fields in [`TraceConfig::bytes`] order, at most [`BYTES_LEN`] bytes of each.
    pub bytes: [[u8; BYTES_LEN]; MAX_BYTE_FIELDS],
}
/// Size of a [`TraceEvent`] record.
pub const TRACE_EVENT_LEN: usize = 152;
const _: () = assert!(core::mem::size_of::<TraceEvent>() == TRACE_EVENT_LEN);

/// Key of [`maps::TRACE_COUNTS`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountKey {
    /// The counted tracepoint's configuration slot.
    pub slot: u32,
    /// Zero: every byte of the key defined, since the kernel hashes all of them.
    pub _pad: u32,
    /// The key field's value.
    pub key: u64,
}
const _: () = assert!(core::mem::size_of::<CountKey>() == 16);

/// Value of [`maps::TRACE_COUNTS`] (per CPU; userspace sums).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountValue {
    /// Events with this key.
    pub events: u64,
    /// The summed field's total over them.
    pub sum: u64,
}
const _: () = assert!(core::mem::size_of::<CountValue>() == 16);

/// Entries of [`maps::TRACE_STATS`].
pub mod stat {
    /// Events sent through the ring.
    pub const SENT: u32 = 0;
    /// Events lost because the ring was full.
    pub const RING_FULL: u32 = 1;
    /// Events counted in [`super::MODE_COUNT`].
    pub const COUNTED: u32 = 2;
    /// Counted events lost because the count map was full.
    pub const COUNT_FULL: u32 = 3;
    /// Events of a slot without configuration (should not happen).
    pub const UNCONFIGURED: u32 = 4;
    /// Number of entries.
    pub const LEN: u32 = 5;
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: #[repr(C)] structs of integers whose sizes are asserted above to leave no implicit padding,
    // so any bit pattern is a valid value.
    unsafe impl aya::Pod for super::TraceConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CountKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CountValue {}
}
