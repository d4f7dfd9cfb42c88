//! Installs what a fresh Debian machine lacks for the tests, and nothing it already has.
//!
//! Everything here is idempotent and quick when all is present, so `cargo xtask test` can always call it.

use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::shell::{is_root, sh};

/// Debian packages the tests use: tshark is the differential peer of the decoder; editcap (in
/// wireshark-common, pulled in by tshark) converts captures; libpcap-dev is linked by the live tracer;
/// tcpreplay replays captures into the tracer's veth pairs; iproute2 makes those pairs; bpftool shows what
/// the eBPF engine attached; llvm-22-dev is what bpf-linker is built against (the nightly's LLVM); prometheus
/// brings promtool, which checks the tracer's metrics; ethtool turns GRO on for the veth whose statistics the
/// tracer's ethtool test reads, and prints the names those statistics are checked against; mergecap (in
/// wireshark-common) is the peer of the multi-file merge, and gzip, zstd and lz4 compress the captures the
/// reader must take as they are; libibverbs-dev brings rdma-core's verbs.h, against which a test checks the
/// tracer's hand-written libibverbs layouts, and the library the rdma engine's error paths are tested with;
/// default-jre-headless is the Java that Spark's local mode runs the spark/ job on, python3-venv holds
/// the PySpark that [`ensure_pyspark`] installs, and tmux is the terminal `roce-tracer top`'s tests run it in
/// and read its screen back from.
const APT_PACKAGES: &[&str] = &[
    "tshark",
    "wireshark-common",
    "gzip",
    "zstd",
    "lz4",
    "libpcap-dev",
    "tcpreplay",
    "iproute2",
    "bpftool",
    "llvm-22-dev",
    "prometheus",
    "chromium",
    "fonts-dejavu-core",
    "ethtool",
    "libibverbs-dev",
    "default-jre-headless",
    "python3-venv",
    "tmux",
];

/// The PySpark the spark/ job is tested with: the 3.5 line, Spark's long-term one, pinned so that a fresh
/// machine tests what this one did.
pub const PYSPARK: &str = "pyspark==3.5.9";

/// Where PySpark goes when the machine's Python lacks it: a virtual environment of its own (Debian's Python
/// refuses system-wide pip installs), which the Spark test looks in after PATH.
pub fn pyspark_venv() -> std::path::PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    std::path::Path::new(&home).join(".cache/rocetrace/pyspark")
}

/// PySpark from PyPI (a 320 MB download; about a minute cold), unless a Python on PATH or the venv has it.
pub fn ensure_pyspark() -> Result<()> {
    let venv = pyspark_venv();
    if succeeds(Command::new("python3").args(["-c", "import pyspark"]))
        || succeeds(Command::new(venv.join("bin/python3")).args(["-c", "import pyspark"]))
    {
        return Ok(());
    }
    sh(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    sh(Command::new(venv.join("bin/python3")).args(["-m", "pip", "install", "--quiet", PYSPARK]))
}

/// The LLVM that bpf-linker links to, matching the nightly toolchain's LLVM major version.
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

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
    ensure_pyspark()?;
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
    // The tracer's build script compiles its eBPF probe with the nightly toolchain (-Z build-std=core needs
    // rust-src) and links it with bpf-linker.
    let has_rust_src = Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("rust-src"));
    if !has_rust_src {
        sh(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    if !succeeds(Command::new("bpf-linker").arg("--version")) {
        sh(Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", LLVM_PREFIX))?;
    }
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        sh(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}
