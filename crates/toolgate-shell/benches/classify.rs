//! Classification throughput on the realistic mix of
//! `shared/bench/gen_corpus.py` (read-only and mutating shell commands in
//! its proportions, 25:10). Plain `std::time` timing; prints commands/second
//! for the normal path and for tree-sitter alone.
//!
//! Then the growth for twice the input on both paths (a quadratic path
//! would show 4x; above 3x the benchmark fails).
//!
//! Run with `cargo bench -p toolgate-shell` (about three seconds).
#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::hint::black_box;
use std::time::{Duration, Instant};

use toolgate_shell::{analyze, analyze_tree_sitter_only, Analysis, Options, Script};

#[path = "../tests/it/common.rs"]
mod common;

/// The mix: 25 read-only picks for every 10 mutating ones, in a fixed order.
fn mix() -> Vec<&'static str> {
    let safe = common::bench_commands(&["reads"]);
    let unsafe_ = common::bench_commands(&["changes"]);
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
                safe[next() % safe.len()]
            } else {
                unsafe_[next() % unsafe_.len()]
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

/// The best of seven analyses of `script`, in turns with its partner so
/// that a burst of load slows both.
fn best_pair(options: &Options, small: &str, large: &str) -> (Duration, Duration) {
    let mut best = (Duration::MAX, Duration::MAX);
    for _ in 0..7 {
        let start = Instant::now();
        black_box(analyze(Script::Text(small), options));
        best.0 = best.0.min(start.elapsed());
        let start = Instant::now();
        black_box(analyze(Script::Text(large), options));
        best.1 = best.1.min(start.elapsed());
    }
    best
}

/// Twice the input must cost at most about twice the time (a quadratic path
/// would cost four times): prints the growth on both paths and fails above 3x.
fn growth(options: &Options) -> bool {
    let unit = "git log --oneline -n 5 2>/dev/null && rg -n 'fn main' src | head\n";
    let plain = "ls -la && git status; cat a | wc -l\n";
    let cases = [
        (
            "growth, tree-sitter (100 KB -> 200 KB)",
            unit.repeat(100_000 / unit.len()),
            unit.repeat(200_000 / unit.len()),
        ),
        (
            "growth, fast path (3000 -> 6000 lines)",
            plain.repeat(3000),
            plain.repeat(6000),
        ),
    ];
    let mut linear = true;
    for (name, small, large) in &cases {
        let (t1, t2) = best_pair(options, small, large);
        let ratio = t2.as_secs_f64() / t1.as_secs_f64().max(1e-9);
        let verdict = if ratio < 3.0 {
            "linear"
        } else {
            "WORSE THAN LINEAR"
        };
        println!("{name:<40} {ratio:>5.2}x ({t1:?} -> {t2:?}): {verdict}");
        linear &= ratio < 3.0;
    }
    linear
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
    if !growth(&options) {
        std::process::exit(1);
    }
}
