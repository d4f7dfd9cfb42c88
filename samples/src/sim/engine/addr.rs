//! Who has which address. Host `h` (in the scenario's order, from 0) is 10.0.0.`h+1` with a MAC to match, and a
//! switch port has a MAC of its own: fixed rules rather than choices, so a reader of a sample can tell its
//! hosts apart at a glance, and samples/README.md can state them once.

/// Host `h` is 10.0.0.1 + h: the samples' small worlds read as 10.0.0.1, 10.0.0.2, ..., and a world of
/// hundreds of hosts carries on into 10.0.1.0 instead of overflowing the last byte.
pub(super) fn host_ip(h: usize) -> [u8; 4] {
    let [_, a, b, c] = host_number(h).to_be_bytes();
    [10, a, b, c]
}
/// Byte 3 stays 0 so that no host's MAC meets a switch port's (`port_mac` sets it to 1).
pub(super) fn host_mac(h: usize) -> [u8; 6] {
    let [_, a, b, c] = host_number(h).to_be_bytes();
    [0x02, 0, a, 0, b, c]
}
/// One more than the host's index, within the 24 bits the addresses have room for.
fn host_number(h: usize) -> u32 {
    (h as u32).wrapping_add(1) & 0x00ff_ffff
}
/// Byte 3 is 1, which no host's MAC has, and the port's index follows.
pub(super) fn port_mac(port: usize) -> [u8; 6] {
    [0x02, 0, 0, 1, (port >> 8) as u8, (port & 0xff) as u8]
}
/// Dotted quad, as the truth writes addresses.
pub(super) fn fmt_ip(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addresses_stay_distinct_past_255_hosts() {
        assert_eq!(host_ip(0), [10, 0, 0, 1]);
        assert_eq!(host_ip(254), [10, 0, 0, 255]);
        assert_eq!(host_ip(255), [10, 0, 1, 0]);
        assert_eq!(host_mac(0), [0x02, 0, 0, 0, 0, 1]);
        let ips: std::collections::HashSet<_> = (0..70_000).map(host_ip).collect();
        let macs: std::collections::HashSet<_> = (0..70_000).map(host_mac).collect();
        assert_eq!((ips.len(), macs.len()), (70_000, 70_000));
        assert!((0..1024).all(|p| !macs.contains(&port_mac(p))));
    }
}
