//! What the end-to-end tests need beyond `testkit`: the workspace's binaries, which cargo hands only to the
//! tests of the binary's own crate.
//!
//! A test here runs `roce-analyzer` and `roce-tracer` as a user would. Cargo builds a package's binaries for
//! that package's integration tests only, so [`binary`] asks cargo to build the one it needs (a check that
//! costs a second when it is up to date) and returns its path in the target directory the tests run from: a
//! binary left there by an older build is never what a test runs.
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The binary `name` of workspace package `package`, built for the profile these tests were built with.
///
/// Panics when it cannot be built: a test that cannot run its binary has nothing to check.
pub fn binary(package: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    // The test runs from TARGET/PROFILE/deps/e2e-HASH; the binaries of that profile are in TARGET/PROFILE.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary sits in TARGET/PROFILE/deps")
        .to_path_buf();
    let profile = profile_dir
        .file_name()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", package, "--bin", name])
        .env("CARGO_TARGET_DIR", profile_dir.parent().expect("TARGET"));
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().expect("cargo starts");
    assert!(status.success(), "building {name} of {package} failed");
    let path = profile_dir.join(name);
    assert!(path.exists(), "{} was not built", path.display());
    built.insert(name.to_string(), path.clone());
    path
}
