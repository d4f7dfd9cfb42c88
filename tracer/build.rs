//! Builds the eBPF probe (crate `tracer-ebpf`, target bpfel-unknown-none, nightly with `-Z build-std=core`,
//! linked by bpf-linker) so that a plain `cargo build` of the tracer also builds the object it embeds.
//! `AYA_BUILD_SKIP=1` skips it (the tracer then refuses `--engine ebpf` at run time); see the README for the
//! toolchain it needs.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest)
        .parent()
        .ok_or_else(|| anyhow::anyhow!("tracer crate has no parent directory"))?;
    let ebpf = root.join("tracer-ebpf");
    let common = root.join("tracer-common");
    // aya-build watches the eBPF crate; the shared classifier lives in tracer-common.
    println!("cargo:rerun-if-changed={}", common.display());
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    if skip {
        // An empty file: the loader sees it is not an ELF object and says how to build the real one.
        let out = std::env::var("OUT_DIR")?;
        std::fs::write(Path::new(&out).join("tracer-probe"), [])?;
        println!("cargo:rustc-cfg=probe_skipped");
    }
    println!("cargo::rustc-check-cfg=cfg(probe_skipped)");
    let root_dir = ebpf
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf.display()))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
