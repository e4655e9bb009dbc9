//! Classification throughput on the realistic mix of
//! `shared/bench/gen_corpus.py` (read-only and mutating shell commands in
//! its proportions, 25:10). Plain `std::time` timing; prints commands/second
//! for the normal path and for tree-sitter alone.
//!
//! Run with `cargo bench -p toolgate-shell` (about two seconds).
#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::hint::black_box;
use std::time::{Duration, Instant};

use toolgate_shell::{analyze, analyze_tree_sitter_only, Analysis, Options, Script};

#[path = "../tests/common.rs"]
mod common;

use common::{BENCH_SAFE as SAFE, BENCH_UNSAFE as UNSAFE};

/// The mix: 25 read-only picks for every 10 mutating ones, in a fixed order.
fn mix() -> Vec<&'static str> {
    let mut state: u64 = 7;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    (0..4096)
        .map(|_| {
            if next() % 35 < 25 {
                SAFE[next() % SAFE.len()]
            } else {
                UNSAFE[next() % UNSAFE.len()]
            }
        })
        .collect()
}

fn measure(name: &str, budget: Duration, f: impl Fn(&str) -> Analysis) {
    let commands = mix();
    // Warm up (thread-local parser, caches).
    for c in commands.iter().take(256) {
        black_box(f(c));
    }
    let start = Instant::now();
    let mut done = 0u64;
    while start.elapsed() < budget {
        for c in &commands {
            black_box(f(black_box(c)));
        }
        done += commands.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name:<36} {:>12.0} commands/second ({done} commands in {secs:.2} s, one thread)",
        done as f64 / secs
    );
}

fn main() {
    // git commands ask a repository oracle; this one answers without I/O, so
    // the benchmark measures analysis alone (the binary's probe is a few stats).
    let options = Options {
        project_root: "/work/proj".into(),
        repo_oracle: Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository)),
        ..Options::default()
    };
    // `cargo bench` passes `--bench`; a number sets the seconds per measurement.
    let secs: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1.0);
    let budget = Duration::from_secs_f64(secs);
    measure("analyze (fast path + tree-sitter)", budget, |c| {
        analyze(Script::Text(c), &options)
    });
    measure("tree-sitter only", budget, |c| {
        analyze_tree_sitter_only(Script::Text(c), &options)
    });
}
