//! `cargo xtask bench`: the project's performance measurements, which rewrite their sections of
//! BENCHMARKS.md. This module reads the command line and starts the kind of bench it names; each kind
//! (`analyzer`, `cores`, `scale`, `hops`, `spark`, `tracer`) stands on the shared helpers below it (`measure`,
//! `machine`, `inputs`, `benchmarks_md`), and none of them reaches back here.

mod analyzer;
mod benchmarks_md;
mod cores;
mod hops;
mod inputs;
mod machine;
mod measure;
mod scale;
mod spark;
mod tracer;

use anyhow::{Context, Result, bail};

/// Which bench a command line asks for, with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// The analyzer against the floor and tshark, on a bulk capture of `frames`.
    Analyzer { frames: u64 },
    /// `stats` and `report` with `--threads N` for each N of `threads`, on a bulk capture of `frames`.
    Cores { frames: u64, threads: Vec<u32> },
    /// A saturation test's rotated capture, `per_file` frames in each of three files; `long` adds 60 s.
    Scale { per_file: u64, long: bool },
    /// `hops` over both sides of a simulated switch, `us` µs of traffic.
    Hops { us: u64 },
    /// The live tracer, as root.
    Tracer,
    /// The dataset writer and the Spark job, on a bulk capture of `frames`.
    Spark { frames: u64 },
}

/// A parsed `cargo xtask bench` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Args {
    /// Every measured command on core 0 rather than on every core.
    one_core: bool,
    kind: Kind,
}

/// The flags that choose a kind other than the analyzer's; at most one of them.
const KINDS: &[&str] = &["--cores", "--scale", "--hops", "--tracer", "--spark"];

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    if args.one_core {
        measure::use_one_core();
    }
    match args.kind {
        Kind::Analyzer { frames } => analyzer::run(frames),
        Kind::Cores { frames, threads } => cores::run(frames, &threads),
        Kind::Scale { per_file, long } => scale::run(per_file, long),
        Kind::Hops { us } => hops::run(us),
        Kind::Tracer => tracer::run(),
        Kind::Spark { frames } => spark::run(frames),
    }
}

fn parse(args: &[String]) -> Result<Args> {
    let one_core = args.iter().any(|a| a == "--one-core");
    let chosen: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| KINDS.contains(a))
        .collect();
    let kind = match chosen[..] {
        [] => "",
        [one] => one,
        _ => bail!(
            "bench measures one thing at a time: {}",
            chosen.join(" and ")
        ),
    };
    let task = format!("bench {kind}");
    let task = task.trim_end();
    // `--cores` is the one kind that takes a value: the thread counts right after it.
    let counts = args.iter().position(|a| a == "--cores").map(|i| i + 1);
    let threads = match counts {
        Some(i) => cores::parse_counts(args.get(i).map_or("", String::as_str))?,
        None => Vec::new(),
    };
    let mut options = args
        .iter()
        .enumerate()
        .filter(|&(i, a)| a.as_str() != "--one-core" && a.as_str() != kind && Some(i) != counts)
        .map(|(_, a)| a.as_str());
    let mut frames = samples::bulk::BulkSpec::default().frames;
    let mut per_file = 5_000_000;
    let mut long = false;
    let mut us = 800_000;
    while let Some(option) = options.next() {
        let mut number = |what: &str| -> Result<u64> {
            options
                .next()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{option} needs a number{what}"))
        };
        match (kind, option) {
            ("" | "--spark" | "--cores", "--frames") => frames = number("")?,
            ("--scale", "--per-file") => per_file = number("")?,
            ("--scale", "--long") => long = true,
            ("--hops", "--us") => us = number(" of µs")?,
            ("--tracer", _) => bail!("--tracer takes no other option than --one-core"),
            _ => bail!("unknown option {option:?} for {task}"),
        }
    }
    let kind = match kind {
        "--cores" => Kind::Cores { frames, threads },
        "--scale" => Kind::Scale { per_file, long },
        "--hops" => Kind::Hops { us },
        "--tracer" => Kind::Tracer,
        "--spark" => Kind::Spark { frames },
        _ => Kind::Analyzer { frames },
    };
    Ok(Args { one_core, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Args> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        parse(&args)
    }

    fn kind(line: &str) -> Kind {
        let args = parsed(line).unwrap_or_else(|e| panic!("{line:?}: {e:#}"));
        args.kind
    }

    fn error(line: &str) -> String {
        match parsed(line) {
            Ok(args) => panic!("{line:?} parsed as {args:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn every_kind_parses_its_documented_options() {
        let default_frames = samples::bulk::BulkSpec::default().frames;
        assert_eq!(
            kind(""),
            Kind::Analyzer {
                frames: default_frames
            }
        );
        assert_eq!(kind("--frames 1000"), Kind::Analyzer { frames: 1000 });
        assert_eq!(
            kind("--scale"),
            Kind::Scale {
                per_file: 5_000_000,
                long: false
            }
        );
        assert_eq!(
            kind("--per-file 20 --scale --long"),
            Kind::Scale {
                per_file: 20,
                long: true
            }
        );
        assert_eq!(kind("--hops"), Kind::Hops { us: 800_000 });
        assert_eq!(kind("--hops --us 300"), Kind::Hops { us: 300 });
        assert_eq!(kind("--tracer"), Kind::Tracer);
        assert_eq!(
            kind("--spark"),
            Kind::Spark {
                frames: default_frames
            }
        );
        assert_eq!(kind("--spark --frames 7"), Kind::Spark { frames: 7 });
        assert_eq!(
            kind("--cores 1,2"),
            Kind::Cores {
                frames: default_frames,
                threads: vec![1, 2]
            }
        );
        assert_eq!(
            kind("--frames 9 --cores 2,1,3"),
            Kind::Cores {
                frames: 9,
                threads: vec![2, 1, 3]
            }
        );
    }

    #[test]
    fn one_core_goes_with_any_kind_in_any_place() {
        for line in [
            "--one-core",
            "--frames 9 --one-core",
            "--one-core --scale --long",
            "--hops --one-core --us 5",
            "--tracer --one-core",
            "--spark --one-core",
        ] {
            let args = parsed(line).unwrap_or_else(|e| panic!("{line:?}: {e:#}"));
            assert!(args.one_core, "{line:?}");
        }
        assert!(!parsed("--scale").unwrap().one_core);
    }

    #[test]
    fn an_option_of_another_kind_or_a_missing_number_is_refused() {
        assert_eq!(error("--long"), "unknown option \"--long\" for bench");
        assert_eq!(
            error("--scale --frames 5"),
            "unknown option \"--frames\" for bench --scale"
        );
        assert_eq!(
            error("--hops --per-file 5"),
            "unknown option \"--per-file\" for bench --hops"
        );
        assert_eq!(
            error("--tracer --frames 5"),
            "--tracer takes no other option than --one-core"
        );
        assert_eq!(error("--frames"), "--frames needs a number");
        assert_eq!(error("--frames many"), "--frames needs a number");
        assert_eq!(error("--hops --us"), "--us needs a number of µs");
        assert_eq!(error("--scale --per-file -3"), "--per-file needs a number");
        assert_eq!(
            error("--cores"),
            "--cores takes thread counts like 1,2, not \"\""
        );
        assert_eq!(
            error("--cores --frames 5"),
            "--cores takes thread counts like 1,2, not \"--frames\""
        );
    }

    #[test]
    fn two_kinds_at_once_are_refused() {
        assert_eq!(
            error("--scale --hops"),
            "bench measures one thing at a time: --scale and --hops"
        );
    }
}
