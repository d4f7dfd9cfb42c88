use core::fmt;

/// A capture's data-link type, as registered with tcpdump.org (`LINKTYPE_*`).
///
/// An open newtype rather than an enum: a file with a link type we do not decode must still be readable, so that the
/// caller can say which one it was instead of refusing the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u16);

impl LinkType {
    /// BSD loopback: a 4-byte host-order protocol family before the IP header.
    pub const NULL: LinkType = LinkType(0);
    /// IEEE 802.3 Ethernet, the link type of almost every RoCEv2 capture.
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IPv4 or IPv6, told apart by the version nibble.
    pub const RAW: LinkType = LinkType(101);
    /// IEEE 802.11 without radio headers.
    pub const IEEE802_11: LinkType = LinkType(105);
    /// OpenBSD loopback: like [`LinkType::NULL`] but network byte order.
    pub const LOOP: LinkType = LinkType(108);
    /// Linux "cooked" capture v1, what `tcpdump -i any` writes.
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Endace Extensible Record Format; InfiniBand sniffers use it for native IB frames.
    pub const ERF: LinkType = LinkType(197);
    /// Raw IPv4 only.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6 only.
    pub const IPV6: LinkType = LinkType(229);
    /// IP over InfiniBand (RFC 4391 encapsulation header first).
    pub const IPOIB: LinkType = LinkType(242);
    /// Native InfiniBand, starting with the Local Route Header.
    pub const INFINIBAND: LinkType = LinkType(247);
    /// Linux netlink messages.
    pub const NETLINK: LinkType = LinkType(253);
    /// Linux "cooked" capture v2, what newer `tcpdump -i any` writes.
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// A short human name, or `"unknown"`: error messages and summaries print it next to the number.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::NULL => "BSD loopback",
            LinkType::ETHERNET => "Ethernet",
            LinkType::RAW => "raw IP",
            LinkType::IEEE802_11 => "IEEE 802.11",
            LinkType::LOOP => "OpenBSD loopback",
            LinkType::LINUX_SLL => "Linux cooked (SLL)",
            LinkType::ERF => "ERF",
            LinkType::IPV4 => "raw IPv4",
            LinkType::IPV6 => "raw IPv6",
            LinkType::IPOIB => "IP over InfiniBand",
            LinkType::INFINIBAND => "InfiniBand",
            LinkType::NETLINK => "Linux netlink",
            LinkType::LINUX_SLL2 => "Linux cooked v2 (SLL2)",
            _ => "unknown",
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_display() {
        assert_eq!(LinkType::ETHERNET.name(), "Ethernet");
        assert_eq!(LinkType(242), LinkType::IPOIB);
        assert_eq!(LinkType(9999).name(), "unknown");
        assert_eq!(LinkType::ERF.to_string(), "ERF (197)");
    }
}
