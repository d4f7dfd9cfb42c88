//! Installs what a fresh Debian machine lacks for the tests, and nothing it already has.
//!
//! Everything here is idempotent and quick when all is present, so `cargo xtask test` can always call it.

use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::sh;

/// Debian packages the tests use: tshark is the differential peer of the decoder; editcap (in
/// wireshark-common, pulled in by tshark) converts captures; libpcap-dev is linked by the live tracer.
const APT_PACKAGES: &[&str] = &["tshark", "libpcap-dev"];

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn apt_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub fn ensure_apt(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !apt_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: {}; install them with: sudo apt-get install -y {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    sh(Command::new("apt-get").args(["update", "-qq"]))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

pub fn ensure_all() -> Result<()> {
    ensure_apt(APT_PACKAGES)?;
    if !succeeds(Command::new("cargo").args(["fmt", "--version"]))
        || !succeeds(Command::new("cargo").args(["clippy", "--version"]))
    {
        sh(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))?;
    }
    if !succeeds(Command::new("cargo").args(["+nightly", "--version"])) {
        sh(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        sh(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}
