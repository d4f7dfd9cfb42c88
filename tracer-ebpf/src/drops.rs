//! The `skb:kfree_skb` tracepoint program: counts the kernel's packet drops per ethertype and drop reason,
//! for the ethertypes RoCE and PFC travel in. It sees the tracepoint record only, not the packet, so an
//! IPv4/IPv6 drop is counted whether or not it was RoCEv2: reading the UDP port would mean reading skb data
//! from a tracepoint, which this program does not do.

use aya_ebpf::{
    macros::{map, tracepoint},
    maps::{Array, PerCpuHashMap},
    programs::TracePointContext,
};
use tracer_common::{DROP_PROTOCOLS, DropConfig, DropKey, MAX_DROP_KEYS, NO_REASON};

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
