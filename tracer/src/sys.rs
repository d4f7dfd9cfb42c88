//! Facts about the running system: who we are, what we may do, and where an interface is.

use std::ffi::CString;

/// The machine's host name, from procfs (no libc call needed).
pub fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into())
}

/// The running kernel's release, e.g. `6.8.0-45-generic`.
pub fn kernel_release() -> String {
    read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into())
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Linux capability numbers we may need (linux/capability.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `CAP_NET_ADMIN`: attach TC programs.
    NetAdmin = 12,
    /// `CAP_NET_RAW`: open packet sockets.
    NetRaw = 13,
    /// `CAP_IPC_LOCK`: pin memory past the locked-memory limit (the rdma engine's receive buffers).
    IpcLock = 14,
    /// `CAP_SYS_ADMIN`: what older kernels ask for BPF and perf instead.
    SysAdmin = 21,
    /// `CAP_PERFMON`: tracepoints and BPF ring buffers.
    Perfmon = 38,
    /// `CAP_BPF`: load BPF programs and maps.
    Bpf = 39,
}

impl Cap {
    /// The capability's name, as `setcap` and `capsh` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Cap::NetAdmin => "cap_net_admin",
            Cap::NetRaw => "cap_net_raw",
            Cap::IpcLock => "cap_ipc_lock",
            Cap::SysAdmin => "cap_sys_admin",
            Cap::Perfmon => "cap_perfmon",
            Cap::Bpf => "cap_bpf",
        }
    }
}

/// The effective capability set of this process, from `/proc/self/status`.
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// The locked-memory limit (`RLIMIT_MEMLOCK`) in bytes; `None` when unlimited (or unreadable, which no
/// Linux process meets).
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid to write.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Which of `needed` the process lacks. CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON, as on kernels
/// before 5.8.
pub fn missing_caps(effective: u64, needed: &[Cap]) -> Vec<Cap> {
    let has = |c: Cap| effective & (1u64 << (c as u32)) != 0;
    needed
        .iter()
        .copied()
        .filter(|&c| !(has(c) || (matches!(c, Cap::Bpf | Cap::Perfmon) && has(Cap::SysAdmin))))
        .collect()
}

/// The interface's index, or `None` when there is no such interface (any more).
pub fn ifindex(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// Numbers from `linux/ethtool.h` (the ioctl ABI, stable since 2.6).
mod ethtool {
    pub const GDRVINFO: u32 = 0x03;
    pub const GSTRINGS: u32 = 0x1b;
    pub const GSTATS: u32 = 0x1d;
    pub const GSSET_INFO: u32 = 0x37;
    /// String set of `ethtool -S`.
    pub const SS_STATS: u32 = 1;
    pub const GSTRING_LEN: usize = 32;
    /// `struct ethtool_drvinfo`: `n_stats` follows the command, five 32-byte strings, 12 reserved bytes and
    /// `n_priv_flags`; four more `u32` end it.
    pub const DRVINFO_N_STATS: usize = 4 + 5 * 32 + 12 + 4;
    pub const DRVINFO_LEN: usize = DRVINFO_N_STATS + 4 * 4;
    /// `struct ethtool_sset_info`: command, reserved, the 64-bit set mask, then one `u32` count per set.
    pub const SSET_INFO_LEN: usize = 4 + 4 + 8 + 4;
    /// `struct ethtool_gstrings` and `struct ethtool_stats` headers.
    pub const GSTRINGS_HEADER: usize = 12;
    pub const GSTATS_HEADER: usize = 8;
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    if let Some(b) = buf.get_mut(at..at + 4) {
        b.copy_from_slice(&v.to_ne_bytes());
    }
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// A socket to hang `SIOCETHTOOL` requests on: any family reaches the device ioctls, and an unbound Unix
/// datagram socket needs no address, port or privilege. It works in the caller's network namespace.
#[derive(Debug)]
pub struct EthtoolSocket(std::os::unix::net::UnixDatagram);

impl EthtoolSocket {
    /// Opens the socket the ethtool ioctls go through.
    pub fn new() -> std::io::Result<EthtoolSocket> {
        std::os::unix::net::UnixDatagram::unbound().map(EthtoolSocket)
    }

    /// One `SIOCETHTOOL` request: `buf` starts with the command word and is what the kernel reads and writes.
    /// Private to this module so that every caller sizes `buf` for what its command makes the kernel write.
    fn request(&self, iface: &str, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let name = iface.as_bytes();
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not an interface name: {iface:?}"),
            ));
        }
        let mut ifr_name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, &s) in ifr_name.iter_mut().zip(name) {
            *d = s as libc::c_char;
        }
        let mut req = libc::ifreq {
            ifr_name,
            ifr_ifru: libc::__c_anonymous_ifr_ifru {
                ifru_data: buf.as_mut_ptr().cast(),
            },
        };
        // SAFETY: `req` is a valid ifreq whose data pointer is `buf`, alive and exclusively borrowed for the
        // call. The kernel reads the command header from `buf` and writes at most as much as the header (or,
        // for GSTRINGS/GSTATS, its own current count) says; the callers size `buf` for that, see
        // `ethtool_stats`.
        let rc = unsafe { libc::ioctl(self.0.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many statistics the driver has (`ethtool -S` lines): `ETHTOOL_GSSET_INFO`, or the older
    /// `ETHTOOL_GDRVINFO` where a driver does not answer it.
    pub fn stats_count(&self, iface: &str) -> std::io::Result<usize> {
        let mut info = [0u8; ethtool::SSET_INFO_LEN];
        put_u32(&mut info, 0, ethtool::GSSET_INFO);
        info[8..16].copy_from_slice(&(1u64 << ethtool::SS_STATS).to_ne_bytes());
        if self.request(iface, &mut info).is_ok() {
            let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or_default());
            return Ok(if mask & (1 << ethtool::SS_STATS) != 0 {
                get_u32(&info, 16) as usize
            } else {
                0
            });
        }
        let mut drv = [0u8; ethtool::DRVINFO_LEN];
        put_u32(&mut drv, 0, ethtool::GDRVINFO);
        self.request(iface, &mut drv)?;
        Ok(get_u32(&drv, ethtool::DRVINFO_N_STATS) as usize)
    }

    /// Room for `count` entries and then some. `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` write the driver's
    /// count *at the time of the call*, not the one we ask for, so a count that grew between two system calls
    /// (channels added with `ethtool -L`) must still fit: the slack makes that need more than a doubling.
    fn room(count: usize) -> usize {
        count.saturating_mul(2).saturating_add(64)
    }

    /// The names of the driver's statistics, in its order.
    pub fn stat_names(&self, iface: &str, count: usize) -> std::io::Result<Vec<String>> {
        let room = Self::room(count);
        let mut buf = vec![0u8; ethtool::GSTRINGS_HEADER + room * ethtool::GSTRING_LEN];
        put_u32(&mut buf, 0, ethtool::GSTRINGS);
        put_u32(&mut buf, 4, ethtool::SS_STATS);
        put_u32(&mut buf, 8, u32::try_from(count).unwrap_or(u32::MAX));
        self.request(iface, &mut buf)?;
        let len = (get_u32(&buf, 8) as usize).min(room);
        Ok(buf
            .get(ethtool::GSTRINGS_HEADER..)
            .unwrap_or_default()
            .chunks_exact(ethtool::GSTRING_LEN)
            .take(len)
            .map(|raw| {
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                String::from_utf8_lossy(raw.get(..end).unwrap_or_default()).into_owned()
            })
            .collect())
    }

    /// The values of the driver's statistics, in the order of [`Self::stat_names`].
    pub fn stat_values(&self, iface: &str, count: usize) -> std::io::Result<Vec<u64>> {
        let room = Self::room(count);
        let mut buf = vec![0u8; ethtool::GSTATS_HEADER + room * 8];
        put_u32(&mut buf, 0, ethtool::GSTATS);
        put_u32(&mut buf, 4, u32::try_from(count).unwrap_or(u32::MAX));
        self.request(iface, &mut buf)?;
        let len = (get_u32(&buf, 4) as usize).min(room);
        Ok(buf
            .get(ethtool::GSTATS_HEADER..)
            .unwrap_or_default()
            .chunks_exact(8)
            .take(len)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()))
            .collect())
    }
}

/// Every ethtool statistic of an interface (what `ethtool -S IFACE` prints), as name and value. Empty when the
/// driver has none (loopback).
pub fn ethtool_stats(iface: &str) -> std::io::Result<Vec<(String, u64)>> {
    let sock = EthtoolSocket::new()?;
    let count = sock.stats_count(iface)?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let names = sock.stat_names(iface, count)?;
    let values = sock.stat_values(iface, names.len())?;
    if values.len() != names.len() {
        return Err(std::io::Error::other(format!(
            "the statistics of {iface} changed while they were read ({} names, {} values)",
            names.len(),
            values.len()
        )));
    }
    Ok(names.into_iter().zip(values).collect())
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    let _ = unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Wall-clock time in ns since the epoch.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns: the probe's clock (`bpf_ktime_get_ns()`).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// What to add to a `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) value to get wall-clock time. Sampled once at
/// start: a later step of the wall clock (NTP) is not followed, which keeps the capture's timestamps
/// monotonic.
pub fn monotonic_to_realtime_offset() -> u64 {
    let before = clock_ns(libc::CLOCK_MONOTONIC);
    let real = clock_ns(libc::CLOCK_REALTIME);
    let after = clock_ns(libc::CLOCK_MONOTONIC);
    real.saturating_sub(before / 2 + after / 2)
}

/// Waits up to `timeout_ms` for `fd` to become readable: both engines sleep on their descriptor (libpcap's
/// socket, the ring buffer) this way between reads, so that a stop is seen within the timeout.
pub fn wait_readable(fd: i32, timeout_ms: i32) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let _ = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
}

/// Waits up to `timeout_ms` for any of `fds` to become readable (an eBPF reader's rings).
pub fn wait_any_readable(fds: &[i32], timeout_ms: i32) {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds.len()` valid pollfds for the duration of the call.
    let _ = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
}

/// Tells the kernel not to hand packet socket `fd` the frames this host sends (`PACKET_IGNORE_OUTGOING`,
/// Linux 4.20): they are then neither delivered nor counted in its statistics.
pub fn ignore_outgoing(fd: i32) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int that lives across the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `iface` is a loopback device (`IFF_LOOPBACK` in its sysfs flags): every frame it sends, it
/// receives again, so a probe on both of its hooks would see each frame twice.
pub fn is_loopback(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & libc::IFF_LOOPBACK as u32 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_arithmetic() {
        let root = u64::MAX;
        assert!(missing_caps(root, &[Cap::NetRaw, Cap::Bpf]).is_empty());
        let net_raw_only = 1 << 13;
        assert_eq!(
            missing_caps(net_raw_only, &[Cap::NetRaw, Cap::Bpf, Cap::Perfmon]),
            vec![Cap::Bpf, Cap::Perfmon]
        );
        let sys_admin = (1 << 21) | (1 << 12);
        assert!(missing_caps(sys_admin, &[Cap::NetAdmin, Cap::Bpf, Cap::Perfmon]).is_empty());
    }

    #[test]
    fn loopback_exists_and_nonsense_does_not() {
        assert_eq!(ifindex("lo"), Some(1));
        assert_eq!(ifindex("no-such-if0"), None);
        assert_eq!(ifindex("bad\0name"), None);
    }

    #[test]
    fn ethtool_ioctl_answers_for_what_exists() {
        // Loopback has no driver statistics: an empty list, not an error.
        assert_eq!(ethtool_stats("lo").unwrap(), Vec::new());
        let e = ethtool_stats("no-such-if0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        // Names the kernel could not take are refused before any system call.
        for bad in ["", "bad\0name", "a-name-of-sixteen"] {
            let e = ethtool_stats(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn clocks_are_sane() {
        let off = monotonic_to_realtime_offset();
        // After 2020 and the offset places "now" within a second of the wall clock.
        assert!(now_ns() > 1_577_836_800_000_000_000);
        let mono_now = clock_ns(libc::CLOCK_MONOTONIC);
        assert!((off + mono_now).abs_diff(now_ns()) < 1_000_000_000);
    }
}
