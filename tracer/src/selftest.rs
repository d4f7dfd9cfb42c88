//! `roce-tracer selftest -i DEVICE[:PORT]`: the one command that checks the rdma engine end to end on real
//! hardware. It captures for a while with `--engine rdma` (every frame, not only RoCE) while the user, or
//! the command given after `--`, runs RoCE traffic through the port, then reads the file back with the
//! analyzer's decoder and says whether RoCE frames arrived with sane timestamps.
//!
//! It does not send traffic itself: a raw-packet QP could, but frames made up by the tracer would go out on
//! a production link; perftest's `ib_write_bw` makes real RoCE and is on every RDMA host.

use std::path::{Path, PathBuf};
use std::time::Duration;

use roce_capture::Capture;
use roce_core::decode::{Decoder, Kind};
use roce_core::frames::Frames;

/// What the capture held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Every frame captured.
    pub frames: u64,
    /// RoCE data and ACK frames: the traffic the check asked for.
    pub roce: u64,
    /// CNPs.
    pub cnp: u64,
    /// Frames stamped more than [`SLACK_NS`] outside the capture's run.
    pub outside: u64,
    /// Frames stamped earlier than the one before them by more than [`SLACK_NS`].
    pub backwards: u64,
    /// The first frame's stamp.
    pub first_ns: Option<u64>,
    /// The last frame's stamp.
    pub last_ns: Option<u64>,
}

/// How far a timestamp may stray: a re-anchoring of the NIC clock, the time between the NIC stamping a
/// frame and the host reading the wall clock around the capture.
pub const SLACK_NS: u64 = 1_000_000_000;

/// Reads a capture and counts what the verdict needs.
pub fn inspect(path: &Path, window: (u64, u64)) -> std::io::Result<Seen> {
    let mut capture = Capture::open_file(path).map_err(std::io::Error::other)?;
    let mut frames = Frames::new(&mut capture, Decoder::default());
    let mut s = Seen::default();
    let mut prev: Option<u64> = None;
    while let Some(f) = frames.next_frame() {
        s.frames += 1;
        match f.kind {
            Kind::Roce => s.roce += 1,
            Kind::Cnp => s.cnp += 1,
            _ => {}
        }
        let t = f.ts_ns;
        if t + SLACK_NS < window.0 || t > window.1 + SLACK_NS {
            s.outside += 1;
        }
        if prev.is_some_and(|p| t + SLACK_NS < p) {
            s.backwards += 1;
        }
        prev = Some(t);
        s.first_ns = Some(s.first_ns.map_or(t, |x| x.min(t)));
        s.last_ns = Some(s.last_ns.map_or(t, |x| x.max(t)));
    }
    Ok(s)
}

/// The verdict: a summary when the capture holds RoCE with sane timestamps, the problems otherwise.
pub fn verdict(s: &Seen, spec: &str) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    if s.frames == 0 {
        problems.push(format!(
            "the sniffer delivered no frame at all on {spec}: was traffic running through this port? If it \
             was, the NIC accepted the sniffer rule but sends it nothing: please report it with the output \
             of `roce-tracer list` and the NIC's model and firmware (`ethtool -i NETDEV`)"
        ));
    } else if s.roce + s.cnp == 0 {
        problems.push(format!(
            "{} frames arrived but none is RoCE: run RoCE traffic through {spec} during the test (see the \
             hint above), or the sniffer sees only the kernel's traffic, which would be a bug to report",
            s.frames
        ));
    }
    if s.outside > 0 {
        problems.push(format!(
            "{} of {} frames are stamped more than a second outside the capture's run: the conversion of \
             the NIC clock to wall time is off (a NIC clock in a mode the tracer does not know?); please \
             report it with the file",
            s.outside, s.frames
        ));
    }
    if s.backwards > 0 {
        problems.push(format!(
            "{} frames are stamped more than a second before the frame before them",
            s.backwards
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let span = match (s.first_ns, s.last_ns) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => 0.0,
    };
    Ok(format!(
        "{} frames, {} RoCE and {} CNP, over {span:.3} s, every timestamp within the capture's run",
        s.frames, s.roce, s.cnp
    ))
}

/// The traffic to suggest: perftest on this port, with the index of a RoCE v2 GID when there is one.
pub fn traffic_hint(sysfs_root: &Path, device: &str, port: u8) -> String {
    let gid = crate::ports::rdma_ports(sysfs_root)
        .into_iter()
        .find(|p| p.device == device && p.port == u32::from(port))
        .and_then(|p| {
            p.gids
                .into_iter()
                .find(|g| g.kind.as_deref() == Some("RoCE v2"))
        })
        .map(|g| format!(" -x {}", g.index))
        .unwrap_or_default();
    format!(
        "run RoCE traffic through {device}:{port} now, e.g. perftest between this host and a peer:\n  \
         peer:       ib_write_bw -d <its device> -x <its RoCE v2 GID index> -D 5\n  \
         this host:  ib_write_bw -d {device} -i {port}{gid} -D 5 <peer address>\n\
         or give the command after `--` and the selftest runs it"
    )
}

/// Where the selftest keeps its capture: `-w` when given, a file in the temporary directory otherwise.
pub fn output_path(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "roce-tracer-selftest-{}.pcapng",
            std::process::id()
        ))
    })
}

/// The default capture time.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let good = Seen {
            frames: 10,
            roce: 8,
            cnp: 1,
            first_ns: Some(1_000_000_000),
            last_ns: Some(3_500_000_000),
            ..Seen::default()
        };
        let ok = verdict(&good, "mlx5_0:1").unwrap();
        assert!(
            ok.contains("10 frames, 8 RoCE and 1 CNP, over 2.500 s"),
            "{ok}"
        );

        let e = verdict(&Seen::default(), "mlx5_0:1").unwrap_err();
        assert!(e[0].contains("no frame at all on mlx5_0:1"), "{e:?}");

        let e = verdict(
            &Seen {
                frames: 5,
                ..Seen::default()
            },
            "mlx5_0:1",
        )
        .unwrap_err();
        assert!(e[0].contains("none is RoCE"), "{e:?}");

        let e = verdict(
            &Seen {
                outside: 2,
                backwards: 1,
                ..good
            },
            "mlx5_0:1",
        )
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("2 of 10 frames are stamped"), "{e:?}");
    }

    #[test]
    fn the_hint_names_the_roce_v2_gid() {
        let dir = tempfile::tempdir().unwrap();
        crate::ports::tests::fake_host(dir.path());
        let h = traffic_hint(dir.path(), "mlx5_0", 1);
        assert!(h.contains("ib_write_bw -d mlx5_0 -i 1 -x 3 -D 5"), "{h}");
        let h = traffic_hint(dir.path(), "nothing", 1);
        assert!(h.contains("ib_write_bw -d nothing -i 1 -D 5"), "{h}");
    }
}
