//! Tracepoint format files (`events/<system>/<event>/format` in tracefs): where each field of a record
//! sits and how the kernel names its values. Record layouts differ between kernels, so the tracer reads
//! them at run time rather than compiling them in.

use std::collections::BTreeMap;

/// What is wrong with a tracepoint format file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A field the tracer needs is not in the record.
    #[error("no field {0:?}")]
    MissingField(String),
    /// A field has another size than the tracer reads.
    #[error("field {name:?} is {size} bytes, expected {expected}")]
    FieldSize {
        /// The field.
        name: &'static str,
        /// Its size in this kernel.
        size: u32,
        /// The size the tracer reads.
        expected: u32,
    },
    /// The file has no event id.
    #[error("no `ID:` line")]
    MissingId,
}

/// One `field:` line of a format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name, without an array suffix.
    pub name: String,
    /// Byte offset in the record.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Whether an integer field is signed.
    pub signed: bool,
    /// Declared as an array (`unsigned char srcaddr[28]`): bytes, not a number.
    pub array: bool,
    /// Declared `__data_loc`: a locator of bytes stored after the fixed fields (a string).
    pub data_loc: bool,
}

/// What the tracer needs from `skb/kfree_skb/format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfreeSkbFormat {
    /// Offset of the 2-byte `protocol` (the ethertype).
    pub protocol_offset: u32,
    /// Offset of the 8-byte `skbaddr`, `None` when the record lacks it (then IP drops cannot be told apart).
    pub skbaddr_offset: Option<u32>,
    /// `None` on kernels before drop reasons (5.17).
    pub reason_offset: Option<u32>,
    /// The reason names of the `__print_symbolic` list in the print format, by value.
    pub reasons: BTreeMap<u32, String>,
}

/// Reads the `field:` lines of a format file. Lines that do not parse are skipped: the format of the
/// format file is informal.
pub fn parse_fields(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v.trim() == "1";
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        let Some(decl) = decl else {
            continue;
        };
        // The name is the declaration's last word, without an array suffix (`char name[16]`).
        let last = decl.split_whitespace().last();
        let name = last.map(|n| n.split('[').next().unwrap_or(n).trim_start_matches('*'));
        let data_loc = decl.starts_with("__data_loc") || decl.starts_with("__rel_loc");
        let array = !data_loc && last.is_some_and(|n| n.contains('['));
        if let (Some(name), Some(offset), Some(size)) = (name, offset, size)
            && !name.is_empty()
        {
            out.push(Field {
                name: name.to_string(),
                offset,
                size,
                signed,
                array,
                data_loc,
            });
        }
    }
    out
}

/// The event id (`ID: 1520`), which is also the `common_type` at the start of each of its records.
pub fn parse_id(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("ID:"))
        .and_then(|v| v.trim().parse().ok())
}

fn parse_value(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v
            .parse::<u64>()
            .ok()
            .or_else(|| v.parse::<i64>().ok().map(|x| x as u64)),
    }
}

/// The `{ value, "NAME" }` pairs of one `__print_symbolic(` list, from just after its field argument to
/// its closing parenthesis; returns the pairs and the rest of the text.
fn symbolic_pairs(mut rest: &str) -> (BTreeMap<u64, String>, &str) {
    let mut out = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if !rest.starts_with('{') {
            let end = rest.find(')').map_or(rest.len(), |i| i + 1);
            return (out, rest.get(end..).unwrap_or(""));
        }
        let Some(close) = rest.find('}') else {
            return (out, "");
        };
        let pair = rest.get(1..close).unwrap_or("");
        rest = rest.get(close + 1..).unwrap_or("");
        let Some((value, name)) = pair.split_once(',') else {
            continue;
        };
        let name = name.trim().trim_matches('"');
        if let Some(v) = parse_value(value)
            && !name.is_empty()
        {
            out.insert(v, name.to_string());
        }
    }
}

/// Reads the `{ value, "NAME" }` pairs of the first `__print_symbolic(` in the print format.
pub fn parse_symbolic(text: &str) -> BTreeMap<u32, String> {
    let Some(start) = text.find("__print_symbolic(") else {
        return BTreeMap::new();
    };
    let rest = text.get(start + "__print_symbolic(".len()..).unwrap_or("");
    let rest = rest.split_once(',').map_or("", |(_, r)| r);
    symbolic_pairs(rest)
        .0
        .into_iter()
        .filter_map(|(v, n)| Some((u32::try_from(v).ok()?, n)))
        .collect()
}

/// Every `__print_symbolic(REC->field, ...)` of the print format, by field name: the names the kernel gives
/// the field's values (`qp_type` 2 is `RC`, `event` 9 is `ESTABLISHED`).
pub fn parse_symbolics(text: &str) -> BTreeMap<String, BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some(start) = rest.find("__print_symbolic(") {
        rest = rest.get(start + "__print_symbolic(".len()..).unwrap_or("");
        let Some((arg, after)) = rest.split_once(',') else {
            break;
        };
        let field = arg
            .trim()
            .trim_start_matches('(')
            .trim_start_matches("REC->")
            .trim_end_matches(')')
            .to_string();
        let (pairs, next) = symbolic_pairs(after);
        if !pairs.is_empty() {
            out.entry(field).or_insert(pairs);
        }
        rest = next;
    }
    out
}

/// Parses `events/skb/kfree_skb/format`.
pub fn parse_kfree_skb(text: &str) -> Result<KfreeSkbFormat, FormatError> {
    let fields = parse_fields(text);
    let find = |name: &str| fields.iter().find(|f| f.name == name);
    let protocol = find("protocol").ok_or(FormatError::MissingField("protocol".into()))?;
    if protocol.size != 2 {
        return Err(FormatError::FieldSize {
            name: "protocol",
            size: protocol.size,
            expected: 2,
        });
    }
    let reason_offset = match find("reason") {
        Some(f) if f.size == 4 => Some(f.offset),
        Some(f) => {
            return Err(FormatError::FieldSize {
                name: "reason",
                size: f.size,
                expected: 4,
            });
        }
        None => None,
    };
    Ok(KfreeSkbFormat {
        protocol_offset: protocol.offset,
        skbaddr_offset: find("skbaddr").filter(|f| f.size == 8).map(|f| f.offset),
        reason_offset,
        reasons: parse_symbolic(text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of a 6.8+ kernel (with `rx_sk`), abridged reason list.
    const FORMAT_6_8: &str = r#"name: kfree_skb
ID: 1520
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:void * skbaddr;	offset:8;	size:8;	signed:0;
	field:void * location;	offset:16;	size:8;	signed:0;
	field:void * rx_sk;	offset:24;	size:8;	signed:0;
	field:unsigned short protocol;	offset:32;	size:2;	signed:0;
	field:enum skb_drop_reason reason;	offset:36;	size:4;	signed:0;

print fmt: "skbaddr=%p rx_sk=%p protocol=%u location=%pS reason: %s", REC->skbaddr, REC->rx_sk, REC->protocol, REC->location, __print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, { 0x1b, "OTHER_HEX" }, { 77, "IPV6DISABLED" })
"#;

    /// A 5.10-era layout: no reason at all.
    const FORMAT_5_10: &str = "name: kfree_skb\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;\n\
        \tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:unsigned short protocol;\toffset:24;\tsize:2;\tsigned:0;\n\n\
        print fmt: \"skbaddr=%p protocol=%u location=%p\", REC->skbaddr, REC->protocol, REC->location\n";

    #[test]
    fn offsets_and_reasons_of_a_recent_kernel() {
        let f = parse_kfree_skb(FORMAT_6_8).unwrap();
        assert_eq!(f.protocol_offset, 32);
        assert_eq!(f.reason_offset, Some(36));
        assert_eq!(f.reasons.get(&3).map(String::as_str), Some("NO_SOCKET"));
        assert_eq!(f.reasons.get(&0x1b).map(String::as_str), Some("OTHER_HEX"));
        assert_eq!(f.reasons.get(&77).map(String::as_str), Some("IPV6DISABLED"));
        assert_eq!(f.reasons.len(), 4);
        let fields = parse_fields(FORMAT_6_8);
        assert_eq!(fields.len(), 9);
        assert!(fields.iter().any(|f| f.name == "skbaddr" && f.offset == 8));
    }

    #[test]
    fn old_kernel_without_reasons() {
        let f = parse_kfree_skb(FORMAT_5_10).unwrap();
        assert_eq!((f.protocol_offset, f.reason_offset), (24, None));
        assert!(f.reasons.is_empty());
    }

    #[test]
    fn broken_formats_are_errors() {
        assert_eq!(
            parse_kfree_skb("format:\n"),
            Err(FormatError::MissingField("protocol".into()))
        );
        let wide = FORMAT_6_8.replace(
            "protocol;\toffset:32;\tsize:2",
            "protocol;\toffset:32;\tsize:4",
        );
        assert!(matches!(
            parse_kfree_skb(&wide),
            Err(FormatError::FieldSize {
                name: "protocol",
                ..
            })
        ));
        // Garbage never panics.
        let _ = parse_kfree_skb("field:;offset:x;size:\u{0}\n{ , }__print_symbolic({ 1 }");
    }

    #[test]
    fn field_kinds_and_ids() {
        let text = "name: x\nID: 77\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
            \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n\
            \tfield:char comm[16];\toffset:16;\tsize:16;\tsigned:0;\n";
        assert_eq!(parse_id(text), Some(77));
        let f = parse_fields(text);
        assert_eq!(f.len(), 4);
        assert!(f[1].data_loc && !f[1].array && f[1].name == "filename");
        assert!(f[2].signed && !f[2].array);
        assert!(f[3].array && f[3].name == "comm" && f[3].size == 16);
        assert_eq!(parse_id("ID: x"), None);
    }

    #[test]
    fn symbolic_lists_per_field() {
        let text = r#"print fmt: "a=%s b=%s", __print_symbolic(REC->event, { 0, "ADDR_RESOLVED" }, { 9, "ESTABLISHED" }), __print_symbolic(REC->qp_type, { 0x2, "RC" }, { 4, "UD" })"#;
        let s = parse_symbolics(text);
        assert_eq!(s["event"][&9], "ESTABLISHED");
        assert_eq!(s["event"].len(), 2);
        assert_eq!(s["qp_type"][&2], "RC");
        assert_eq!(s["qp_type"][&4], "UD");
        // Garbage never panics.
        let _ = parse_symbolics("__print_symbolic(REC->x, { 1, \"A\" ");
        let _ = parse_symbolics("__print_symbolic(");
    }
}
