//! `cargo xtask bench --spark`: the way to many collectors measured on one machine. The dataset writer
//! (`decode --parquet`), the Spark job in local mode with one executor core, and `stats`, each on one core
//! (`taskset -c 0`) over the same bulk capture, in frames per second.
//!
//! Spark's local mode runs the driver and the executor in one JVM, so one core here is one executor core
//! with the driver's overhead on top: a cluster's executors do the same work per core without that share.
//! Spark's start-up (JVM, session, planning) is measured apart, on a dataset of a thousand frames, and the
//! rate is given with and without it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Result, bail};
use samples::bulk::BulkSpec;

use super::benchmarks_md;
use super::inputs::{build_release_analyzer, bulk_capture, release_analyzer};
use super::machine::{cores_of_cpu, load_average};
use super::measure::{Run, dir_mb, path, run_on};
use crate::install;
use crate::shell::sh;
use crate::workspace::{root, target_dir};

/// The `spark-submit` inside the PySpark package that the machine's Python or the install's venv imports.
fn spark_submit() -> Result<String> {
    install::ensure_apt(&["default-jre-headless", "time"])?;
    install::ensure_pyspark()?;
    let find = "import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), 'bin', 'spark-submit'))";
    for python in [
        PathBuf::from("python3"),
        install::pyspark_venv().join("bin/python3"),
    ] {
        if let Ok(out) = Command::new(&python).args(["-c", find]).output() {
            let submit = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && submit.is_file() {
                return Ok(path(&submit));
            }
        }
    }
    bail!(
        "no spark-submit after installing PySpark (asked python3 and {})",
        install::pyspark_venv().display()
    )
}

pub fn run(frames: u64) -> Result<()> {
    let spec = BulkSpec {
        frames,
        ..BulkSpec::default()
    };
    let submit = spark_submit()?;
    build_release_analyzer(&[])?;
    let a = path(&release_analyzer());
    let file = bulk_capture(&spec)?;
    let f = path(&file);
    let work = target_dir().join("bench/spark");
    let ds = path(&work.join("dataset"));
    let small = path(&work.join("small"));
    let tables = path(&work.join("tables"));
    let job = path(&root().join("spark/rocetrace_job.py"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    // Warm the page cache, as the analyzer bench does.
    cpu_once(&[&a, "stats", &f])?;
    let load = load_average().unwrap_or_default();
    eprintln!("xtask: measuring stats");
    let stats = median_of_3(&[&a, "stats", &f])?;
    eprintln!("xtask: measuring decode --parquet");
    // Each run starts from an empty directory: the writer refuses to add to a dataset.
    let write =
        format!("rm -rf '{ds}' && exec '{a}' decode --parquet '{ds}' --collector bulk '{f}'");
    let written = median_of_3(&["sh", "-c", &write])?;
    // The writer decodes on one thread and encodes on another: with a core each, its wall-clock rate is
    // that of the slower thread.
    let written_2 = median_of_3_on("0,1", &["sh", "-c", &write])?;
    let ds_mb = dir_mb(&work.join("dataset"))?;
    sh(Command::new(&a).args([
        "decode",
        "-c",
        "1000",
        "--collector",
        "bulk",
        "--parquet",
        &small,
        &f,
    ]))?;
    let spark = |dataset: &str| -> Result<Run> {
        eprintln!("xtask: spark-submit --master local[1] on {dataset}");
        cpu_once(&[
            &submit,
            "--master",
            "local[1]",
            "--driver-memory",
            "2g",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--conf",
            "spark.ui.enabled=false",
            &job,
            dataset,
            &tables,
        ])
    };
    let startup = spark(&small)?;
    let job_run = spark(&ds)?;
    let n = spec.frames as f64;
    let job_cpu = (job_run.cpu - startup.cpu).max(0.001);
    let row = |what: &str, c: &Run| {
        format!(
            "| {what} | {:.2} | {:.2e} | {:.2} | {:.2e} | {:.0} |\n",
            c.wall,
            n / c.wall,
            c.cpu,
            n / c.cpu,
            c.rss_mb
        )
    };
    let report = format!(
        "Machine: {}, load average {} at the start (other work shares the cores: wall time \
         stretches with it, CPU time much less, so frames/s is given for both); every command pinned to core \
         0 (`taskset -c 0`) unless its row says otherwise, warm page cache. `stats` and `decode --parquet`: the run of median wall time of \
         3; the Spark job: one run (`spark-submit --master local[1]`, PySpark {}, {}).\n\n\
         Capture: `samples::bulk`, {} frames over {} QPs, snap length {} ({:.0} MB); the dataset {:.0} MB.\n\n\
         | what | wall s | frames/s (wall) | CPU s (user+sys) | frames/s (CPU) | peak RSS MB |\n\
         |---|---:|---:|---:|---:|---:|\n{}{}{}{}\
         | Spark job less its start-up ({:.1} CPU s on 1,000 frames) | – | – | {job_cpu:.1} | {:.2e} | – |\n\n\
         Per core, the Spark job processes {:.0}× fewer frames per CPU second than `stats` (start-up \
         excluded), and `decode --parquet` {:.1}× fewer; a cluster makes the job's share up with cores (its work \
         divides over the row groups, one task each; its shuffles carry one row per flow, pause source or \
         distinct packet, and one per request packet for the PSN analysis).\n",
        cores_of_cpu(),
        load,
        install::PYSPARK.trim_start_matches("pyspark=="),
        java_version(),
        spec.frames,
        spec.qps,
        spec.snaplen.map_or("none".into(), |s| format!("{s} B")),
        std::fs::metadata(&file)?.len() as f64 / 1e6,
        ds_mb,
        row("`roce-analyzer stats`", &stats),
        row(
            "`roce-analyzer decode --parquet` (both threads on the one core)",
            &written
        ),
        row(
            "`roce-analyzer decode --parquet`, a core per thread (`taskset -c 0,1`)",
            &written_2
        ),
        row(
            "Spark job, one executor core (local[1]), whole run",
            &job_run
        ),
        startup.cpu,
        n / job_cpu,
        (n / stats.cpu) / (n / job_cpu),
        (n / stats.cpu) / (n / written.cpu),
    );
    println!("{report}");
    let intro = "## Many collectors: `cargo xtask bench --spark`\n\nHow: docs/spark.md's dataset writer and \
                 Spark job against `stats`, on the analyzer bench's capture (see the module comment of \
                 xtask/src/bench/spark.rs for what one local-mode core stands for).\n";
    benchmarks_md::update("spark", &report, intro)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn java_version() -> String {
    Command::new("java")
        .arg("-version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "java".into())
}

/// Runs `argv` on the listed cores (`taskset -c` syntax), stdout to /dev/null. Nothing is subtracted for
/// the wrappers' start: these runs take seconds.
fn cpu_once_on(cores: &str, argv: &[&str]) -> Result<Run> {
    let run = run_on(cores, argv, 0.0, Stdio::inherit())?;
    Ok(Run {
        wall: run.wall.max(0.01),
        cpu: run.cpu.max(0.01),
        rss_mb: run.rss_mb,
    })
}

/// Runs `argv` on core 0.
fn cpu_once(argv: &[&str]) -> Result<Run> {
    cpu_once_on("0", argv)
}

/// The run of median wall time of three, on core 0.
fn median_of_3(argv: &[&str]) -> Result<Run> {
    median_of_3_on("0", argv)
}

/// The run of median wall time of three, on the listed cores.
fn median_of_3_on(cores: &str, argv: &[&str]) -> Result<Run> {
    let mut runs = vec![
        cpu_once_on(cores, argv)?,
        cpu_once_on(cores, argv)?,
        cpu_once_on(cores, argv)?,
    ];
    runs.sort_by(|a, b| a.wall.total_cmp(&b.wall));
    Ok(runs.swap_remove(1))
}
