//! What roce-tracer prints on the terminal. Interface names, process names, tracepoint fields, counter and
//! knob names, and the errors that quote them come from the host or the user; printed raw, an escape
//! sequence among them could retitle the terminal, clear it or hide a line. Every line goes through
//! [`roce_core::text::escape_control`], one line at a time, so that the line breaks the tracer means stay.

use roce_core::text::escape_control;

/// `text` with control characters escaped in each of its lines.
pub fn safe(text: &str) -> String {
    text.split('\n')
        .map(escape_control)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints `text` on standard error, escaped as [`safe`] does; a closed standard error loses it quietly.
pub fn say(text: &str) {
    roce_core::text::to_stderr(&safe(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_strings_cannot_steer_the_terminal() {
        let reason = "eth\u{1b}]0;owned\u{7}0: gone\r";
        assert_eq!(safe(reason), "eth\\x1b]0;owned\\x070: gone\\x0d");
        // The lines the tracer means are kept; a tab inside one is not.
        assert_eq!(safe("a\tb\nc"), "a\\x09b\nc");
        assert_eq!(safe("plain"), "plain");
    }
}
