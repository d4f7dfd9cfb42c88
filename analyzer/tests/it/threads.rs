//! Every output is the same bytes whatever `--threads` is: the threads share the flows, never the order a
//! flow's frames are folded in, and the tables are sorted by their keys.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, run, sample_captures};

/// What `args` (a command and its options; `DIR` stands for a fresh directory, `DIR/NAME` for a file in
/// it) writes with `--threads n`: its standard output and error, and every file it left in `DIR`, each as
/// bytes.
fn outputs(args: &[&str], files: &[PathBuf], n: u32) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let threads = n.to_string();
    let mut cmd = analyzer();
    cmd.arg(args[0]).args(["--threads", &threads]);
    for a in &args[1..] {
        if *a == "DIR" {
            cmd.arg(&out_dir);
        } else if let Some(name) = a.strip_prefix("DIR/") {
            std::fs::create_dir_all(&out_dir).unwrap();
            cmd.arg(out_dir.join(name));
        } else {
            cmd.arg(a);
        }
    }
    let o = run(cmd.args(files));
    // A damaged capture gives its results and a warning, and fails: the same status on any threads.
    assert!(
        o.status.success() || o.status.code() == Some(2),
        "{args:?} --threads {n}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The report names its directory in what it prints.
    let scrub = |b: Vec<u8>| {
        String::from_utf8_lossy(&b)
            .replace(&*out_dir.to_string_lossy(), "DIR")
            .into_bytes()
    };
    let mut out = vec![
        (
            format!("{args:?} status"),
            format!("{:?}", o.status.code()).into_bytes(),
        ),
        (format!("{args:?} stdout"), scrub(o.stdout)),
        (format!("{args:?} stderr"), scrub(o.stderr)),
    ];
    let mut tables: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    tables.sort();
    for t in tables {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        out.push((format!("{args:?} {name}"), std::fs::read(&t).unwrap()));
    }
    out
}

/// Every output of `stats` (text, JSON, CSV).
const STATS: &[&[&str]] = &[&["stats", "--json"], &["stats"], &["stats", "--csv", "DIR"]];

/// `dcqcn` (text and JSON, the model's every cut) and `fabric` (text and JSON): the report's read without
/// its hops pass, and on one thread a loop of their own.
const DCQCN_FABRIC: &[&[&str]] = &[
    &["dcqcn"],
    &["dcqcn", "--json"],
    &["fabric"],
    &["fabric", "--json"],
];

/// `decode`'s lines, text and JSON, all of them and those of a filter: made on the workers, written in order.
const DECODE: &[&[&str]] = &[
    &["decode"],
    &["decode", "--json"],
    &["decode", "--json", "--filter", "roce and ecn == ce"],
];

/// The report's directory, every file of it.
const REPORT: &[&[&str]] = &[&["report", "-o", "DIR"]];

/// The annotated copy, comments and all.
const ANNOTATE: &[&[&str]] = &[&["annotate", "-o", "DIR/annotated.pcapng"]];

fn same_for_1_2_and_3_threads(what: &str, commands: &[&[&str]], files: &[PathBuf]) {
    for args in commands {
        let one = outputs(args, files, 1);
        let damaged = what.contains("cut short");
        assert!(
            damaged || one[0].1 == b"Some(0)",
            "{what}: {args:?} failed: {}",
            String::from_utf8_lossy(&one[2].1)
        );
        for n in [2, 3] {
            let other = outputs(args, files, n);
            assert_eq!(one.len(), other.len(), "{what}: {args:?} wrote other files");
            for ((name, a), (_, b)) in one.iter().zip(&other) {
                assert!(
                    a == b,
                    "{what}: {name} differs between 1 and {n} threads:\n{}\n---\n{}",
                    String::from_utf8_lossy(a),
                    String::from_utf8_lossy(b)
                );
            }
        }
    }
}

/// Each sample alone, then every sample at once: many files, many taps, PFC, CNPs, losses.
fn on_every_sample(commands: &[&[&str]]) {
    let samples = sample_captures();
    for s in &samples {
        same_for_1_2_and_3_threads(&s.display().to_string(), commands, std::slice::from_ref(s));
    }
    same_for_1_2_and_3_threads("all samples", commands, &samples);
}

#[test]
fn report_is_the_same_bytes_on_any_number_of_threads() {
    on_every_sample(REPORT);
}

/// Annotate runs report's read, then copies the capture with the analysis in its comments: many taps
/// (the hops pass on its own thread) and one small capture.
#[test]
fn annotate_is_the_same_bytes_on_any_number_of_threads() {
    let samples = sample_captures();
    same_for_1_2_and_3_threads("all samples", ANNOTATE, &samples);
    same_for_1_2_and_3_threads("one sample", ANNOTATE, &samples[..1]);
}

#[test]
fn stats_is_the_same_bytes_on_any_number_of_threads() {
    on_every_sample(STATS);
}

#[test]
fn dcqcn_and_fabric_are_the_same_bytes_on_any_number_of_threads() {
    on_every_sample(DCQCN_FABRIC);
}

#[test]
fn decode_is_the_same_bytes_on_any_number_of_threads() {
    on_every_sample(DECODE);
}

/// `hops` (its text and JSON) and the Parquet dataset of `decode --parquet`, the part files byte for byte:
/// matching on a second thread or not, encoding on a second thread or not.
#[test]
fn hops_and_the_dataset_are_the_same_bytes_on_any_number_of_threads() {
    on_every_sample(&[
        &["hops"],
        &["hops", "--json"],
        &["decode", "--parquet", "DIR"],
    ]);
}

/// NIC counter samples beside the packets: the CNPs and the CE-marked packets a host's counters have twins
/// of belong to different flows, so with several owners each holds part of the host's series, which must
/// join into what one thread counts (the report's NIC section, `nic_counters` in the tables).
#[test]
fn nic_counters_are_the_same_bytes_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let file = crate::nic_counters::capture(dir.path(), true);
    let commands = [STATS, REPORT, ANNOTATE, DCQCN_FABRIC].concat();
    same_for_1_2_and_3_threads("NIC counters", &commands, std::slice::from_ref(&file));
}

/// A rotated mirror of 4,096 QPs in three files of three formats (pcap, gzip pcap, pcapng): many flows
/// spread over the threads, read as one capture; whole, through a window, and with its last file cut
/// short in the middle of a record (the warning, and the results up to the damage).
#[test]
fn every_output_over_a_rotated_set_is_the_same_bytes_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_rotated(dir.path());
    let commands = [STATS, REPORT, ANNOTATE, DCQCN_FABRIC, DECODE].concat();
    same_for_1_2_and_3_threads("rotated set", &commands, &files);
    let window = ["--from", "+0.004s", "--to", "+0.009s"];
    let windowed: Vec<Vec<&str>> = commands
        .iter()
        .map(|a| [*a, &window[..]].concat())
        .collect();
    let windowed: Vec<&[&str]> = windowed.iter().map(Vec::as_slice).collect();
    same_for_1_2_and_3_threads("rotated set, windowed", &windowed, &files);
    assert_ne!(
        outputs(windowed[0], &files, 2)[1],
        outputs(STATS[0], &files, 2)[1],
        "the window takes part of the capture"
    );
    cut_short(&files[2]);
    let one = outputs(STATS[1], &files, 1);
    assert!(
        String::from_utf8_lossy(&one[2].1).contains("run.02.pcapng: byte"),
        "the damage is named: {}",
        String::from_utf8_lossy(&one[2].1)
    );
    same_for_1_2_and_3_threads("rotated set, cut short", &commands, &files);
}

/// The flows' models run over the threads when nothing takes their events, and in turn, one flow after the
/// other, when `--model-table` writes them: the two ways give the same report, file for file, on the
/// rotated set's 4,096 QPs (more flows than one batch of the threads holds).
#[test]
fn the_models_give_the_same_report_over_threads_and_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_rotated(dir.path());
    // Each file by its name alone: the first three outputs are the command's status, stdout and stderr.
    let report_files = |args: &[&str], skip: &[&str]| -> Vec<(String, Vec<u8>)> {
        outputs(args, &files, 3)
            .into_iter()
            .skip(3)
            .map(|(key, bytes)| (key.rsplit(' ').next().unwrap_or_default().to_owned(), bytes))
            .filter(|(name, _)| !skip.contains(&name.as_str()))
            .collect()
    };
    // The manifest lists model_events.parquet too.
    let spread = report_files(REPORT[0], &[".roce-report"]);
    let in_turn = report_files(
        &["report", "--model-table", "-o", "DIR"],
        &[".roce-report", "model_events.parquet"],
    );
    let names = |o: &[(String, Vec<u8>)]| o.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&spread), names(&in_turn));
    assert!(
        names(&spread).contains(&"model.parquet".to_owned()),
        "the report holds the models: {:?}",
        names(&spread)
    );
    for ((name, a), (_, b)) in spread.iter().zip(&in_turn) {
        assert!(a == b, "{name} differs between the two ways");
    }
}

/// Cuts a file in the middle of a record past its first third.
fn cut_short(file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    std::fs::write(file, &bytes[..bytes.len() * 2 / 3 + 37]).unwrap();
}

/// Three files of 20 k frames each from the multi-QP generator: a pcap, a gzip pcap and a pcapng, as a
/// tracer rotated through a change of format. Returns them in order.
fn write_rotated(dir: &Path) -> Vec<PathBuf> {
    use roce_capture::LinkType;
    use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
    use samples::emit::FrameSink;
    use samples::multi_qp::{self, Acks, MultiQpSpec, TapAt};
    type Out = std::io::BufWriter<std::fs::File>;
    enum Writer {
        Pcap(PcapWriter<Out>),
        Gz(Box<PcapWriter<flate2::write::GzEncoder<Out>>>),
        Pcapng(PcapngWriter<Out>),
    }
    struct Three {
        dir: PathBuf,
        n: u64,
        w: Option<Writer>,
    }
    impl Three {
        fn close(&mut self) -> std::io::Result<()> {
            match self.w.take() {
                Some(Writer::Pcap(w)) => drop(w.into_inner()?),
                Some(Writer::Gz(w)) => drop(w.into_inner()?.finish()?),
                Some(Writer::Pcapng(w)) => drop(w.into_inner()?),
                None => {}
            }
            Ok(())
        }
    }
    impl FrameSink for Three {
        fn packet(&mut self, ts: u64, data: &[u8], len: u32) -> std::io::Result<()> {
            if self.n.is_multiple_of(20_000) {
                self.close()?;
                let name =
                    ["run.00.pcap", "run.01.pcap.gz", "run.02.pcapng"][(self.n / 20_000) as usize];
                let f = std::io::BufWriter::new(std::fs::File::create(self.dir.join(name))?);
                self.w = Some(match self.n / 20_000 {
                    0 => Writer::Pcap(PcapWriter::new(f, LinkType::ETHERNET, 128)?),
                    1 => Writer::Gz(Box::new(PcapWriter::new(
                        flate2::write::GzEncoder::new(f, flate2::Compression::fast()),
                        LinkType::ETHERNET,
                        128,
                    )?)),
                    _ => {
                        let mut w =
                            PcapngWriter::new(f, &SectionInfo::application("threads test"))?;
                        w.add_interface(LinkType::ETHERNET, 128, None, None)?;
                        Writer::Pcapng(w)
                    }
                });
            }
            self.n += 1;
            match self.w.as_mut().expect("a file is open") {
                Writer::Pcap(w) => w.write_packet(ts, data, len),
                Writer::Gz(w) => w.write_packet(ts, data, len),
                Writer::Pcapng(w) => w.write_packet(0, ts, data, len),
            }
        }
    }
    let mut sink = Three {
        dir: dir.to_path_buf(),
        n: 0,
        w: None,
    };
    multi_qp::generate(
        &mut sink,
        &MultiQpSpec {
            frames: 60_000,
            host_pairs: 64,
            qps_per_pair: 64,
            acks: Acks::Every,
            tap: TapAt::Receiver,
            lockstep: false,
            cnp_delay_ns: (500, 3_000),
            seed: 26,
        },
    )
    .unwrap();
    sink.close().unwrap();
    ["run.00.pcap", "run.01.pcap.gz", "run.02.pcapng"]
        .iter()
        .map(|n| dir.join(n))
        .collect()
}
