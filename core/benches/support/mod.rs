//! Shared by the benchmarks: criterion set up with a known output directory, and a report
//! that reads criterion's estimates back to print each result as a ratio against the baseline
//! measured in the same run.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use criterion::Criterion;

/// Where criterion writes its estimates (the same place `cargo bench` would use).
pub fn output_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")));
    target.join("criterion")
}

/// When this run began: estimates written before it are an earlier run's.
static STARTED: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

pub fn criterion() -> Criterion {
    STARTED.get_or_init(std::time::SystemTime::now);
    Criterion::default()
        .output_directory(&output_dir())
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args()
}

/// Median time per iteration, in nanoseconds, of benchmark `group/id` as this run measured it.
pub fn median_ns(group: &str, id: &str) -> Option<f64> {
    // Criterion names a benchmark's directory after its id with `/` replaced.
    let path = output_dir()
        .join(group)
        .join(id.replace('/', "_"))
        .join("new/estimates.json");
    let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    if STARTED.get().is_none_or(|started| written < *started) {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// One line of the report: ours against the baseline, and the target.
pub struct Comparison<'a> {
    pub what: &'a str,
    pub group: &'a str,
    pub ours: &'a str,
    pub baseline: &'a str,
    pub baseline_name: &'a str,
    /// Bytes per iteration, to print a throughput.
    pub bytes: Option<u64>,
    pub target: &'a str,
}

pub fn report(title: &str, comparisons: &[Comparison<'_>]) {
    println!("\n== {title}: ratios against baselines measured in this run ==");
    for c in comparisons {
        let (Some(ours), Some(base)) = (median_ns(c.group, c.ours), median_ns(c.group, c.baseline))
        else {
            // A filtered run (`cargo bench -- decode`) measured only some of them.
            println!("{}: not measured in this run", c.what);
            continue;
        };
        let rate = match c.bytes {
            Some(bytes) => format!("{:.1} GB/s", bytes as f64 / ours),
            None => format!("{:.2} M/s", 1e3 / ours),
        };
        println!(
            "{}: mqstore {ours:.1} ns ({rate}), {} {base:.1} ns -> mqstore takes {:.2}x the baseline's time ({:.2}x as fast); target: {}",
            c.what,
            c.baseline_name,
            ours / base,
            base / ours,
            c.target
        );
    }
}
