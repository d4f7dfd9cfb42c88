//! `cargo xtask bench --spark`: the way to many collectors measured on one machine. The dataset writer
//! (`decode --parquet`), the Spark job in local mode with one executor core, and `stats`, each on one core
//! (`taskset -c 0`) over the same bulk capture, in frames per second.
//!
//! Spark's local mode runs the driver and the executor in one JVM, so one core here is one executor core
//! with the driver's overhead on top: a cluster's executors do the same work per core without that share.
//! Spark's start-up (JVM, session, planning) is measured apart, on a dataset of a thousand frames, and the
//! rate is given with and without it.

use std::process::Command;

use anyhow::{Result, bail};

use crate::bench::{
    bulk_capture, bulk_spec, cpu_model, measure, path, splice, time_once, wrapper_overhead,
};
use crate::{install, root, sh, target_dir};

/// `spark-submit` on PATH, else in the virtual environment `cargo xtask install` makes.
fn spark_submit() -> Result<String> {
    install::ensure_apt(&["default-jre-headless", "time"])?;
    install::ensure_pyspark()?;
    let on_path = Command::new("python3")
        .args(["-c", "import pyspark"])
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Ok("spark-submit".into());
    }
    let venv = install::pyspark_venv().join("bin/spark-submit");
    if !venv.is_file() {
        bail!(
            "no spark-submit after installing PySpark (looked on PATH and at {})",
            venv.display()
        );
    }
    Ok(path(&venv))
}

pub fn run(args: &[String]) -> Result<()> {
    let spec = bulk_spec(args, "bench --spark")?;
    let submit = spark_submit()?;
    sh(Command::new("cargo").args([
        "build",
        "--release",
        "-p",
        "analyzer",
        "--bin",
        "roce-analyzer",
    ]))?;
    let a = path(&target_dir().join("release/roce-analyzer"));
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
    time_once(&[&a, "stats", &f], 0.0)?;
    let overhead = wrapper_overhead()?;
    eprintln!("xtask: measuring stats");
    let (stats_s, stats_rss) = measure(&[&a, "stats", &f], overhead)?;
    eprintln!("xtask: measuring decode --parquet");
    // Each run starts from an empty directory: the writer refuses to add to a dataset.
    let write =
        format!("rm -rf '{ds}' && exec '{a}' decode --parquet '{ds}' --collector bulk '{f}'");
    let (write_s, write_rss) = measure(&["sh", "-c", &write], overhead)?;
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
    let spark = |dataset: &str| -> Result<(f64, f64)> {
        eprintln!("xtask: spark-submit --master local[1] on {dataset}");
        time_once(
            &[
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
            ],
            overhead,
        )
    };
    let (startup_s, _) = spark(&small)?;
    let (job_s, job_rss) = spark(&ds)?;
    let n = spec.frames as f64;
    let report = format!(
        "Machine: {} cores of {}; every command pinned to core 0 (`taskset -c 0`), wall time around the \
         process, warm page cache. `stats` and `decode --parquet`: median of 3 runs; the Spark job: one run \
         (`spark-submit --master local[1]`, PySpark {}, {}).\n\n\
         Capture: `samples::bulk`, {} frames over {} QPs, snap length {} ({:.0} MB); the dataset {:.0} MB.\n\n\
         | what | seconds | frames/s | peak RSS MB |\n|---|---:|---:|---:|\n\
         | `roce-analyzer stats` (one core) | {stats_s:.2} | {:.2e} | {stats_rss:.0} |\n\
         | `roce-analyzer decode --parquet` (one core) | {write_s:.2} | {:.2e} | {write_rss:.0} |\n\
         | Spark job, one executor core (local[1]), whole run | {job_s:.1} | {:.2e} | {job_rss:.0} |\n\
         | Spark job, the same less start-up ({startup_s:.1} s on 1,000 frames) | {:.1} | {:.2e} | – |\n\n\
         Per core, the Spark job reads and aggregates {:.1}× fewer frames per second than `stats` (the \
         start-up excluded); a cluster makes that up with cores: the job's work divides over the row groups \
         (one task each), and its shuffles carry one row per flow, pause source or distinct packet.\n",
        std::thread::available_parallelism().map_or(0, |c| c.get()),
        cpu_model(),
        install::PYSPARK.trim_start_matches("pyspark=="),
        java_version(),
        spec.frames,
        spec.qps,
        spec.snaplen.map_or("none".into(), |s| format!("{s} B")),
        std::fs::metadata(&file)?.len() as f64 / 1e6,
        ds_mb,
        n / stats_s,
        n / write_s,
        n / job_s,
        (job_s - startup_s).max(0.001),
        n / (job_s - startup_s).max(0.001),
        (n / stats_s) / (n / (job_s - startup_s).max(0.001)),
    );
    println!("{report}");
    let md = root().join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    let old = if old.contains("<!-- bench:spark -->") {
        old
    } else {
        format!(
            "{}\n\n## Many collectors: `cargo xtask bench --spark`\n\nHow: docs/spark.md's dataset writer and Spark \
             job against `stats`, on the analyzer bench's capture (see the module comment of \
             xtask/src/bench_spark.rs for what one local-mode core stands for).\n",
            old.trim_end()
        )
    };
    std::fs::write(&md, splice(&old, "spark", &report))?;
    let _ = std::fs::remove_dir_all(&work);
    eprintln!("xtask: updated {}", md.display());
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

/// Megabytes of the files under `dir`.
fn dir_mb(dir: &std::path::Path) -> Result<f64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                total += e.metadata()?.len();
            }
        }
    }
    Ok(total as f64 / 1e6)
}
