//! The NIC's sniffer through libibverbs: a raw-packet QP whose receive queue gets a copy of every frame the
//! port sends and receives, through a flow rule of type `IBV_FLOW_ATTR_SNIFFER`.
//!
//! The resources, in the order they are made (and undone in reverse by `Drop`): the device context, a
//! protection domain, a completion channel (so that an idle capture sleeps in `poll(2)` instead of
//! spinning), an extended CQ that stamps each completion with the NIC clock, the raw-packet QP moved to
//! INIT on the port and then to RTR, one registered region cut into receive buffers all posted to the QP,
//! and last the sniffer rule, so that nothing arrives before there is room for it. The CQ and the QP are
//! made as a pair: a device may accept a CQ's stamps and refuse them on the QP, and the pair is then made
//! again asking for the next best stamps ([`Stamping`]), down to none, the host stamping when it polls.
//!
//! Each buffer holds a whole frame of the port's MTU: a raw-packet QP cannot scatter a frame's head into a
//! small buffer and drop its tail. The snap length applies when the frame is copied out, and the buffer goes
//! straight back to the QP. When frames come faster than the buffers return, the NIC drops them and counts
//! them in the port's `out_of_buffer` counter: its rise during the capture is reported as loss (it counts
//! every QP of the port, so it is an upper bound on the sniffer's own loss).
//!
//! Not run on hardware yet: see docs/capture.md for how to check it (`roce-tracer selftest -i mlx5_0`).

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::{self, Anchor, NicClock, Stamping};
use super::ffi::{self, Verbs};
use super::{CompletionSource, Item, PortSpec, RdmaError, SourceError, Stamp, verb_error};

/// Receive buffers posted at once: with 64-byte frames at line rate the poll loop gets a few hundred
/// microseconds to return each one.
const BUFFERS: usize = 4096;
/// A new clock anchor and a look at the loss counter this often.
const ANCHOR_EVERY: Duration = Duration::from_secs(1);
/// How long polling may answer EBUSY before the source gives up (see [`Sniffer::busy`]).
const BUSY_LIMIT: Duration = Duration::from_secs(1);
/// Room for two VLAN tags, the Ethernet header and a margin, above the netdev's MTU.
const FRAME_OVERHEAD: usize = 64;
const DEFAULT_MTU: usize = 9000;

/// One receive buffer for a netdev MTU: a whole frame, 64-byte aligned.
fn buffer_size(mtu: usize) -> usize {
    (mtu + FRAME_OVERHEAD).next_multiple_of(64)
}

/// The memory one port's sniffer pins (`ibv_reg_mr`), which the locked-memory limit must allow.
pub fn pinned_bytes(mtu: Option<usize>) -> usize {
    BUFFERS * buffer_size(mtu.unwrap_or(DEFAULT_MTU))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An open sniffer. Raw pointers into libibverbs' objects, used by one thread at a time.
#[derive(Debug)]
pub struct Sniffer {
    verbs: Arc<Verbs>,
    spec: PortSpec,
    ctx: *mut ffi::IbvContext,
    pd: *mut ffi::IbvPd,
    channel: *mut ffi::IbvCompChannel,
    cq: *mut ffi::IbvCqEx,
    qp: *mut ffi::IbvQp,
    mr: *mut ffi::IbvMr,
    flow: *mut ffi::IbvFlow,
    buffers: Vec<u8>,
    buf_size: usize,
    snaplen: usize,
    /// How completions are stamped.
    stamping: Stamping,
    /// Why `stamping` is not the first way, each refusal in turn, for the start line.
    fallbacks: Vec<String>,
    /// The raw counter's rate and width, with [`Stamping::FreeRunning`] only.
    clock: Option<NicClock>,
    /// The NIC's clock runs in real-time format (see [`clock::looks_real_time`]).
    real_time: bool,
    last_anchor: Option<Instant>,
    out_of_buffer: PathBuf,
    out_of_buffer_seen: Option<u64>,
    /// Completions in error not yet reported as lost.
    errors: u64,
    /// Since when polling has answered EBUSY, without a completion since.
    busy_since: Option<Instant>,
    unacked_events: u32,
    /// Buffers to give back to the QP after the current poll.
    repost: Vec<u64>,
}

// SAFETY: the pointers belong to this value alone; libibverbs objects may be used from any thread as long as
// one thread at a time does, which the engine's one reader thread per source guarantees.
unsafe impl Send for Sniffer {}

impl Sniffer {
    /// Opens the port and sets up everything the sniffer needs, the flow rule last (see the module doc).
    pub fn open(
        verbs: Arc<Verbs>,
        spec: &PortSpec,
        snaplen: u32,
        sysfs_root: &Path,
    ) -> Result<Sniffer, RdmaError> {
        let (ctx, open_errno) = verbs
            .with_device(|list| {
                list.iter()
                    .find(|(name, _)| *name == spec.device)
                    .map(|&(_, dev)| {
                        // SAFETY: a device pointer from the list that is still alive.
                        let ctx = unsafe { (verbs.open_device)(dev) };
                        // Read here: freeing the list, once this returns, may change errno.
                        (ctx, if ctx.is_null() { errno() } else { 0 })
                    })
                    .ok_or_else(|| list.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
            })
            .map_err(|e| RdmaError::NotInVerbs {
                name: spec.device.clone(),
                listed: ffi::listing_failure(e),
            })?
            .map_err(|names| RdmaError::NotInVerbs {
                name: spec.device.clone(),
                listed: if names.is_empty() {
                    "it lists none".into()
                } else {
                    format!("it lists {}", names.join(", "))
                },
            })?;
        if ctx.is_null() {
            return Err(verb_error("ibv_open_device", spec, open_errno));
        }
        let buf_size = buffer_size(netdev_mtu(sysfs_root, spec).unwrap_or(DEFAULT_MTU));
        let mut s = Sniffer {
            verbs,
            spec: spec.clone(),
            ctx,
            pd: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            mr: std::ptr::null_mut(),
            flow: std::ptr::null_mut(),
            buffers: Vec::new(),
            buf_size,
            snaplen: snaplen.max(1) as usize,
            stamping: Stamping::FreeRunning,
            fallbacks: Vec::new(),
            clock: None,
            real_time: false,
            last_anchor: None,
            out_of_buffer: sysfs_root
                .join("class/infiniband")
                .join(&spec.device)
                .join("ports")
                .join(spec.port.to_string())
                .join("hw_counters/out_of_buffer"),
            out_of_buffer_seen: None,
            errors: 0,
            busy_since: None,
            unacked_events: 0,
            repost: Vec::with_capacity(BUFFERS),
        };
        // On any error below, dropping `s` undoes what was made.
        s.setup()?;
        Ok(s)
    }

    fn setup(&mut self) -> Result<(), RdmaError> {
        let v = Arc::clone(&self.verbs);
        let spec = self.spec.clone();
        let fail = |what| verb_error(what, &spec, errno());
        self.choose_stamping();
        // SAFETY (this block and the calls below): every pointer passed is one libibverbs returned for this
        // context and has not been destroyed; every struct passed is a zeroed #[repr(C)] copy of the
        // header's, filled as the verb's documentation asks.
        unsafe {
            self.pd = (v.alloc_pd)(self.ctx);
            if self.pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            self.channel = (v.create_comp_channel)(self.ctx);
            if self.channel.is_null() {
                return Err(fail("ibv_create_comp_channel"));
            }
            let fd = (*self.channel).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        self.create_cq_and_qp()?;
        // SAFETY: as above.
        unsafe {
            for (state, mask) in [
                (ffi::IBV_QPS_INIT, ffi::IBV_QP_STATE | ffi::IBV_QP_PORT),
                (ffi::IBV_QPS_RTR, ffi::IBV_QP_STATE),
            ] {
                let mut attr: ffi::IbvQpAttr = ffi::zeroed();
                attr.qp_state = state;
                attr.port_num = self.spec.port;
                let rc = (v.modify_qp)(self.qp, &mut attr, mask);
                if rc != 0 {
                    return Err(verb_error("ibv_modify_qp", &spec, rc));
                }
            }
            self.buffers = vec![0u8; BUFFERS * self.buf_size];
            self.mr = (v.reg_mr)(
                self.pd,
                self.buffers.as_mut_ptr().cast(),
                self.buffers.len(),
                ffi::IBV_ACCESS_LOCAL_WRITE,
            );
            if self.mr.is_null() {
                let errno = errno();
                return Err(super::pin_error(
                    &spec,
                    self.buffers.len(),
                    errno,
                    crate::sys::memlock_limit(),
                    crate::sys::effective_caps(),
                ));
            }
        }
        self.repost = (0..BUFFERS as u64).collect();
        self.post_receives()
            .map_err(|rc| verb_error("ibv_post_recv", &spec, rc))?;
        // The loss counter's starting point, as close to the rule's start as can be.
        self.out_of_buffer_rise();
        self.create_flow()?;
        // The first poll takes the first anchor and hands it on before any frame.
        self.last_anchor = None;
        Ok(())
    }

    /// The device's clock rate and counter width, from `ibv_query_device_ex`; `None` when the provider
    /// does not say.
    fn query_clock(&self) -> Option<NicClock> {
        type QueryEx = unsafe extern "C" fn(
            *mut ffi::IbvContext,
            *const c_void,
            *mut ffi::IbvDeviceAttrEx,
            usize,
        ) -> c_int;
        // SAFETY: the context is open; the slot holds the header's `query_device_ex`.
        let op = unsafe { Verbs::verbs_op(self.ctx, ffi::VOP_QUERY_DEVICE_EX)? };
        let f: QueryEx = unsafe { std::mem::transmute(op) };
        let mut attr: ffi::IbvDeviceAttrEx = ffi::zeroed();
        // SAFETY: `attr` is as large as the size passed.
        let rc = unsafe {
            f(
                self.ctx,
                std::ptr::null(),
                &mut attr,
                size_of::<ffi::IbvDeviceAttrEx>(),
            )
        };
        if rc != 0 {
            return None;
        }
        NicClock::new(attr.hca_core_clock, attr.completion_timestamp_mask).ok()
    }

    /// The first way of stamping to try: the raw counter needs the clock's rate and width, and a reading
    /// of it now and then to anchor it; without them the provider's wall clock comes first.
    fn choose_stamping(&mut self) {
        self.clock = self.query_clock();
        self.stamping = Stamping::FreeRunning;
        let why = if self.clock.is_none() {
            "the device does not report its clock's rate and width (ibv_query_device_ex)"
        } else if self.anchor().is_none() {
            "the device's clock cannot be read (ibv_query_rt_values_ex)"
        } else {
            return;
        };
        self.fallbacks.push(why.to_owned());
        self.use_stamping(Stamping::WallClock);
    }

    fn use_stamping(&mut self, stamping: Stamping) {
        self.stamping = stamping;
        if stamping != Stamping::FreeRunning {
            // Anchors and the counter's format belong to the raw counter alone.
            self.clock = None;
            self.real_time = false;
        }
    }

    /// Makes the CQ and the raw QP, asking for the best stamps the device gives both of them (see
    /// [`Stamping`]): a refusal of either while stamps are asked for is noted and the pair made again
    /// with the next way; a refusal the stamps cannot explain, or of the last way, is the error.
    fn create_cq_and_qp(&mut self) -> Result<(), RdmaError> {
        type CreateCqEx = unsafe extern "C" fn(
            *mut ffi::IbvContext,
            *mut ffi::IbvCqInitAttrEx,
        ) -> *mut ffi::IbvCqEx;
        // SAFETY: the context is open; the slot holds the header's `create_cq_ex`.
        let Some(op) = (unsafe { Verbs::verbs_op(self.ctx, ffi::VOP_CREATE_CQ_EX) }) else {
            return Err(verb_error("ibv_create_cq_ex", &self.spec, libc::EOPNOTSUPP));
        };
        let create_cq: CreateCqEx = unsafe { std::mem::transmute(op) };
        loop {
            let stamping = self.stamping;
            let mut init: ffi::IbvCqInitAttrEx = ffi::zeroed();
            init.cqe = BUFFERS as u32;
            init.channel = self.channel;
            init.wc_flags = ffi::IBV_WC_EX_WITH_BYTE_LEN | wc_stamp_flag(stamping);
            // SAFETY: a zeroed init struct with the fields above, for an open context.
            self.cq = unsafe { create_cq(self.ctx, &mut init) };
            let (what, errno, ours) = if self.cq.is_null() {
                // Any refusal of the CQ may be the stamps': the next way asks for less.
                ("ibv_create_cq_ex", errno(), true)
            } else {
                let mut qp_init = sniffer_qp_attr(self.cq.cast());
                // SAFETY: our PD and the CQ just made; the attributes as `sniffer_qp_attr` fills them.
                self.qp = unsafe { (self.verbs.create_qp)(self.pd, &mut qp_init) };
                if !self.qp.is_null() {
                    return Ok(());
                }
                let errno = errno();
                // SAFETY: the CQ just made, which nothing uses.
                unsafe { (self.verbs.destroy_cq)(self.cq.cast()) };
                self.cq = std::ptr::null_mut();
                let ours = stamping.qp_refusal_may_be_ours(errno);
                ("ibv_create_qp (raw packet)", errno, ours)
            };
            let Some(next) = stamping.fallback().filter(|_| ours) else {
                return Err(verb_error(what, &self.spec, errno));
            };
            // What mlx5 does on a NIC whose timestamps are set to real time (the firmware's choice).
            let hint = if what.starts_with("ibv_create_qp") && stamping == Stamping::FreeRunning {
                ", as mlx5 does when the NIC's clock is set to real time"
            } else {
                ""
            };
            self.fallbacks.push(format!(
                "{what} refused {} ({}){hint}",
                stamping.asked(),
                std::io::Error::from_raw_os_error(errno)
            ));
            self.use_stamping(next);
        }
    }

    fn create_flow(&mut self) -> Result<(), RdmaError> {
        type CreateFlow =
            unsafe extern "C" fn(*mut ffi::IbvQp, *mut ffi::IbvFlowAttr) -> *mut ffi::IbvFlow;
        // SAFETY: the context is open; the slot holds the header's `ibv_create_flow`.
        let Some(op) = (unsafe { Verbs::verbs_op(self.ctx, ffi::VOP_CREATE_FLOW) }) else {
            return Err(verb_error("ibv_create_flow", &self.spec, libc::EOPNOTSUPP));
        };
        let f: CreateFlow = unsafe { std::mem::transmute(op) };
        let mut attr = ffi::IbvFlowAttr {
            type_: ffi::IBV_FLOW_ATTR_SNIFFER,
            size: size_of::<ffi::IbvFlowAttr>() as u16,
            port: self.spec.port,
            ..Default::default()
        };
        // SAFETY: a QP of this context in RTR, and a flow attribute with no specifications after it.
        self.flow = unsafe { f(self.qp, &mut attr) };
        if self.flow.is_null() {
            return Err(verb_error("ibv_create_flow", &self.spec, errno()));
        }
        Ok(())
    }

    /// Posts the buffers in `repost` to the receive queue, as one chain. The errno on failure.
    fn post_receives(&mut self) -> Result<(), i32> {
        if self.repost.is_empty() {
            return Ok(());
        }
        type PostRecv = unsafe extern "C" fn(
            *mut ffi::IbvQp,
            *mut ffi::IbvRecvWr,
            *mut *mut ffi::IbvRecvWr,
        ) -> c_int;
        // SAFETY: the context is open; the slot holds `post_recv`.
        let Some(op) = (unsafe { ffi::ctx_op(self.ctx, ffi::OP_POST_RECV) }) else {
            return Err(libc::EOPNOTSUPP);
        };
        let f: PostRecv = unsafe { std::mem::transmute(op) };
        // SAFETY: the region is registered.
        let lkey = unsafe { (*self.mr).lkey };
        let base = self.buffers.as_mut_ptr() as u64;
        let mut sges: Vec<ffi::IbvSge> = self
            .repost
            .iter()
            .map(|&i| ffi::IbvSge {
                addr: base + i * self.buf_size as u64,
                length: self.buf_size as u32,
                lkey,
            })
            .collect();
        let mut wrs: Vec<ffi::IbvRecvWr> = self
            .repost
            .iter()
            .zip(sges.iter_mut())
            .map(|(&i, sge)| ffi::IbvRecvWr {
                wr_id: i,
                next: std::ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
            })
            .collect();
        for k in 1..wrs.len() {
            let next: *mut ffi::IbvRecvWr = &mut wrs[k];
            wrs[k - 1].next = next;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a chain of valid work requests, each naming one free buffer of the registered region.
        let rc = unsafe { f(self.qp, wrs.as_mut_ptr(), &mut bad) };
        self.repost.clear();
        if rc != 0 { Err(rc) } else { Ok(()) }
    }

    /// Reads the NIC clock and the wall clock together.
    fn anchor(&mut self) -> Option<Anchor> {
        self.last_anchor = Some(Instant::now());
        self.clock?;
        type QueryRt = unsafe extern "C" fn(*mut ffi::IbvContext, *mut ffi::IbvValuesEx) -> c_int;
        // SAFETY: the context is open; the slot holds `query_rt_values`.
        let op = unsafe { Verbs::verbs_op(self.ctx, ffi::VOP_QUERY_RT_VALUES)? };
        let f: QueryRt = unsafe { std::mem::transmute(op) };
        let mut values: ffi::IbvValuesEx = ffi::zeroed();
        values.comp_mask = ffi::IBV_VALUES_MASK_RAW_CLOCK;
        let before = crate::sys::now_ns();
        // SAFETY: `values` is valid to write.
        let rc = unsafe { f(self.ctx, &mut values) };
        let after = crate::sys::now_ns();
        if rc != 0 {
            return None;
        }
        let ticks = (values.raw_clock.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(values.raw_clock.tv_nsec as u64);
        let wall_ns = before / 2 + after / 2;
        if clock::looks_real_time(ticks, wall_ns) {
            self.real_time = true;
        }
        Some(Anchor { ticks, wall_ns })
    }

    /// The rise of the port's out-of-buffer counter since the last look.
    fn out_of_buffer_rise(&mut self) -> u64 {
        let Some(now) = std::fs::read_to_string(&self.out_of_buffer)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        else {
            return 0;
        };
        let rise = self
            .out_of_buffer_seen
            .map_or(0, |was| now.saturating_sub(was));
        self.out_of_buffer_seen = Some(now);
        rise
    }

    /// Takes every completion now in the CQ; how many.
    fn drain(&mut self, each: &mut dyn FnMut(Item<'_>) -> bool) -> Result<usize, SourceError> {
        let cq = self.cq;
        // SAFETY: `cq` is the extended CQ made in `create_cq`; its poll functions are set by the provider.
        let (Some(start), Some(next), Some(end)) =
            (unsafe { ((*cq).start_poll, (*cq).next_poll, (*cq).end_poll) })
        else {
            return Err(SourceError::Other(
                "the provider's CQ has no poll functions".into(),
            ));
        };
        let mut attr = ffi::IbvPollCqAttr::default();
        // SAFETY: as above.
        let mut rc = unsafe { start(cq, &mut attr) };
        match rc {
            0 => self.busy_since = None,
            libc::ENOENT => return Ok(0),
            // Nothing was taken and the CQ stays valid, so neither end_poll nor anything else is due.
            libc::EBUSY => return self.busy().map(|()| 0),
            _ => {
                return Err(SourceError::Verb {
                    what: "ibv_start_poll",
                    errno: std::io::Error::from_raw_os_error(rc),
                });
            }
        }
        let mut n = 0;
        let mut keep = true;
        let mut flushed = false;
        while rc == 0 {
            n += 1;
            // SAFETY: between a successful start/next_poll and the next call, the CQ's current entry is
            // readable through these fields and functions. A completion in error has only its status and
            // work request id to read.
            let (status, wr_id) = unsafe { ((*cq).status, (*cq).wr_id) };
            let ok = status == ffi::IBV_WC_SUCCESS;
            if wr_id < BUFFERS as u64 {
                self.repost.push(wr_id);
            }
            if ok && keep {
                // SAFETY: as above, for a successful completion.
                let (byte_len, stamp) =
                    unsafe { ((*cq).read_byte_len.map(|f| f(cq)), self.stamp(cq)) };
                let len = byte_len.unwrap_or(self.buf_size as u32);
                let start_at = (wr_id as usize).saturating_mul(self.buf_size);
                let take = (len as usize).min(self.snaplen).min(self.buf_size);
                if let Some(data) = self.buffers.get(start_at..start_at + take) {
                    keep = each(Item::Frame { data, len, stamp });
                }
            } else if status == ffi::IBV_WC_WR_FLUSH_ERR {
                flushed = true;
            } else {
                self.errors += 1;
            }
            if !keep {
                break;
            }
            // SAFETY: as above.
            rc = unsafe { next(cq) };
        }
        // SAFETY: ends the poll that `start` began.
        unsafe { end(cq) };
        if let Err(rc) = self.post_receives() {
            return Err(SourceError::Verb {
                what: "ibv_post_recv",
                errno: std::io::Error::from_raw_os_error(rc),
            });
        }
        if self.errors > 0 {
            let e = std::mem::take(&mut self.errors);
            each(Item::Lost(e));
        }
        if flushed {
            // Only a QP in the error state flushes its receives while the capture runs (the QP is
            // destroyed after the last poll): nothing more will arrive.
            return Err(SourceError::Other(format!(
                "the sniffer's QP on {} entered the error state (its receives were flushed); `dmesg` may \
                 say why",
                self.spec
            )));
        }
        match rc {
            // The batch is over, or stopped early by the reader (rc is still 0).
            0 | libc::ENOENT => {}
            // The completion stays in the CQ for the next start_poll.
            libc::EBUSY => self.busy()?,
            // A completion the provider could not read: lost, and likely not the last, so say so rather
            // than go on as if the queue had merely run dry.
            _ => {
                return Err(SourceError::Poll {
                    what: "ibv_next_poll",
                    spec: self.spec.to_string(),
                    taken: n,
                    errno: std::io::Error::from_raw_os_error(rc),
                });
            }
        }
        Ok(n)
    }

    /// The stamp of the CQ's current completion, as [`Stamping`] asked for it; the host's clock now when
    /// the provider gave no reader for it.
    ///
    /// # Safety
    /// `cq` must be our CQ, between a successful start/next_poll and the next call, on a successful
    /// completion.
    unsafe fn stamp(&mut self, cq: *mut ffi::IbvCqEx) -> Stamp {
        let now = crate::sys::now_ns();
        match (self.stamping, self.clock) {
            (Stamping::FreeRunning, Some(c)) => {
                // SAFETY: the caller's completion is readable.
                let Some(t) = (unsafe { (*cq).read_completion_ts.map(|f| f(cq)) }) else {
                    return Stamp::Wall(now);
                };
                if !self.real_time && clock::looks_real_time(t, now) {
                    // The anchor's reading did not show it (a provider that reads the free-running
                    // counter there), the completions do.
                    self.real_time = true;
                }
                if self.real_time {
                    Stamp::Wall(clock::real_time_ns(t).unwrap_or(now))
                } else {
                    Stamp::Nic(t & c.mask)
                }
            }
            (Stamping::WallClock, _) => {
                // SAFETY: the caller's completion is readable.
                let ns = unsafe { (*cq).read_completion_wallclock_ns.map(|f| f(cq)) };
                Stamp::Wall(ns.map_or(now, |ns| clock::provider_wall_ns(ns, now)))
            }
            _ => Stamp::Wall(now),
        }
    }

    /// Notes an EBUSY from the CQ: the provider could not read the clock information the kernel was
    /// updating at that moment (only with wall-clock stamps), and the completion waits for the next poll.
    /// That lasts microseconds; a second of it is a fault.
    fn busy(&mut self) -> Result<(), SourceError> {
        let since = *self.busy_since.get_or_insert_with(Instant::now);
        if since.elapsed() > BUSY_LIMIT {
            return Err(SourceError::Other(format!(
                "polling the CQ on {} has answered EBUSY (the provider cannot read the NIC clock's \
                 information) for over {} s",
                self.spec,
                BUSY_LIMIT.as_secs()
            )));
        }
        Ok(())
    }

    /// Asks for an event on the next completion; false when the provider cannot (the caller then naps
    /// instead of waiting on the channel).
    fn arm(&mut self) -> Result<bool, SourceError> {
        type ReqNotify = unsafe extern "C" fn(*mut ffi::IbvCq, c_int) -> c_int;
        // SAFETY: the context is open; the slot holds `req_notify_cq`.
        let Some(op) = (unsafe { ffi::ctx_op(self.ctx, ffi::OP_REQ_NOTIFY_CQ) }) else {
            return Ok(false);
        };
        let f: ReqNotify = unsafe { std::mem::transmute(op) };
        // SAFETY: our CQ, bound to our channel.
        let rc = unsafe { f(self.cq.cast(), 0) };
        if rc != 0 {
            return Err(SourceError::Verb {
                what: "ibv_req_notify_cq",
                errno: std::io::Error::from_raw_os_error(rc),
            });
        }
        Ok(true)
    }

    /// Sleeps on the completion channel for up to `wait`, and takes the event that woke it.
    fn wait_event(&mut self, wait: Duration) {
        // SAFETY: the channel is open.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(wait.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            let mut ev_cq = std::ptr::null_mut();
            let mut ev_ctx = std::ptr::null_mut();
            // SAFETY: the channel's descriptor is non-blocking; the outputs are valid to write.
            let rc = unsafe { (self.verbs.get_cq_event)(self.channel, &mut ev_cq, &mut ev_ctx) };
            if rc == 0 {
                self.unacked_events += 1;
                if self.unacked_events >= 256 {
                    // SAFETY: events of our CQ, acknowledged once.
                    unsafe { (self.verbs.ack_cq_events)(self.cq.cast(), self.unacked_events) };
                    self.unacked_events = 0;
                }
            }
        }
    }
}

impl CompletionSource for Sniffer {
    fn clock(&self) -> Option<NicClock> {
        self.clock
    }

    fn poll(
        &mut self,
        wait: Duration,
        each: &mut dyn FnMut(Item<'_>) -> bool,
    ) -> Result<bool, SourceError> {
        if self.last_anchor.is_none_or(|t| t.elapsed() >= ANCHOR_EVERY) {
            if let Some(a) = self.anchor() {
                each(Item::Anchor(a));
            }
            let rise = self.out_of_buffer_rise();
            if rise > 0 {
                each(Item::Lost(rise));
            }
        }
        if self.drain(each)? > 0 || wait.is_zero() {
            return Ok(true);
        }
        if self.busy_since.is_some() {
            // A completion is waiting for the provider: poll again at once rather than sleep.
            std::thread::yield_now();
            return Ok(true);
        }
        if !self.arm()? {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        } else if self.drain(each)? == 0 {
            // Nothing arrived between the last look and the arming, so the next completion wakes us.
            self.wait_event(wait);
        }
        self.drain(each)?;
        Ok(true)
    }

    fn timestamps(&self) -> String {
        let source = match (self.stamping, self.clock, self.real_time) {
            (Stamping::FreeRunning, Some(_), true) => {
                "the NIC's clock in real-time format, as stamped: the time of its PTP hardware clock"
                    .to_owned()
            }
            (Stamping::FreeRunning, Some(c), false) => format!(
                "the NIC's free-running clock ({} kHz), turned into wall time with an anchor every second",
                c.khz
            ),
            (Stamping::WallClock, _, _) => {
                "the NIC's stamps in wall-clock time, as the provider gives them \
                 (ibv_wc_read_completion_wallclock_ns): the time of its PTP hardware clock"
                    .to_owned()
            }
            _ => "the host's clock when each completion is polled, not the NIC's: later than the wire \
                  by the time to the poll, and bunched by poll"
                .to_owned(),
        };
        if self.fallbacks.is_empty() {
            source
        } else {
            format!("{source}, because {}", self.fallbacks.join(", then "))
        }
    }

    fn describe(&self) -> String {
        let clock = match (self.stamping, self.clock, self.real_time) {
            (Stamping::FreeRunning, Some(_), true) => "clock=nic(real-time)".to_owned(),
            (Stamping::FreeRunning, Some(c), false) => {
                format!("clock=nic({} kHz, mask {:#x})", c.khz, c.mask)
            }
            (Stamping::WallClock, _, _) => "clock=nic(wallclock)".to_owned(),
            _ => "clock=host(when polled)".to_owned(),
        };
        format!(
            "device={} sniffer buffers={}x{} {clock}",
            self.spec, BUFFERS, self.buf_size
        )
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        let v = &self.verbs;
        // SAFETY: each object was made by this value and is destroyed once, newest first; a null one was
        // never made.
        unsafe {
            if !self.flow.is_null() {
                type DestroyFlow = unsafe extern "C" fn(*mut ffi::IbvFlow) -> c_int;
                if let Some(op) = Verbs::verbs_op(self.ctx, ffi::VOP_DESTROY_FLOW) {
                    let f: DestroyFlow = std::mem::transmute(op);
                    f(self.flow);
                }
            }
            if !self.qp.is_null() {
                (v.destroy_qp)(self.qp);
            }
            if !self.mr.is_null() {
                (v.dereg_mr)(self.mr);
            }
            if !self.cq.is_null() {
                if self.unacked_events > 0 {
                    (v.ack_cq_events)(self.cq.cast(), self.unacked_events);
                }
                (v.destroy_cq)(self.cq.cast());
            }
            if !self.channel.is_null() {
                (v.destroy_comp_channel)(self.channel);
            }
            if !self.pd.is_null() {
                (v.dealloc_pd)(self.pd);
            }
            (v.close_device)(self.ctx);
        }
    }
}

/// The completion flag that asks for `stamping`'s stamps.
fn wc_stamp_flag(stamping: Stamping) -> u64 {
    match stamping {
        Stamping::FreeRunning => ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        Stamping::WallClock => ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        Stamping::Host => 0,
    }
}

/// The raw QP's attributes: a receive queue with room for every buffer, and no send queue. The sniffer never
/// sends (libpcap's rdmasniff asks for none either); a send queue would pin memory for nothing, and on mlx5
/// the driver checks the send side's timestamp format against the CQ as well as the receive side's.
fn sniffer_qp_attr(cq: *mut ffi::IbvCq) -> ffi::IbvQpInitAttr {
    let mut init: ffi::IbvQpInitAttr = ffi::zeroed();
    // ibv_create_qp wants a send CQ even for a QP that never sends.
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = 0;
    init.cap.max_send_sge = 0;
    init.cap.max_recv_wr = BUFFERS as u32;
    init.cap.max_recv_sge = 1;
    init.qp_type = ffi::IBV_QPT_RAW_PACKET;
    init
}

/// The MTU of the port's netdev, to size the receive buffers.
fn netdev_mtu(sysfs_root: &Path, spec: &PortSpec) -> Option<usize> {
    let port = crate::ports::rdma_ports(sysfs_root)
        .into_iter()
        .find(|p| p.device == spec.device && p.port == u32::from(spec.port))?;
    crate::ports::netdev_mtu(sysfs_root, &port.netdev?).map(|m| m as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sniffers_qp_receives_only() {
        let init = sniffer_qp_attr(std::ptr::null_mut());
        assert_eq!((init.cap.max_send_wr, init.cap.max_send_sge), (0, 0));
        assert_eq!(init.cap.max_recv_wr as usize, BUFFERS);
        assert_eq!(init.cap.max_recv_sge, 1);
        assert_eq!(init.qp_type, ffi::IBV_QPT_RAW_PACKET);
    }
}
