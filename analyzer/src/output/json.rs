//! JSON on standard output with the C1 controls escaped too.
//!
//! JSON requires escaping only U+0000 to U+001F, so serde_json writes U+0080 to U+009F as their UTF-8 bytes;
//! some terminals obey those as controls (U+009B starts a sequence), and JSON is often read on a terminal
//! before it is piped anywhere. These writers escape them as `\u009b`, which every JSON reader takes back.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter, Serializer};

/// A formatter that writes strings as `F` does, with the C1 controls escaped.
struct EscapeC1<F>(F);

/// The methods `PrettyFormatter` overrides, handed on; the string fragments escaped.
impl<F: Formatter> Formatter for EscapeC1<F> {
    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, s: &str) -> io::Result<()> {
        let mut rest = s;
        while let Some((at, c)) = rest
            .char_indices()
            .find(|(_, c)| ('\u{80}'..='\u{9f}').contains(c))
        {
            self.0.write_string_fragment(w, &rest[..at])?;
            write!(w, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_string_fragment(w, rest)
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// `serde_json::to_writer`, C1 controls escaped.
pub fn to_writer<W: Write, T: ?Sized + Serialize>(w: W, value: &T) -> serde_json::Result<()> {
    value.serialize(&mut Serializer::with_formatter(
        w,
        EscapeC1(CompactFormatter),
    ))
}

/// `serde_json::to_writer_pretty`, C1 controls escaped.
pub fn to_writer_pretty<W: Write, T: ?Sized + Serialize>(
    w: W,
    value: &T,
) -> serde_json::Result<()> {
    value.serialize(&mut Serializer::with_formatter(
        w,
        EscapeC1(PrettyFormatter::new()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_controls_are_escaped_and_read_back() {
        let v = serde_json::json!({"name": "eth0\u{9b}31m\u{1b}x ü", "list": [1, 2]});
        for pretty in [false, true] {
            let mut out = Vec::new();
            if pretty {
                to_writer_pretty(&mut out, &v).unwrap();
            } else {
                to_writer(&mut out, &v).unwrap();
            }
            let text = String::from_utf8(out).unwrap();
            assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
            assert!(text.contains("\\u009b31m\\u001bx ü"), "{text}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
        }
        let mut pretty = Vec::new();
        to_writer_pretty(&mut pretty, &v).unwrap();
        let mut plain = Vec::new();
        serde_json::to_writer_pretty(&mut plain, &serde_json::json!({"list": [1, 2]})).unwrap();
        assert!(
            String::from_utf8(pretty)
                .unwrap()
                .contains("\"list\": [\n    1,")
        );
    }
}
