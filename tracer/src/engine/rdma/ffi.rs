//! The part of libibverbs' ABI the sniffer uses, written out by hand and loaded at run time.
//!
//! Why by hand and not a bindings crate: the tracer must build and run where rdma-core is not installed
//! (CI, a laptop reading captures), so nothing may link libibverbs; `libloading` opens `libibverbs.so.1`
//! only when `--engine rdma` starts. The crates that generate bindings need the headers at build time,
//! and half of what we call is not in the library at all: `ibv_create_cq_ex`, `ibv_create_flow`,
//! `ibv_post_recv`, `ibv_req_notify_cq`, `ibv_query_rt_values_ex`, `ibv_query_device_ex` and the CQ polling
//! calls are `static inline` in `verbs.h`, calling through function pointers in the context, in the
//! extended context that sits in memory *before* it, or in the extended CQ. Those are re-done here
//! ([`Verbs::verbs_op`], [`ctx_op`]) the way the header does them. The layouts are checked against the
//! installed headers by a test that compiles a C program (`layout_matches_the_installed_headers`).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::offset_of;

use libloading::Library;

/// The library's soname: the ABI (`IBVERBS_1.1`) that every rdma-core since 2016 keeps.
pub const SONAME: &str = "libibverbs.so.1";
/// Names another file to load instead of [`SONAME`] (a build of rdma-core outside the linker's path, or a
/// wrong name to see the error a host without rdma-core gets).
pub const LIBRARY_ENV: &str = "ROCETRACE_LIBIBVERBS";

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

pub const IBV_QPT_RAW_PACKET: c_int = 8;
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_FLOW_ATTR_SNIFFER: c_int = 3;
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
pub const IBV_WC_SUCCESS: c_int = 0;
/// What every receive still posted completes with once the QP is destroyed or moved to the error state.
pub const IBV_WC_WR_FLUSH_ERR: c_int = 5;

/// `union ibv_gid`: sixteen bytes, aligned as the two `__be64` of its other member.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvGid(pub [u8; 16]);

#[repr(C)]
#[derive(Debug)]
pub struct IbvDevice {
    pub _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct ibv_context_ops`: 32 function pointers, most of them obsolete slots kept for the ABI. Only the
/// data-path ones the header still calls through are named by index.
#[repr(C)]
#[derive(Debug)]
pub struct IbvContextOps {
    pub slots: [*const c_void; CTX_OPS_SLOTS],
}

pub const CTX_OPS_SLOTS: usize = 32;
// Slots the code does not call, kept so the layout test pins the table's shape around the ones it does.
#[cfg(test)]
pub const OP_POLL_CQ: usize = 11;
pub const OP_REQ_NOTIFY_CQ: usize = 12;
#[cfg(test)]
pub const OP_POST_SEND: usize = 25;
pub const OP_POST_RECV: usize = 26;

#[repr(C)]
#[derive(Debug)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: IbvContextOps,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `UINTPTR_MAX` when this context is the last member of a `struct verbs_context`.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: the extended operations, laid out *before* the `ibv_context` the library hands
/// out, newest first ("grows up"). `sz` says how far back a given provider's copy reaches, so an operation
/// exists only if `sz` covers its slot (see [`Verbs::verbs_op`]). Each rdma-core release may add slots at
/// the front (v59 to v64 added six before the ones this copy names), so only the distance of a slot back from
/// `context` is part of the ABI: that is all the code and the layout test rely on, never an absolute offset.
#[repr(C)]
#[derive(Debug)]
pub struct VerbsContext {
    pub slots: [*const c_void; VCTX_SLOTS],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: IbvContext,
}

pub const VCTX_SLOTS: usize = 38;
pub const VOP_QUERY_RT_VALUES: usize = 24;
pub const VOP_CREATE_CQ_EX: usize = 25;
pub const VOP_QUERY_DEVICE_EX: usize = 27;
pub const VOP_DESTROY_FLOW: usize = 28;
pub const VOP_CREATE_FLOW: usize = 30;

#[repr(C)]
#[derive(Debug)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// The head every CQ shares (`struct ibv_cq`); an `ibv_cq_ex` starts with the same fields.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
#[derive(Debug, Default)]
pub struct IbvPollCqAttr {
    pub comp_mask: u32,
}

type CqFn<T> = Option<unsafe extern "C" fn(*mut IbvCqEx) -> T>;

#[repr(C)]
#[derive(Debug)]
pub struct IbvCqEx {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut IbvPollCqAttr) -> c_int>,
    pub next_poll: CqFn<c_int>,
    pub end_poll: CqFn<()>,
    pub read_opcode: CqFn<c_int>,
    pub read_vendor_err: CqFn<u32>,
    pub read_byte_len: CqFn<u32>,
    pub read_imm_data: CqFn<u32>,
    pub read_qp_num: CqFn<u32>,
    pub read_src_qp: CqFn<u32>,
    pub read_wc_flags: CqFn<c_uint>,
    pub read_slid: CqFn<u32>,
    pub read_sl: CqFn<u8>,
    pub read_dlid_path_bits: CqFn<u8>,
    pub read_completion_ts: CqFn<u64>,
    pub read_cvlan: CqFn<u16>,
    pub read_flow_tag: CqFn<u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut c_void)>,
    pub read_completion_wallclock_ns: CqFn<u64>,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_flow_attr` with no specifications after it: a sniffer rule matches everything.
#[repr(C)]
#[derive(Debug, Default)]
pub struct IbvFlowAttr {
    pub comp_mask: u32,
    pub type_: c_int,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvFlow {
    pub comp_mask: u32,
    pub context: *mut IbvContext,
    pub handle: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct IbvValuesEx {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    /// From `max_qp` to `max_srq_sge`: 29 `int`s the sniffer does not read.
    pub limits: [c_int; 29],
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvOdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvRssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_device_attr_ex`: only the clock fields are read; the rest is spelled out so that the size
/// handed to `query_device_ex` is the header's.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: IbvOdpCaps,
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps`.
    pub tso_caps: [u32; 2],
    pub rss_caps: IbvRssCaps,
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps`.
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `struct ibv_tm_caps`.
    pub tm_caps: [u32; 5],
    /// `struct ibv_cq_moderation_caps`.
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `struct ibv_pci_atomic_caps`.
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// Zeroed memory for a plain C struct of integers, arrays and pointers (all of the above).
pub fn zeroed<T>() -> T {
    // SAFETY: only used for the `#[repr(C)]` structs of this module, for which all-zero bytes are a valid
    // value (integers, null pointers, `None` function pointers, an unlocked-looking mutex never used).
    unsafe { std::mem::zeroed() }
}

/// The exported functions, resolved once.
#[derive(Debug)]
pub struct Verbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice,
    pub free_device_list: unsafe extern "C" fn(*mut *mut IbvDevice),
    pub open_device: unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext,
    pub close_device: unsafe extern "C" fn(*mut IbvContext) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd,
    pub dealloc_pd: unsafe extern "C" fn(*mut IbvPd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr,
    pub dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvCompChannel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut IbvCompChannel) -> c_int,
    pub get_cq_event:
        unsafe extern "C" fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut IbvCq, c_uint),
    pub destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp,
    pub modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    /// Keeps the library mapped as long as the pointers above are used.
    _lib: Library,
}

/// Why libibverbs could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load {name}: {reason}")]
    Open { name: String, reason: String },
    #[error("{name} has no symbol {symbol} (is it libibverbs?)")]
    Symbol { name: String, symbol: &'static str },
}

impl Verbs {
    /// The library name to open: [`LIBRARY_ENV`] when set, [`SONAME`] otherwise.
    pub fn library_name() -> String {
        std::env::var(LIBRARY_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| SONAME.to_owned())
    }

    pub fn load() -> Result<Verbs, LoadError> {
        let name = Self::library_name();
        // SAFETY: loading libibverbs runs its constructors, which only set up its own state.
        let lib = unsafe { Library::new(&name) }.map_err(|e| LoadError::Open {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        macro_rules! sym {
            ($s:literal) => {{
                // SAFETY: the symbol's C prototype in verbs.h is the field's type.
                let f = unsafe { lib.get(concat!($s, "\0").as_bytes()) };
                *f.map_err(|_| LoadError::Symbol {
                    name: name.clone(),
                    symbol: $s,
                })?
            }};
        }
        Ok(Verbs {
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_device: sym!("ibv_query_device"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_comp_channel: sym!("ibv_create_comp_channel"),
            destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
            get_cq_event: sym!("ibv_get_cq_event"),
            ack_cq_events: sym!("ibv_ack_cq_events"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            _lib: lib,
        })
    }

    /// The names of the devices libibverbs lists (those with a kernel driver, a user-space provider, and a
    /// `/dev/infiniband/uverbs*` node), or the errno of a failed listing.
    pub fn device_names(&self) -> Result<Vec<String>, i32> {
        self.with_device(|list| list.iter().map(|(name, _)| name.clone()).collect())
    }

    /// Runs `f` on the device list, then frees it; pointers in it must not outlive `f`.
    pub fn with_device<R>(
        &self,
        f: impl FnOnce(&[(String, *mut IbvDevice)]) -> R,
    ) -> Result<R, i32> {
        let mut n: c_int = 0;
        // SAFETY: `n` is valid to write.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        let mut out = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid device pointers, followed by a null.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: `name` is a NUL-terminated array inside the device, alive until the list is freed.
            let name = unsafe { std::ffi::CStr::from_ptr((*dev).name.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            out.push((name, dev));
        }
        let r = f(&out);
        // SAFETY: the list came from get_device_list and is freed once.
        unsafe { (self.free_device_list)(list) };
        Ok(r)
    }

    /// An extended operation of an open context, as `verbs_get_ctx_op` finds it: only when the context is
    /// extended (`abi_compat`), the provider's `verbs_context` reaches back as far as the slot (`sz`), and
    /// the slot is set.
    ///
    /// # Safety
    /// `ctx` must be a context returned by `open_device` and not yet closed.
    pub unsafe fn verbs_op(ctx: *mut IbvContext, slot: usize) -> Option<*const c_void> {
        if slot >= VCTX_SLOTS {
            return None;
        }
        // SAFETY: the caller's context is valid to read.
        let compat = unsafe { (*ctx).abi_compat };
        if compat as usize != usize::MAX {
            return None;
        }
        let base = ctx
            .cast::<u8>()
            .wrapping_sub(offset_of!(VerbsContext, context));
        // SAFETY: an extended context is the last member of a verbs_context; `sz` sits just before it in
        // every version of the struct.
        let sz = unsafe {
            base.wrapping_add(offset_of!(VerbsContext, sz))
                .cast::<usize>()
                .read_unaligned()
        };
        let at = offset_of!(VerbsContext, slots) + slot * size_of::<*const c_void>();
        if sz < size_of::<VerbsContext>() - at {
            return None;
        }
        // SAFETY: `sz` says the provider's struct reaches back to this slot.
        let p = unsafe {
            base.wrapping_add(at)
                .cast::<*const c_void>()
                .read_unaligned()
        };
        (!p.is_null()).then_some(p)
    }
}

/// Why `ibv_get_device_list` failed, in words: ENOSYS is how it says that the kernel offers no RDMA device
/// to user space at all.
pub fn listing_failure(errno: i32) -> String {
    if errno == libc::ENOSYS {
        "the kernel offers it no RDMA device (no ib_uverbs device; `modprobe ib_uverbs` on an RDMA host)".into()
    } else {
        format!(
            "listing the devices failed: {}",
            std::io::Error::from_raw_os_error(errno)
        )
    }
}

/// A data-path operation of `struct ibv_context_ops` (`post_recv`, `req_notify_cq`).
///
/// # Safety
/// `ctx` must be a valid open context.
pub unsafe fn ctx_op(ctx: *mut IbvContext, slot: usize) -> Option<*const c_void> {
    // SAFETY: the caller's context is valid to read; the ops table is inline in it.
    let p = unsafe { (*ctx).ops.slots.get(slot).copied()? };
    (!p.is_null()).then_some(p)
}

/// `(C expression, value)` of every size, offset and constant the code relies on, for the layout test, which
/// has a C program print each expression.
#[cfg(test)]
pub fn layout() -> Vec<(&'static str, usize)> {
    macro_rules! size {
        ($c:literal, $t:ty) => {
            (concat!("sizeof(struct ", $c, ")"), size_of::<$t>())
        };
    }
    macro_rules! off {
        ($c:literal, $t:ty, $f:ident) => {
            (
                concat!("offsetof(struct ", $c, ", ", stringify!($f), ")"),
                offset_of!($t, $f),
            )
        };
    }
    // A function pointer kept in one of the `slots` arrays, named as the header names it.
    macro_rules! slot {
        ($c:literal, $t:ty, $f:literal, $i:expr) => {
            (
                concat!("offsetof(struct ", $c, ", ", $f, ")"),
                offset_of!($t, slots) + $i * size_of::<*const c_void>(),
            )
        };
    }
    // How far before `verbs_context.context` an extended operation's slot sits.
    macro_rules! back {
        ($f:literal, $i:expr) => {
            (
                concat!(
                    "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, ",
                    $f,
                    ")"
                ),
                offset_of!(VerbsContext, context)
                    - (offset_of!(VerbsContext, slots) + $i * size_of::<*const c_void>()),
            )
        };
    }
    macro_rules! konst {
        ($k:ident) => {
            (stringify!($k), $k as usize)
        };
    }
    vec![
        size!("ibv_device", IbvDevice),
        off!("ibv_device", IbvDevice, name),
        size!("ibv_context_ops", IbvContextOps),
        slot!("ibv_context_ops", IbvContextOps, "poll_cq", OP_POLL_CQ),
        slot!(
            "ibv_context_ops",
            IbvContextOps,
            "req_notify_cq",
            OP_REQ_NOTIFY_CQ
        ),
        slot!("ibv_context_ops", IbvContextOps, "post_send", OP_POST_SEND),
        slot!("ibv_context_ops", IbvContextOps, "post_recv", OP_POST_RECV),
        size!("ibv_context", IbvContext),
        off!("ibv_context", IbvContext, ops),
        off!("ibv_context", IbvContext, abi_compat),
        // Distances back from `context`, never absolute offsets: see `VerbsContext`.
        back!("query_rt_values", VOP_QUERY_RT_VALUES),
        back!("create_cq_ex", VOP_CREATE_CQ_EX),
        back!("query_device_ex", VOP_QUERY_DEVICE_EX),
        back!("ibv_destroy_flow", VOP_DESTROY_FLOW),
        back!("ibv_create_flow", VOP_CREATE_FLOW),
        (
            "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, sz)",
            offset_of!(VerbsContext, context) - offset_of!(VerbsContext, sz),
        ),
        // `context` is the last member, and nothing follows it.
        (
            "sizeof(struct verbs_context) - offsetof(struct verbs_context, context)",
            size_of::<VerbsContext>() - offset_of!(VerbsContext, context),
        ),
        size!("ibv_pd", IbvPd),
        size!("ibv_mr", IbvMr),
        off!("ibv_mr", IbvMr, lkey),
        size!("ibv_comp_channel", IbvCompChannel),
        off!("ibv_comp_channel", IbvCompChannel, fd),
        size!("ibv_cq", IbvCq),
        size!("ibv_cq_ex", IbvCqEx),
        off!("ibv_cq_ex", IbvCqEx, status),
        off!("ibv_cq_ex", IbvCqEx, wr_id),
        off!("ibv_cq_ex", IbvCqEx, start_poll),
        off!("ibv_cq_ex", IbvCqEx, next_poll),
        off!("ibv_cq_ex", IbvCqEx, end_poll),
        off!("ibv_cq_ex", IbvCqEx, read_byte_len),
        off!("ibv_cq_ex", IbvCqEx, read_completion_ts),
        off!("ibv_cq_ex", IbvCqEx, read_completion_wallclock_ns),
        size!("ibv_cq_init_attr_ex", IbvCqInitAttrEx),
        off!("ibv_cq_init_attr_ex", IbvCqInitAttrEx, wc_flags),
        off!("ibv_cq_init_attr_ex", IbvCqInitAttrEx, parent_domain),
        size!("ibv_qp_init_attr", IbvQpInitAttr),
        off!("ibv_qp_init_attr", IbvQpInitAttr, qp_type),
        size!("ibv_qp", IbvQp),
        off!("ibv_qp", IbvQp, qp_num),
        size!("ibv_qp_attr", IbvQpAttr),
        off!("ibv_qp_attr", IbvQpAttr, ah_attr),
        off!("ibv_qp_attr", IbvQpAttr, port_num),
        off!("ibv_qp_attr", IbvQpAttr, rate_limit),
        size!("ibv_ah_attr", IbvAhAttr),
        size!("ibv_sge", IbvSge),
        size!("ibv_recv_wr", IbvRecvWr),
        off!("ibv_recv_wr", IbvRecvWr, num_sge),
        size!("ibv_flow_attr", IbvFlowAttr),
        off!("ibv_flow_attr", IbvFlowAttr, port),
        off!("ibv_flow_attr", IbvFlowAttr, flags),
        size!("ibv_values_ex", IbvValuesEx),
        off!("ibv_values_ex", IbvValuesEx, raw_clock),
        size!("ibv_device_attr", IbvDeviceAttr),
        off!("ibv_device_attr", IbvDeviceAttr, phys_port_cnt),
        size!("ibv_device_attr_ex", IbvDeviceAttrEx),
        off!(
            "ibv_device_attr_ex",
            IbvDeviceAttrEx,
            completion_timestamp_mask
        ),
        off!("ibv_device_attr_ex", IbvDeviceAttrEx, hca_core_clock),
        off!("ibv_device_attr_ex", IbvDeviceAttrEx, phys_port_cnt_ex),
        konst!(IBV_QPT_RAW_PACKET),
        konst!(IBV_QPS_INIT),
        konst!(IBV_QPS_RTR),
        konst!(IBV_QP_STATE),
        konst!(IBV_QP_PORT),
        konst!(IBV_ACCESS_LOCAL_WRITE),
        konst!(IBV_FLOW_ATTR_SNIFFER),
        konst!(IBV_WC_EX_WITH_BYTE_LEN),
        konst!(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
        konst!(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK),
        konst!(IBV_VALUES_MASK_RAW_CLOCK),
        konst!(IBV_WC_SUCCESS),
        konst!(IBV_WC_WR_FLUSH_ERR),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names a directory holding another rdma-core's `infiniband/verbs.h` to check the layouts against
    /// instead of the installed one (a newer release's headers, say).
    const INCLUDE_ENV: &str = "ROCETRACE_VERBS_INCLUDE";

    /// Compiles a C program against `verbs.h` that prints the C side of [`layout`], and compares. Runs where
    /// the headers and a C compiler exist (`cargo xtask install` brings libibverbs-dev), and says so where not.
    #[test]
    fn layout_matches_the_installed_headers() {
        let asked = std::env::var_os(INCLUDE_ENV).filter(|v| !v.is_empty());
        let include = asked
            .clone()
            .map_or_else(|| "/usr/include".into(), std::path::PathBuf::from);
        let header = include.join("infiniband/verbs.h");
        if !header.exists() {
            assert!(
                asked.is_none(),
                "{INCLUDE_ENV} names {}, which has no infiniband/verbs.h",
                include.display()
            );
            testkit::not_run_here(
                "the libibverbs layout check: /usr/include/infiniband/verbs.h is missing \
                 (apt-get install libibverbs-dev)",
            );
            return;
        }
        let ours = layout();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
        );
        // Each name is the C expression that computes it.
        for (expr, _) in &ours {
            c.push_str(&format!(
                "  printf(\"%s=%lu\\n\", \"{expr}\", (unsigned long)({expr}));\n"
            ));
        }
        c.push_str("  return 0;\n}\n");
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("layout.c");
        let exe = dir.path().join("layout");
        std::fs::write(&src, c).unwrap();
        let cc = std::process::Command::new("cc")
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output();
        let cc = match cc {
            Ok(o) => o,
            Err(e) => {
                testkit::not_run_here(&format!("the libibverbs layout check: no C compiler ({e})"));
                return;
            }
        };
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let theirs: std::collections::BTreeMap<&str, usize> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k, v.parse().unwrap()))
            .collect();
        assert_eq!(theirs.len(), ours.len(), "{text}");
        let wrong: Vec<String> = ours
            .iter()
            .filter(|(name, v)| theirs.get(name) != Some(v))
            .map(|(name, v)| format!("{name}: ours {v}, verbs.h {:?}", theirs.get(name)))
            .collect();
        assert!(
            wrong.is_empty(),
            "against {}:\n{}",
            header.display(),
            wrong.join("\n")
        );
    }

    /// A provider's `verbs_context` laid out in words: `extra` slots more at the front than ours (a newer
    /// rdma-core), or fewer when negative (an older one); `sz` covering all of it; each of our slots holding
    /// its index plus one; the context marked extended. Also where `context` starts, in bytes.
    fn provider_context(extra: isize) -> (Vec<u64>, usize) {
        let word = size_of::<u64>();
        let front = (offset_of!(VerbsContext, context) / word)
            .checked_add_signed(extra)
            .unwrap();
        let total = front + size_of::<IbvContext>() / word;
        let mut mem = vec![0u64; total];
        // Slots, then `_abi_placeholder3` and `sz` just before `context`.
        for (w, v) in mem.iter_mut().enumerate().take(front - 2) {
            let ours = w as isize - extra;
            *v = u64::try_from(ours + 1).unwrap_or(0);
        }
        mem[front - 1] = (total * word) as u64;
        let ctx = front * word;
        mem[(ctx + offset_of!(IbvContext, abi_compat)) / word] = u64::MAX;
        (mem, ctx)
    }

    #[test]
    fn extended_operations_are_found_back_from_the_context_whatever_the_front_holds() {
        for extra in [0, 6, 20] {
            let (mut mem, ctx) = provider_context(extra);
            let ctx = mem.as_mut_ptr().cast::<u8>().wrapping_add(ctx).cast();
            for slot in [VOP_QUERY_RT_VALUES, VOP_CREATE_CQ_EX, VOP_CREATE_FLOW] {
                // SAFETY: `ctx` points into `mem`, laid out as a provider's context.
                let got = unsafe { Verbs::verbs_op(ctx, slot) };
                assert_eq!(
                    got,
                    Some((slot + 1) as *const c_void),
                    "{extra} extra: {slot}"
                );
            }
        }
        // An old provider whose struct stops short of a slot does not have that operation.
        let short = -(VOP_QUERY_RT_VALUES as isize) - 1;
        let (mut mem, ctx) = provider_context(short);
        let ctx = mem.as_mut_ptr().cast::<u8>().wrapping_add(ctx).cast();
        // SAFETY: as above.
        assert_eq!(unsafe { Verbs::verbs_op(ctx, VOP_QUERY_RT_VALUES) }, None);
        assert!(unsafe { Verbs::verbs_op(ctx, VOP_CREATE_CQ_EX) }.is_some());
    }
}
