//! Text from a capture, made safe to print on a terminal.
//!
//! Interface names, comments, counter and knob names, process names and kernel-event fields are written by
//! whoever recorded the capture. Printed raw, an escape sequence in one of them could retitle the terminal,
//! clear the screen, recolour everything after it or hide a line. JSON and HTML outputs escape on their own;
//! every text output goes through [`escape_control`], and every line for standard error through
//! [`to_stderr`].

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with each control character written as a visible escape, the way tcpdump shows bytes it will not
/// print: C0 controls and DEL as `\x1b`, C1 controls (U+0080 to U+009F, which some terminals obey too;
/// U+009B starts a sequence on its own) as `\u{9b}`. Tabs and line breaks are escaped as well, so one name
/// stays on one line and cannot fake a row of a table. Everything else, non-ASCII letters included, is kept,
/// and text without control characters is returned as it is, without a copy.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match u32::from(c) {
            n @ (0..=0x1f | 0x7f) => {
                let _ = write!(out, "\\x{n:02x}");
            }
            n @ 0x80..=0x9f => {
                let _ = write!(out, "\\u{{{n:x}}}");
            }
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes `line` and a line break on standard error, in one write. A failed write is dropped: standard
/// error is where a failure would be told, so there is nowhere left to tell it, and a reader that went
/// away (`2>&1 | head`) must cost neither the results still going to standard output nor a panic, which
/// is what `eprintln!` does there.
pub fn to_stderr(line: &str) {
    use std::io::Write as _;
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::escape_control;
    use std::borrow::Cow;

    #[test]
    fn plain_text_is_not_copied() {
        assert!(matches!(
            escape_control("eth0 → mlx5_0 ü"),
            Cow::Borrowed("eth0 → mlx5_0 ü")
        ));
    }

    #[test]
    fn control_characters_become_visible_escapes() {
        assert_eq!(
            escape_control("\x1b]0;owned\x07eth0\x1b[2J"),
            "\\x1b]0;owned\\x07eth0\\x1b[2J"
        );
        assert_eq!(escape_control("a\tb\nc\rd\x7f"), "a\\x09b\\x0ac\\x0dd\\x7f");
        assert_eq!(escape_control("\u{9b}31m"), "\\u{9b}31m");
        // Every escaped form is printable ASCII.
        let all: String = (0u32..0x100).filter_map(char::from_u32).collect();
        assert!(!escape_control(&all).chars().any(char::is_control));
    }
}
