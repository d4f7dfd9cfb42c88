//! Running other programs the way every task does: echoed, from the workspace root, failing loudly.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::workspace::root;

/// Runs a command in the workspace root, echoing it, and fails with its exit status.
pub fn sh(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", show(cmd));
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not start {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The cargo that runs xtask, so that a toolchain chosen with `cargo +TOOLCHAIN xtask` is the one it uses.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Whether xtask runs as root: installing packages, network namespaces and eBPF need it, and the test task
/// runs the privileged tests directly rather than through sudo.
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    })
}
