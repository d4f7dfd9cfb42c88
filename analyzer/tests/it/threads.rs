//! Every output is the same bytes whatever `--threads` is: the threads share the flows, never the order a
//! flow's frames are folded in, and the tables are sorted by their keys.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, run, sample_captures};

/// What `stats` writes with `--threads n`: its JSON, its text, and its CSV tables, each as bytes.
fn stats_outputs(files: &[PathBuf], n: u32) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let threads = n.to_string();
    let mut out = Vec::new();
    for args in [&["--json"][..], &[]] {
        let o = run(analyzer()
            .arg("stats")
            .args(["--threads", &threads])
            .args(args)
            .args(files));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out.push((format!("stats {args:?}"), o.stdout));
    }
    let o = run(analyzer()
        .arg("stats")
        .args(["--threads", &threads, "--csv"])
        .arg(dir.path())
        .args(files));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut tables: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    tables.sort();
    for t in tables {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, std::fs::read(&t).unwrap()));
    }
    out
}

fn same_for_1_2_and_3_threads(what: &str, files: &[PathBuf]) {
    let one = stats_outputs(files, 1);
    assert!(one.len() >= 5, "{what}: {} outputs", one.len());
    for n in [2, 3] {
        let other = stats_outputs(files, n);
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

#[test]
fn stats_is_the_same_bytes_on_any_number_of_threads() {
    for s in sample_captures() {
        same_for_1_2_and_3_threads(&s.display().to_string(), std::slice::from_ref(&s));
    }
    // Every sample at once: many files, many taps, PFC, CNPs, losses.
    same_for_1_2_and_3_threads("all samples", &sample_captures());
}

/// A rotated mirror of 4,096 QPs in three files: many flows spread over the threads, read as one capture.
#[test]
fn stats_over_a_rotated_set_is_the_same_bytes_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    write_rotated(dir.path());
    let files: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("run.{i:02}.pcap")))
        .collect();
    same_for_1_2_and_3_threads("rotated set", &files);
}

/// Three pcap files of 20 k frames each from the multi-QP generator.
fn write_rotated(dir: &Path) {
    use roce_capture::LinkType;
    use roce_capture::write::PcapWriter;
    use samples::emit::FrameSink;
    use samples::multi_qp::{self, Acks, MultiQpSpec, TapAt};
    struct Three {
        dir: PathBuf,
        n: u64,
        w: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    }
    impl FrameSink for Three {
        fn packet(&mut self, ts: u64, data: &[u8], len: u32) -> std::io::Result<()> {
            if self.n.is_multiple_of(20_000) {
                let f = std::fs::File::create(
                    self.dir.join(format!("run.{:02}.pcap", self.n / 20_000)),
                )?;
                self.w = Some(PcapWriter::new(
                    std::io::BufWriter::new(f),
                    LinkType::ETHERNET,
                    128,
                )?);
            }
            self.n += 1;
            self.w
                .as_mut()
                .expect("a file is open")
                .write_packet(ts, data, len)
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
}
