//! A missing chart font is an error that says what to install, not a panic. Its own test binary, because the
//! font is loaded once per process.

use analyzer::output::report::ReportError;
use analyzer::output::report::charts::ensure_font;

#[test]
fn missing_font_is_a_clear_error() {
    // SAFETY: set before any thread of this test binary reads the environment.
    unsafe { std::env::set_var("ROCETRACE_FONT", "/nonexistent/font.ttf") };
    match ensure_font() {
        Err(ReportError::Font(msg)) => {
            assert!(msg.contains("/nonexistent/font.ttf"), "{msg}");
            assert!(msg.contains("fonts-dejavu-core"), "{msg}");
        }
        other => panic!("expected a font error, got {other:?}"),
    }
    // Asked again, the same answer rather than a retry or a panic.
    assert!(matches!(ensure_font(), Err(ReportError::Font(_))));
}
