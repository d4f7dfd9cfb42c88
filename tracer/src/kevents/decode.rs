//! The recorder's ring records turned into events: numbers by the kernel's names for them, socket addresses
//! as addresses, text as text.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use roce_capture::blocks::records::Event;
use tracer_common::kevents::{BYTES_LEN, MAX_FIELDS, TRACE_EVENT_LEN};

use super::spec::Resolved;

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(bytes.get(..end).unwrap_or(bytes)).into_owned()
}

/// A `struct sockaddr_in` / `sockaddr_in6` as the kernel keeps it (family in host order, port and address
/// in network order); `None` for an unset one.
pub fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match family {
        2 => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(Ipv4Addr::from(a).into(), port))
        }
        10 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let ip = Ipv6Addr::from(a);
            // RoCE addresses IPv4 hosts through IPv4-mapped GIDs; show those as IPv4 so they match the
            // packets' addresses.
            Some(SocketAddr::new(
                ip.to_ipv4_mapped().map_or(ip.into(), Into::into),
                port,
            ))
        }
        _ => None,
    }
}

/// Decodes a ring record of the recorder (a [`tracer_common::kevents::TraceEvent`], read by offset rather than by pointer
/// cast). `offset_ns` turns its monotonic time into wall-clock time.
pub fn decode_event(traced: &[Resolved], rec: &[u8], offset_ns: u64) -> Option<Event> {
    if rec.len() < TRACE_EVENT_LEN {
        return None;
    }
    let u64_at = |at: usize| Some(u64::from_ne_bytes(rec.get(at..at + 8)?.try_into().ok()?));
    let ts = u64_at(0)?;
    let pid_tgid = u64_at(8)?;
    let slot = u32::from_ne_bytes(rec.get(16..20)?.try_into().ok()?);
    let t = traced.get(slot as usize)?;
    let mut fields = serde_json::Map::new();
    for (i, f) in t.ints.iter().enumerate() {
        let raw = u64_at(40 + 8 * i)?;
        let v = if f.big_endian {
            match f.size {
                2 => u64::from((raw as u16).swap_bytes()),
                4 => u64::from((raw as u32).swap_bytes()),
                8 => raw.swap_bytes(),
                _ => raw,
            }
        } else {
            raw
        };
        let value = if f.signed {
            serde_json::Value::from(v as i64)
        } else {
            serde_json::Value::from(v)
        };
        fields.insert(f.name.clone(), value);
        if let Some(name) = f.symbols.get(&v) {
            fields.insert(format!("{}_name", f.name), name.clone().into());
        }
    }
    for (i, f) in t.bytes.iter().enumerate() {
        let at = 40 + 8 * MAX_FIELDS + BYTES_LEN * i;
        let b = rec.get(at..at + f.size.min(BYTES_LEN))?;
        let value = if f.sockaddr {
            sockaddr(b).map_or(serde_json::Value::Null, |a| a.to_string().into())
        } else {
            text(b).into()
        };
        fields.insert(f.name.clone(), value);
    }
    Some(Event {
        ts_ns: ts.saturating_add(offset_ns),
        tracepoint: t.name.clone(),
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm: text(rec.get(24..40)?),
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses() {
        let mut v4 = [0u8; 28];
        v4[..2].copy_from_slice(&2u16.to_ne_bytes());
        v4[2..4].copy_from_slice(&4791u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(sockaddr(&v4).unwrap().to_string(), "10.0.0.7:4791");
        let mut v6 = [0u8; 28];
        v6[..2].copy_from_slice(&10u16.to_ne_bytes());
        v6[8..24].copy_from_slice(&"::ffff:10.0.0.9".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(sockaddr(&v6).unwrap().to_string(), "10.0.0.9:0");
        assert_eq!(sockaddr(&[0u8; 28]), None);
        assert_eq!(sockaddr(&[2, 0]), None);
    }
}
