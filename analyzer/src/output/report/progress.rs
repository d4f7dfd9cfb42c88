//! A progress bar for long runs over big captures, drawn only when stderr is a terminal so that piped and
//! CI output stays clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress through an input of known size (bytes of a capture file) or, when the size is unknown (stdin),
/// a spinner with a count.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// `total`: the input's size in bytes, if known. Hidden unless stderr is a terminal.
    pub fn new(total: Option<u64>, message: &str) -> Self {
        Self::with_target(total, message, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], with the terminal check decided by the caller (tests, `--no-progress`).
    pub fn with_target(total: Option<u64>, message: &str, visible: bool) -> Self {
        let bar = match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        let template = match total {
            Some(_) => "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({eta} left)",
            None => "{msg} {spinner} {binary_bytes}",
        };
        // The templates are constants, so this cannot fail in practice; fall back to the default style.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message.to_string());
        bar.set_draw_target(if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        Progress { bar }
    }

    /// Sets how far the input has been read (bytes).
    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    /// Changes the words before the bar, when the work moves on to another stage.
    pub fn set_message(&self, message: &str) {
        self.bar.set_message(message.to_string());
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// How far the bar has got, so a test can check what was reported without a terminal.
    pub fn position(&self) -> u64 {
        self.bar.position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_bar_still_counts() {
        let p = Progress::with_target(Some(100), "reading", false);
        p.set_position(42);
        assert_eq!(p.position(), 42);
        p.finish();
    }
}
