//! The probe's rings: one BPF ring buffer per CPU, created here and put into the probe's array of rings
//! ([`tracer_common::maps::RINGS`]) before any program runs.
//!
//! Why per CPU: a BPF ring buffer takes a spinlock for every record reserved, so one ring written by every
//! CPU that runs the probe makes those CPUs wait for each other, and one ring has one reader. With a ring
//! per CPU the probe never contends, and the rings can be shared out among as many reader threads as the
//! user allows (`--threads`).
//!
//! Why userspace creates them: the probe's object can only describe rings of one fixed size and count, but
//! the count is the host's CPUs and the size is a budget shared among them (`--ring-bytes`), both known
//! only at start. The kernel checks each ring against the object's template ring (type, flags), not its
//! size, so rings of any size fit.

use std::os::fd::{FromRawFd, OwnedFd};

use aya::maps::MapData;

/// The smallest share of the budget a ring gets, unless the whole budget is smaller: on a host with
/// hundreds of CPUs, an equal share of the default budget would leave each ring too little slack for a
/// burst (1 MiB holds about 11 000 header copies, tens of milliseconds of one CPU's share of a 400 GbE link).
pub const MIN_RING_BYTES: u32 = 1 << 20;

/// Which ring each CPU writes into, and how large the rings are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingPlan {
    /// Each ring's size in bytes: a power of two, at least a page.
    pub ring_bytes: u32,
    /// For each CPU id (each slot of the probe's array, one per possible CPU), the ring it writes into.
    pub ring_of_cpu: Vec<u32>,
    /// How many rings there are.
    pub rings: u32,
}

impl RingPlan {
    /// A ring for each CPU online now, sharing `budget` bytes (see [`share`]). A CPU that is possible but
    /// offline at start writes into the ring of an online one, should it come online during the capture:
    /// two CPUs then share that ring's lock, which is correct, only slower.
    pub fn per_cpu(budget: u32, online: &[u32], possible: usize) -> RingPlan {
        let mut online: Vec<u32> = online
            .iter()
            .copied()
            .filter(|&c| (c as usize) < possible)
            .collect();
        online.sort_unstable();
        online.dedup();
        if online.is_empty() {
            return RingPlan::shared(budget, possible);
        }
        let rings = online.len() as u32;
        let ring_of_cpu = (0..possible as u32)
            .map(|cpu| match online.binary_search(&cpu) {
                Ok(i) => i as u32,
                Err(_) => cpu % rings,
            })
            .collect();
        RingPlan {
            ring_bytes: share(budget, rings),
            ring_of_cpu,
            rings,
        }
    }

    /// One ring of `bytes` that every CPU writes into, as the probe had before there was a ring per CPU.
    /// The tests that run the probe through `BPF_PROG_TEST_RUN` use it: the run happens on whichever CPU
    /// the test thread is on.
    pub fn shared(bytes: u32, possible: usize) -> RingPlan {
        RingPlan {
            ring_bytes: bytes,
            ring_of_cpu: vec![0; possible.max(1)],
            rings: 1,
        }
    }

    /// The plan for this host: a ring per online CPU sharing `budget`.
    pub fn this_host(budget: u32) -> Result<RingPlan, RingSetupError> {
        let possible = aya::util::nr_cpus().map_err(|(path, e)| RingSetupError::Cpus(path, e))?;
        let online = aya::util::online_cpus().map_err(|(path, e)| RingSetupError::Cpus(path, e))?;
        Ok(RingPlan::per_cpu(budget, &online, possible))
    }

    /// The CPUs that write into `ring`.
    pub fn cpus_of(&self, ring: u32) -> Vec<u32> {
        (0..self.ring_of_cpu.len() as u32)
            .filter(|&c| self.ring_of_cpu.get(c as usize) == Some(&ring))
            .collect()
    }
}

/// Each ring's share of `budget` bytes among `rings`: an equal part rounded down to a power of two, but no
/// less than [`MIN_RING_BYTES`], or than the budget itself when that is smaller. `budget` is a power of two
/// of at least a page (the command line checks it), so every result is one too.
pub fn share(budget: u32, rings: u32) -> u32 {
    let equal = budget / rings.max(1);
    let equal = if equal == 0 { 0 } else { 1 << equal.ilog2() };
    equal.max(MIN_RING_BYTES.min(budget)).max(4096)
}

/// Why the rings could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RingSetupError {
    /// The CPU lists could not be read.
    #[error("cannot read the CPU list {0}")]
    Cpus(&'static str, #[source] std::io::Error),
    /// The kernel refused a ring (memory, `RLIMIT_MEMLOCK` on old kernels).
    #[error("creating a ring buffer of {bytes} bytes for the probe failed")]
    Create {
        /// The ring's size.
        bytes: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel's answer could not be taken as a map.
    #[error("the new ring buffer cannot be opened")]
    Open(#[source] aya::maps::MapError),
}

/// `BPF_MAP_TYPE_RINGBUF` in the kernel's `enum bpf_map_type`.
const BPF_MAP_TYPE_RINGBUF: u32 = 27;
/// `BPF_MAP_CREATE` in the kernel's `enum bpf_cmd`.
const BPF_MAP_CREATE: libc::c_long = 0;

/// The leading fields of the kernel's `union bpf_attr` for `BPF_MAP_CREATE`; the kernel reads fields past
/// the size it is given as zero.
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// Creates a ring buffer of `bytes` (a power of two, at least a page) named `name` (cut to 15 bytes). aya
/// creates only the maps an object declares, hence the system call.
pub fn create_ring(bytes: u32, name: &str) -> Result<MapData, RingSetupError> {
    let mut map_name = [0u8; 16];
    for (slot, b) in map_name.iter_mut().zip(name.bytes().take(15)) {
        *slot = b;
    }
    let attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_RINGBUF,
        key_size: 0,
        value_size: 0,
        max_entries: bytes,
        map_flags: 0,
        inner_map_fd: 0,
        numa_node: 0,
        map_name,
    };
    // SAFETY: bpf(2) with BPF_MAP_CREATE reads `size_of::<MapCreateAttr>()` bytes of a live, initialised
    // struct laid out as the kernel's attribute union begins; it returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            &attr as *const MapCreateAttr,
            std::mem::size_of::<MapCreateAttr>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(RingSetupError::Create {
            bytes,
            source: std::io::Error::last_os_error(),
        });
    }
    let fd = i32::try_from(fd).map_err(|_| RingSetupError::Create {
        bytes,
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    })?;
    // SAFETY: a descriptor the kernel just returned to this process, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    MapData::from_fd(fd).map_err(RingSetupError::Open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_in_powers_of_two_with_a_floor() {
        // Two CPUs share the default 64 MiB equally.
        assert_eq!(share(64 << 20, 2), 32 << 20);
        // Three get the power of two below a third.
        assert_eq!(share(64 << 20, 3), 16 << 20);
        // 256 CPUs would get 256 KiB each: the floor gives them 1 MiB.
        assert_eq!(share(64 << 20, 256), MIN_RING_BYTES);
        // A budget below the floor is each ring's size (the loss tests' tiny rings).
        assert_eq!(share(16 << 10, 2), 16 << 10);
        assert_eq!(share(4096, 64), 4096);
        // One ring takes the whole budget, as before there were several.
        assert_eq!(share(64 << 20, 1), 64 << 20);
        assert_eq!(share(1 << 31, 0), 1 << 31);
    }

    #[test]
    fn every_possible_cpu_has_a_ring() {
        // Online 0-1 of 4 possible: the offline ones write into the online ones' rings.
        let plan = RingPlan::per_cpu(64 << 20, &[0, 1], 4);
        assert_eq!(plan.rings, 2);
        assert_eq!(plan.ring_of_cpu, [0, 1, 0, 1]);
        assert_eq!(plan.cpus_of(0), [0, 2]);
        // Online CPUs with a gap keep a ring each, numbered in order.
        let plan = RingPlan::per_cpu(64 << 20, &[0, 2, 3], 4);
        assert_eq!(
            (plan.rings, plan.ring_of_cpu.clone()),
            (3, vec![0, 1, 1, 2])
        );
        assert_eq!(plan.cpus_of(1), [1, 2]);
        // No online list (a broken sysfs) falls back to one ring for all.
        let plan = RingPlan::per_cpu(1 << 20, &[], 2);
        assert_eq!(plan, RingPlan::shared(1 << 20, 2));
        // An online CPU beyond the possible ones is ignored rather than trusted.
        assert_eq!(RingPlan::per_cpu(1 << 20, &[0, 9], 2).rings, 1);
    }
}
