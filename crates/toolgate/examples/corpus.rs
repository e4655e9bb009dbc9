//! The benchmarks' corpus: N `tool_call` frames of one agent session, in the
//! mix an agent makes while it works: file reads (a few of guarded files and
//! of paths outside the project), searches, edits, shell commands that only
//! read (simple and compound) and ones that change things, web fetches and
//! an MCP tool. The same N and SEED give the same bytes on every machine.
//!
//!     cargo run --release --example corpus -- N [SEED] > corpus.jsonl
//!
//! | share | tool | input |
//! |---|---|---|
//! | 30 % | read | one of [`PATHS`] |
//! | 10 % | grep | a pattern under `src` |
//! | 15 % | edit | one of [`PATHS`] |
//! | 25 % | bash | a command that only reads (`corpus-commands.txt`) |
//! | 10 % | bash | one that changes things, or names any file |
//! | 5 % | webfetch | a documentation URL |
//! | 5 % | mcp__github__get_issue | the call's number |

use std::io::{BufWriter, Write};

/// The corpus's shell commands, by kind (see the file's header).
const COMMANDS: &str = include_str!("corpus-commands.txt");

/// The commands of `kinds`, in the file's order.
fn commands(kinds: &[&str]) -> Vec<&'static str> {
    COMMANDS
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('\t'))
        .filter(|(kind, _)| kinds.contains(kind))
        .map(|(_, command)| command)
        .collect()
}

/// Paths read and edited: the project's files, a guarded one, and two
/// outside the project.
const PATHS: &[&str] = &[
    "src/main.rs",
    "src/lib.rs",
    "crates/core/src/policy.rs",
    "README.md",
    "tests/e2e.rs",
    ".env",
    "/etc/passwd",
    "../outside/secret.txt",
];

/// splitmix64: a small, well-mixed generator, the same on every platform.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in 0..100.
    fn percent(&mut self) -> u64 {
        self.next() % 100
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        let len = items.len() as u64;
        items[(self.next() % len) as usize]
    }
}

fn frame(
    random: &mut Random,
    index: u64,
    research: &[&str],
    changes: &[&str],
) -> serde_json::Value {
    let (tool, input) = match random.percent() {
        0..=29 => ("read", serde_json::json!({"file_path": random.pick(PATHS)})),
        30..=39 => (
            "grep",
            serde_json::json!({"pattern": "fn \\w+", "path": "src"}),
        ),
        40..=54 => (
            "edit",
            serde_json::json!({"file_path": random.pick(PATHS), "old_string": "a", "new_string": "b"}),
        ),
        55..=79 => (
            "bash",
            serde_json::json!({"command": random.pick(research)}),
        ),
        80..=89 => ("bash", serde_json::json!({"command": random.pick(changes)})),
        90..=94 => (
            "webfetch",
            serde_json::json!({"url": "https://docs.rs/tokio/latest/tokio/"}),
        ),
        _ => (
            "mcp__github__get_issue",
            serde_json::json!({"owner": "o", "repo": "r", "number": index}),
        ),
    };
    serde_json::json!({
        "type": "tool_call",
        "callID": format!("c-{index}"),
        "sessionID": "main",
        "tool": tool,
        "input": input,
    })
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let count = args.next().map(|n| n.parse::<u64>());
    let seed = args.next().map(|n| n.parse::<u64>());
    let (count, seed) = match (count, seed) {
        (None, _) => (100_000, 7),
        (Some(Ok(count)), None) => (count, 7),
        (Some(Ok(count)), Some(Ok(seed))) => (count, seed),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "usage: corpus [N [SEED]] (whole numbers; default 100000 7)"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let research = commands(&["reads"]);
    let changes = commands(&["changes", "asks"]);
    let mut random = Random(seed);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for index in 0..count {
        let written =
            serde_json::to_writer(&mut out, &frame(&mut random, index, &research, &changes))
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
        if written.is_err() {
            return std::process::ExitCode::from(1);
        }
    }
    match out.flush() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::from(1),
    }
}
