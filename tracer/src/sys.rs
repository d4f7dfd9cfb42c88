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
    NetAdmin = 12,
    NetRaw = 13,
    SysAdmin = 21,
    Perfmon = 38,
    Bpf = 39,
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::NetAdmin => "cap_net_admin",
            Cap::NetRaw => "cap_net_raw",
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

/// What to add to a `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) value to get wall-clock time. Sampled once at
/// start: a later step of the wall clock (NTP) is not followed, which keeps the capture's timestamps
/// monotonic.
pub fn monotonic_to_realtime_offset() -> u64 {
    let before = clock_ns(libc::CLOCK_MONOTONIC);
    let real = clock_ns(libc::CLOCK_REALTIME);
    let after = clock_ns(libc::CLOCK_MONOTONIC);
    real.saturating_sub(before / 2 + after / 2)
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
    fn clocks_are_sane() {
        let off = monotonic_to_realtime_offset();
        // After 2020 and the offset places "now" within a second of the wall clock.
        assert!(now_ns() > 1_577_836_800_000_000_000);
        let mono_now = clock_ns(libc::CLOCK_MONOTONIC);
        assert!((off + mono_now).abs_diff(now_ns()) < 1_000_000_000);
    }
}
