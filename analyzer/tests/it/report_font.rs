//! A missing chart font is an error that says what to install, not a panic. Run through the binary, because
//! the font is loaded once per process and the variable must not leak into the other tests.

use crate::common::{analyzer, run, workspace};

#[test]
fn missing_font_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(analyzer()
        .arg("report")
        .arg(workspace().join("samples/captures/incast_dcqcn.pcapng"))
        .arg("-o")
        .arg(dir.path())
        .env("ROCETRACE_FONT", "/nonexistent/font.ttf"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/font.ttf"), "{err}");
    assert!(err.contains("fonts-dejavu-core"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
