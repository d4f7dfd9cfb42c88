//! The `skb:kfree_skb` tracepoint program: counts the kernel's packet drops per ethertype and drop reason,
//! for the ethertypes RoCE and PFC travel in. The tracepoint record gives the ethertype; for IPv4 and IPv6
//! the program also reads the dropped packet's IP and UDP headers out of the `struct sk_buff` (at offsets
//! userspace found in the kernel's BTF) and counts only RoCEv2, UDP to port 4791. Without those offsets
//! every IP drop is counted, as userspace then says.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use aya_ebpf::{
    macros::{map, tracepoint},
    maps::{Array, PerCpuHashMap},
    programs::TracePointContext,
};
use tracer_common::{
    DROP_PROTOCOLS, DropConfig, DropKey, MAX_DROP_KEYS, NO_LAYOUT, NO_REASON, ROCEV2_UDP_PORT,
};

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: u8 = 17;

#[map]
static DROP_CONFIG: Array<DropConfig> = Array::with_max_entries(1, 0);

#[map]
static DROPS: PerCpuHashMap<DropKey, u64> = PerCpuHashMap::with_max_entries(MAX_DROP_KEYS, 0);

#[tracepoint]
pub fn tracer_kfree_skb(ctx: TracePointContext) -> u32 {
    count(&ctx);
    0
}

#[inline(always)]
fn count(ctx: &TracePointContext) {
    let Some(config) = DROP_CONFIG.get(0) else {
        return;
    };
    // SAFETY: the offset comes from the event's own format file, so the read stays inside the record; a
    // bad offset makes the helper fail rather than read elsewhere.
    let Ok(protocol) = (unsafe { ctx.read_at::<u16>(config.protocol_offset as usize) }) else {
        return;
    };
    if !DROP_PROTOCOLS.contains(&protocol) {
        return;
    }
    if (protocol == ETHERTYPE_IPV4 || protocol == ETHERTYPE_IPV6)
        && config.skb_head != NO_LAYOUT
        && !is_rocev2(ctx, config, protocol == ETHERTYPE_IPV6)
    {
        return;
    }
    let reason = if config.reason_offset == NO_REASON {
        0
    } else {
        // SAFETY: as above.
        unsafe { ctx.read_at::<u32>(config.reason_offset as usize) }.unwrap_or(0)
    };
    let key = DropKey {
        protocol,
        _pad: 0,
        reason,
    };
    match DROPS.get_ptr_mut(key) {
        // SAFETY: a per-CPU value, only this CPU touches it while the program runs.
        Some(p) => unsafe { *p += 1 },
        None => {
            // A full map loses the new key's count; existing keys keep counting.
            let _ = DROPS.insert(key, 1u64, 0);
        }
    }
}

/// Whether the dropped IP packet is UDP to the RoCEv2 port. Every read goes through
/// `bpf_probe_read_kernel`, so a buffer whose headers were never set (or are gone) reads as "no" rather
/// than faulting. IPv6 extension headers are not walked: RoCEv2 does not use them.
#[inline(always)]
fn is_rocev2(ctx: &TracePointContext, config: &DropConfig, v6: bool) -> bool {
    // SAFETY: the offset comes from the event's format file, as above.
    let Ok(skb) = (unsafe { ctx.read_at::<u64>(config.skbaddr_offset as usize) }) else {
        return false;
    };
    // SAFETY (these reads): bpf_probe_read_kernel checks the address; a bad one fails the helper.
    let Ok(head) =
        (unsafe { bpf_probe_read_kernel((skb + u64::from(config.skb_head)) as *const u64) })
    else {
        return false;
    };
    let Ok(network) = (unsafe {
        bpf_probe_read_kernel((skb + u64::from(config.skb_network_header)) as *const u16)
    }) else {
        return false;
    };
    // The kernel's marker for a header offset never set.
    if network == u16::MAX {
        return false;
    }
    let ip = head + u64::from(network);
    let udp = if v6 {
        let Ok(next) = (unsafe { bpf_probe_read_kernel((ip + 6) as *const u8) }) else {
            return false;
        };
        if next != IPPROTO_UDP {
            return false;
        }
        ip + 40
    } else {
        let Ok(first) = (unsafe { bpf_probe_read_kernel(ip as *const u8) }) else {
            return false;
        };
        let Ok(proto) = (unsafe { bpf_probe_read_kernel((ip + 9) as *const u8) }) else {
            return false;
        };
        if proto != IPPROTO_UDP {
            return false;
        }
        ip + u64::from(first & 0x0f) * 4
    };
    let Ok(port) = (unsafe { bpf_probe_read_kernel((udp + 2) as *const [u8; 2]) }) else {
        return false;
    };
    u16::from_be_bytes(port) == ROCEV2_UDP_PORT
}
