//! Where `struct sk_buff` keeps the packet, read from the kernel's own type information (BTF).
//!
//! The `skb:kfree_skb` tracepoint gives the dropped buffer's address and its ethertype, not its headers. To
//! count RoCEv2 drops rather than every IPv4/IPv6 drop, the drop counter reads the UDP destination port
//! from the packet itself, for which it needs two offsets inside `struct sk_buff`: `head` (the buffer's
//! start) and `network_header` (the IP header's offset from it). They change between kernels and builds,
//! so they are looked up in `/sys/kernel/btf/vmlinux` at start. This is a minimal reader of the BTF format
//! for that one question; aya's own BTF type does not expose struct members.

use std::collections::HashMap;

/// The byte offsets inside `struct sk_buff` that the drop counter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkbLayout {
    /// Offset of `unsigned char *head`.
    pub head: u32,
    /// Offset of the 16-bit `network_header` (relative to `head`).
    pub network_header: u32,
}

/// Why the layout could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// The file does not start with BTF's magic number.
    #[error("not BTF (magic {0:#06x})")]
    Magic(u16),
    /// The data ends inside the part named.
    #[error("BTF cut short: {0}")]
    Truncated(&'static str),
    /// A type of a kind this reader does not know, so the types after it cannot be found.
    #[error("BTF type {0} has an unknown kind {1}")]
    UnknownKind(u32, u32),
    /// The kernel has no `struct sk_buff` in its BTF.
    #[error("no struct sk_buff in the kernel's BTF")]
    NoSkBuff,
    /// `struct sk_buff` lacks a member the drop counter reads.
    #[error("struct sk_buff has no member {0} of the expected type")]
    NoMember(&'static str),
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;

/// One type: its kind, name, size (or referenced type) and, for structs and unions, its members as
/// (name, type, bit offset).
struct Type {
    kind: u32,
    name: u32,
    size_or_type: u32,
    members: Vec<(u32, u32, u32)>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    swap: bool,
}

impl Reader<'_> {
    fn u32_at(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.swap {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
}

/// Reads the sk_buff layout from the raw contents of a BTF file (`/sys/kernel/btf/vmlinux`).
pub fn skb_layout(bytes: &[u8]) -> Result<SkbLayout, BtfError> {
    let magic = bytes
        .get(..2)
        .map(|m| u16::from_le_bytes([m[0], m[1]]))
        .ok_or(BtfError::Truncated("header"))?;
    let swap = match magic {
        0xeb9f => false,
        0x9feb => true,
        other => return Err(BtfError::Magic(other)),
    };
    let r = Reader { bytes, swap };
    let field = |at| r.u32_at(at).ok_or(BtfError::Truncated("header"));
    let hdr_len = field(4)? as usize;
    let (type_off, type_len) = (field(8)? as usize, field(12)? as usize);
    let (str_off, str_len) = (field(16)? as usize, field(20)? as usize);
    let span = |off: usize, len: usize| {
        let start = hdr_len.checked_add(off)?;
        Some(start..start.checked_add(len)?)
    };
    let types_at = span(type_off, type_len).ok_or(BtfError::Truncated("type section"))?;
    let strings_at = span(str_off, str_len).ok_or(BtfError::Truncated("string section"))?;
    let strings = bytes
        .get(strings_at)
        .ok_or(BtfError::Truncated("string section"))?;
    if bytes.get(types_at.clone()).is_none() {
        return Err(BtfError::Truncated("type section"));
    }
    let name = |off: u32| -> &[u8] {
        let tail = strings.get(off as usize..).unwrap_or_default();
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        &tail[..end]
    };

    // Type ids count from 1 (0 is void), in file order.
    let mut types: Vec<Type> = vec![Type {
        kind: 0,
        name: 0,
        size_or_type: 0,
        members: Vec::new(),
    }];
    let mut at = types_at.start;
    while at < types_at.end {
        let word = |i: usize| r.u32_at(at + 4 * i).ok_or(BtfError::Truncated("type"));
        let (name_off, info, size_or_type) = (word(0)?, word(1)?, word(2)?);
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let bitfields = info >> 31 == 1;
        at += 12;
        let extra = match kind {
            1 | 14 | 17 => 4,
            3 => 12,
            4 | 5 | 15 | 19 => 12 * vlen,
            6 | 13 => 8 * vlen,
            2 | 7..=12 | 16 | 18 => 0,
            other => return Err(BtfError::UnknownKind(types.len() as u32, other)),
        };
        let mut members = Vec::new();
        if kind == KIND_STRUCT || kind == KIND_UNION {
            for m in 0..vlen {
                let base = at + 12 * m;
                let get = |i: usize| r.u32_at(base + 4 * i).ok_or(BtfError::Truncated("member"));
                let offset = get(2)?;
                // With the kind flag set, the top 8 bits hold a bitfield's size and the rest the offset.
                let bits = if bitfields {
                    offset & 0x00ff_ffff
                } else {
                    offset
                };
                members.push((get(0)?, get(1)?, bits));
            }
        }
        at += extra;
        types.push(Type {
            kind,
            name: name_off,
            size_or_type,
            members,
        });
    }

    let resolve = |mut id: u32| -> Option<&Type> {
        for _ in 0..32 {
            let t = types.get(id as usize)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(t),
            }
        }
        None
    };
    let skb = types
        .iter()
        .find(|t| t.kind == KIND_STRUCT && name(t.name) == b"sk_buff")
        .ok_or(BtfError::NoSkBuff)?;
    // Members by name with their bit offsets, through anonymous structs and unions (newer kernels keep the
    // header offsets in a `struct_group`).
    let mut found: HashMap<&[u8], (u32, &Type)> = HashMap::new();
    let mut stack = vec![(skb, 0u32)];
    let mut visited = 0;
    while let Some((t, base)) = stack.pop() {
        visited += 1;
        if visited > 1024 {
            break;
        }
        for &(m_name, m_type, bits) in &t.members {
            let Some(mt) = resolve(m_type) else { continue };
            let offset = base.saturating_add(bits);
            let n = name(m_name);
            if n.is_empty() {
                if mt.kind == KIND_STRUCT || mt.kind == KIND_UNION {
                    stack.push((mt, offset));
                }
            } else {
                found.entry(n).or_insert((offset, mt));
            }
        }
    }
    let byte_offset = |member: &'static str, ok: &dyn Fn(&Type) -> bool| {
        found
            .get(member.as_bytes())
            .filter(|(bits, t)| bits % 8 == 0 && ok(t))
            .map(|(bits, _)| bits / 8)
            .ok_or(BtfError::NoMember(member))
    };
    Ok(SkbLayout {
        head: byte_offset("head", &|t| t.kind == KIND_PTR)?,
        network_header: byte_offset("network_header", &|t| {
            t.kind == KIND_INT && t.size_or_type == 2
        })?,
    })
}

/// The running kernel's layout, from `/sys/kernel/btf/vmlinux`.
pub fn running_kernel() -> Result<SkbLayout, String> {
    let path = "/sys/kernel/btf/vmlinux";
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    skb_layout(&bytes).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Says on the terminal itself, past the test harness's capture of a passing test's output, that a check
    /// did not run.
    fn cannot_run_here(why: &str) {
        testkit::not_run_here(&format!(
            "btf::the_running_kernel_has_a_plausible_layout: {why}"
        ));
    }

    /// A little BTF blob: `struct sk_buff { union { struct { u16 network_header; }; }; char *head; }`, the
    /// shape of the newer kernels' struct_group, with the members at known places.
    fn blob() -> Vec<u8> {
        let strings = b"\0sk_buff\0network_header\0head\0u16\0char\0";
        let off = |s: &str| {
            let pat = format!("\0{s}\0");
            strings
                .windows(pat.len())
                .position(|w| w == pat.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut t: Vec<u32> = Vec::new();
        // 1: u16 (INT, size 2, encoding word)
        t.extend([off("u16"), KIND_INT << 24, 2, 16]);
        // 2: char (INT, size 1)
        t.extend([off("char"), KIND_INT << 24, 1, 8]);
        // 3: char * (PTR to 2)
        t.extend([0, KIND_PTR << 24, 2]);
        // 4: const u16 (to check that qualifiers are looked through)
        t.extend([0, KIND_CONST << 24, 1]);
        // 5: anonymous struct { network_header at bit 16 }
        t.extend([0, (KIND_STRUCT << 24) | 1, 4, off("network_header"), 4, 16]);
        // 6: anonymous union { struct 5 }
        t.extend([0, (KIND_UNION << 24) | 1, 4, 0, 5, 0]);
        // 7: struct sk_buff { union 6 at bit 64; head at bit 192 }
        t.extend([
            off("sk_buff"),
            (KIND_STRUCT << 24) | 2,
            32,
            0,
            6,
            64,
            off("head"),
            3,
            192,
        ]);
        let types: Vec<u8> = t.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9fu16.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn members_are_found_through_anonymous_unions_and_structs() {
        assert_eq!(
            skb_layout(&blob()),
            Ok(SkbLayout {
                head: 24,
                network_header: 10
            })
        );
    }

    #[test]
    fn damaged_btf_is_an_error_never_a_panic() {
        let good = blob();
        for cut in 0..good.len() {
            assert!(skb_layout(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(skb_layout(b"\x00\x00rest"), Err(BtfError::Magic(0)));
        let mut odd = good.clone();
        // An unknown kind in the first type's info word.
        odd[24 + 7] = 0x1f;
        assert!(matches!(skb_layout(&odd), Err(BtfError::UnknownKind(1, _))));
        let mut flipped = good;
        for b in flipped.iter_mut().skip(24) {
            *b ^= 0x5a;
        }
        let _ = skb_layout(&flipped);
    }

    /// On the running kernel, when it has BTF: the offsets are plausible, and `head` is where `bpftool`'s raw
    /// dump puts it (`network_header` sits in an anonymous member there, whose offset adds up).
    #[test]
    fn the_running_kernel_has_a_plausible_layout() {
        let Ok(bytes) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            cannot_run_here("this kernel exposes no BTF at /sys/kernel/btf/vmlinux");
            return;
        };
        let layout = skb_layout(&bytes).expect("the kernel's own sk_buff");
        assert_eq!(layout.head % 8, 0, "{layout:?}");
        assert_eq!(layout.network_header % 2, 0, "{layout:?}");
        assert!(
            layout.head < 512 && layout.network_header < 512,
            "{layout:?}"
        );
        let Ok(raw) = std::process::Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "raw",
            ])
            .output()
        else {
            cannot_run_here("no bpftool to compare sk_buff's offsets with");
            return;
        };
        let text = String::from_utf8_lossy(&raw.stdout);
        let skb = text
            .split("\n[")
            .find(|t| t.contains("STRUCT 'sk_buff' size="))
            .expect("sk_buff in the raw dump");
        let head_bits = skb
            .lines()
            .find(|l| l.trim_start().starts_with("'head' "))
            .and_then(|l| l.split("bits_offset=").nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
            .expect("head in sk_buff");
        assert_eq!(layout.head * 8, head_bits);
    }
}
