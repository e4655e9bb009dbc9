//! Golden transcripts: `tests/transcripts/NAME.in.jsonl` is fed to the real
//! binary and its normalised stdout compared with `NAME.out.jsonl`.
//! `UPDATE_EXPECT=1 cargo test -p toolgate --test it transcripts::` rewrites the expectations.
//!
//! In an `.in.jsonl` file, lines starting with `#` are directives or comments:
//!
//! - `# args: --mode plan --ask-timeout 1`: command-line arguments (shell
//!   words); `$STATE` stands for the transcript's own state directory (fresh
//!   and empty at the start, a sibling of the project directory) and `$ROOT`
//!   for the project root;
//! - `# policy: {...}`: written to `toolgate.json` in the project root;
//! - `# file: PATH`: an empty file (and its directories) in the project root,
//!   for what the broker finds on the disk (globs are expanded there);
//!   `# file: repo/.git/HEAD` makes `repo` a repository root;
//! - `# write: PATH` followed by lines `#| TEXT`: a file in the project root
//!   (and its directories) holding those lines (comments and all, such as an
//!   `opencode.json`);
//! - `# cwd: DIR`: the broker starts in this directory of the project root
//!   (created) instead of the project root itself;
//! - `# env: NAME=VALUE`: an environment variable;
//! - `# exit: 2`: the exit code every run must end with (default 0);
//! - `# stderr: text`: a piece of stderr (of any run; `$ROOT`, `$STATE` substituted);
//! - `# wait: N`: wait until the current run has written N lines;
//! - `# sleep: MS`: pause;
//! - `# hex: ff fe 0a`: send raw bytes; `# long-line: N`: send a line of N bytes;
//! - `# restart`: end the current run (close stdin, wait for the exit, check
//!   the exit code) and start the binary again with the same arguments,
//!   environment, project and state directory. The expected output is the
//!   outputs of all runs one after the other, each beginning with its `ready`;
//! - `# state-file: TEXT`: before the run it belongs to starts, write TEXT
//!   (`$ROOT` substituted) as the project's state file in `$STATE`;
//! - `# state-moved-aside: N`: after the run it belongs to ends, exactly N
//!   `*.corrupt-*` files are in `$STATE`;
//! - anything else after `#` is a comment.
//!
//! In frames sent, `per_N` stands for the N-th permission id the broker wrote
//! (counting across runs); the harness waits for it to appear. In the output,
//! permission and grant ids are numbered in order of appearance across runs,
//! timestamps and grants' ends (`expiresAt`) are 0, the project root is
//! `$ROOT` and the state directory `$STATE`. Every run is checked on its own for one decision per call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support;

fn transcripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts")
}

#[test]
fn transcripts() {
    let dir = transcripts_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".in.jsonl").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(
        names.len() >= 10,
        "expected the transcript suite in {}",
        dir.display()
    );
    let filter = std::env::var("TRANSCRIPT").ok();
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for name in &names {
        if filter
            .as_deref()
            .is_some_and(|filter| !name.contains(filter))
        {
            continue;
        }
        if let Err(message) = run_transcript(&dir, name, update) {
            failures.push(format!("--- {name}\n{message}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} transcript(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_transcript(dir: &Path, name: &str, update: bool) -> Result<(), String> {
    let input = std::fs::read_to_string(dir.join(format!("{name}.in.jsonl"))).unwrap();
    let (actual, mut problems) = run_input(name, &input);
    let expected_path = dir.join(format!("{name}.out.jsonl"));
    if update {
        std::fs::write(&expected_path, &actual).unwrap();
    } else {
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            problems.push(diff(&expected, &actual));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The example session in docs/protocol.md is replayed and must match the output shown there.
#[test]
fn protocol_md_example_is_real() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/protocol.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let block = |tag: &str| -> (usize, usize) {
        let open = format!("```jsonl {tag}\n");
        let start = text
            .find(&open)
            .unwrap_or_else(|| panic!("docs/protocol.md has no {tag} block"))
            + open.len();
        let end = start + text[start..].find("```").unwrap();
        (start, end)
    };
    let (in_start, in_end) = block("example-in");
    let input = format!("# args: --mode plan\n{}", &text[in_start..in_end]);
    let (actual, problems) = run_input("protocol-example", &input);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let (out_start, out_end) = block("example-out");
    if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
        let mut updated = text.clone();
        updated.replace_range(out_start..out_end, &actual);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        text[out_start..out_end] == actual,
        "docs/protocol.md's example output is stale (UPDATE_EXPECT=1 to rewrite):\n{}",
        diff(&text[out_start..out_end], &actual)
    );
}

/// The README's first command replays `examples/session.jsonl` in plan mode;
/// its normalised output is kept in `examples/session.out.jsonl`.
#[test]
fn readme_example_session_is_real() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let session = std::fs::read_to_string(examples.join("session.jsonl")).unwrap();
    let input = format!("# args: --mode plan\n{session}");
    let (actual, problems) = run_input("readme-example", &input);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let expected_path = examples.join("session.out.jsonl");
    if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
        std::fs::write(&expected_path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
    assert!(
        expected == actual,
        "examples/session.out.jsonl is stale (UPDATE_EXPECT=1 to rewrite):\n{}",
        diff(&expected, &actual)
    );
}

/// The pages that show exchanges: the README and every Markdown page under
/// `docs/`, sorted, as paths relative to the repository.
fn documentation_pages(repository: &Path) -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut found = Vec::new();
    let mut stack = vec![repository.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path.strip_prefix(repository).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    pages.extend(found);
    pages
}

/// The fenced blocks of a page that show an exchange (a `→` line).
fn exchanges(text: &str) -> Vec<Vec<&str>> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some(Vec::new()),
            }
        } else if let Some(block) = current.as_mut() {
            block.push(line);
        }
    }
    blocks
        .into_iter()
        .filter(|block| block.iter().any(|line| line.starts_with("→ ")))
        .collect()
}

/// Every exchange the documentation shows (`→` lines sent, `←` lines
/// answered, in a fenced block of the README or of any page under `docs/`)
/// is replayed through the binary in the default mode. A `…` in a `←` line
/// stands for any text; `per_…` in a `→` line is the id of the latest
/// request the block shows. The `ready` line is not shown in the pages and
/// not compared.
#[test]
fn documented_exchanges_are_real() {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let pages = documentation_pages(&repository);
    assert!(
        pages.len() > 1,
        "no page found under docs/: the page reader is broken"
    );
    let mut problems = Vec::new();
    let mut total = 0;
    for page in &pages {
        let text = std::fs::read_to_string(repository.join(page)).unwrap();
        let shown = exchanges(&text);
        if page == Path::new("README.md") {
            assert!(!shown.is_empty(), "the README's exchange was not found");
        }
        for (index, block) in shown.iter().enumerate() {
            total += 1;
            let mut input = String::new();
            let mut expected: Vec<&str> = Vec::new();
            let mut requests = 0;
            for line in block {
                if let Some(sent) = line.strip_prefix("→ ") {
                    input.push_str(&sent.replace("\"per_…\"", &format!("\"per_{requests}\"")));
                    input.push('\n');
                } else if let Some(answer) = line.strip_prefix("← ") {
                    if answer.contains("\"type\":\"permission_request\"") {
                        requests += 1;
                    }
                    expected.push(answer);
                }
            }
            let (actual, run_problems) = run_input(&format!("doc-exchange-{total}"), &input);
            problems.extend(run_problems);
            let actual: Vec<&str> = actual
                .lines()
                .filter(|line| !line.starts_with("{\"type\":\"ready\""))
                .collect();
            if actual.len() != expected.len()
                || !expected
                    .iter()
                    .zip(&actual)
                    .all(|(shown, real)| matches_shown(shown, real))
            {
                problems.push(format!(
                    "{} exchange {} is stale:\n  shown:\n    {}\n  real:\n    {}",
                    page.display(),
                    index + 1,
                    expected.join("\n    "),
                    actual.join("\n    ")
                ));
            }
        }
    }
    assert!(
        total >= 2,
        "the documentation's exchanges were not found ({total} in {pages:?})"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Does a line shown in the documentation (where `…` is any text) match a real one?
fn matches_shown(shown: &str, real: &str) -> bool {
    let pieces: Vec<&str> = shown.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return shown == real;
    }
    if !real.starts_with(first) || !real[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &real[first.len()..real.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn shown_lines_match_with_ellipses() {
    let cases = [
        ("{\"a\":1}", "{\"a\":1}", true),
        ("{\"a\":1}", "{\"a\":2}", false),
        ("{\"a\":…,\"b\":2}", "{\"a\":[1,2],\"b\":2}", true),
        ("{\"a\":…,\"b\":2}", "{\"a\":[1,2],\"b\":3}", false),
        ("{\"id\":\"per_…\",…}", "{\"id\":\"per_1\",\"x\":1}", true),
        (
            "{\"id\":\"per_…\",…}",
            "{\"id\":\"grant_1\",\"x\":1}",
            false,
        ),
        ("ab…ba", "aba", false),
    ];
    for (shown, real, expected) in cases {
        assert_eq!(matches_shown(shown, real), expected, "{shown} / {real}");
    }
}

/// Run one transcript's input through the binary: the normalised output and any problems.
fn run_input(name: &str, input: &str) -> (String, Vec<String>) {
    let root = support::project_dir(name);
    let state = support::state_dir(name);
    let paths = |text: &str| {
        text.replace("$STATE", &state.to_string_lossy())
            .replace("$ROOT", &root.to_string_lossy())
    };
    let mut args: Vec<String> = Vec::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut expected_exit = 0;
    let mut expected_stderr: Vec<String> = Vec::new();
    let mut cwd = root.clone();
    let mut writing: Option<(PathBuf, String)> = None;
    let flush = |writing: &mut Option<(PathBuf, String)>| {
        if let Some((path, text)) = writing.take() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    };
    for line in input.lines() {
        if let Some(rest) = line.strip_prefix("#|") {
            let (_, text) = writing
                .as_mut()
                .expect("`#|` lines follow a `# write:` line");
            text.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            text.push('\n');
            continue;
        }
        flush(&mut writing);
        if let Some(rest) = line.strip_prefix("# write:") {
            writing = Some((root.join(rest.trim()), String::new()));
        } else if let Some(rest) = line.strip_prefix("# cwd:") {
            cwd = root.join(rest.trim());
            std::fs::create_dir_all(&cwd).unwrap();
        } else if let Some(rest) = line.strip_prefix("# args:") {
            let words = shlex::split(rest).expect("args are shell words");
            args.extend(words.iter().map(|word| paths(word)));
        } else if let Some(rest) = line.strip_prefix("# policy:") {
            std::fs::write(root.join("toolgate.json"), rest.trim()).unwrap();
        } else if let Some(rest) = line.strip_prefix("# file:") {
            let path = root.join(rest.trim());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        } else if let Some(rest) = line.strip_prefix("# env:") {
            let (key, value) = rest.trim().split_once('=').expect("NAME=VALUE");
            env.push((key.to_string(), value.to_string()));
        } else if let Some(rest) = line.strip_prefix("# exit:") {
            expected_exit = rest.trim().parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("# stderr:") {
            expected_stderr.push(paths(rest.trim()));
        }
    }
    flush(&mut writing);
    // The broker keys its state file by the project root as it sees it (its
    // working directory, symbolic links resolved).
    let state_file = toolgate::store::state_file(&state, &root.canonicalize().unwrap());

    let mut problems = Vec::new();
    let mut earlier: Vec<String> = Vec::new();
    let mut all_stderr = String::new();
    let runs: Vec<Vec<&str>> = input
        .lines()
        .collect::<Vec<_>>()
        .split(|line| line.trim_end() == "# restart")
        .map(<[&str]>::to_vec)
        .collect();
    let many = runs.len() > 1;
    for (index, run) in runs.iter().enumerate() {
        let label = if many {
            format!("run {}: ", index + 1)
        } else {
            String::new()
        };
        for line in run {
            if let Some(rest) = line.strip_prefix("# state-file:") {
                std::fs::write(&state_file, paths(rest.trim())).unwrap();
            }
        }
        let mut broker = support::Broker::start(&cwd, &args, &env);
        let mut sent_calls = 0usize;
        let mut moved_aside: Option<usize> = None;
        for line in run {
            if let Some(rest) = line.strip_prefix("# wait:") {
                let n: usize = rest.trim().parse().unwrap();
                broker.wait_for(&format!("{n} lines"), |lines| lines.len() >= n);
            } else if let Some(rest) = line.strip_prefix("# sleep:") {
                std::thread::sleep(Duration::from_millis(rest.trim().parse().unwrap()));
            } else if let Some(rest) = line.strip_prefix("# hex:") {
                let bytes: Vec<u8> = rest
                    .split_whitespace()
                    .map(|byte| u8::from_str_radix(byte, 16).unwrap())
                    .collect();
                // Each complete line sent this way is owed its decisions too
                // (the broker skips a byte order mark before the first frame).
                for sent in bytes.split(|&byte| byte == b'\n') {
                    sent_calls +=
                        readable_calls(sent.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(sent));
                }
                broker.send_raw(&bytes);
            } else if let Some(rest) = line.strip_prefix("# long-line:") {
                let n: usize = rest.trim().parse().unwrap();
                let mut bytes = vec![b'a'; n];
                bytes.push(b'\n');
                broker.send_raw(&bytes);
            } else if let Some(rest) = line.strip_prefix("# state-moved-aside:") {
                moved_aside = Some(rest.trim().parse().unwrap());
            } else if line.starts_with('#') {
                continue;
            } else {
                let line = substitute(&broker, &earlier, &paths(line));
                sent_calls += readable_calls(line.as_bytes());
                broker.send(&line);
            }
        }
        let (status, lines, stderr) = broker.finish();
        if status.code() != Some(expected_exit) {
            problems.push(format!(
                "{label}exit status {status}, expected {expected_exit}; stderr:\n{stderr}"
            ));
        }
        if expected_exit == 0 {
            let found = check_invariants(&lines, sent_calls);
            problems.extend(found.into_iter().map(|problem| format!("{label}{problem}")));
        }
        if let Some(expected) = moved_aside {
            let aside = corrupt_files(&state);
            if aside.len() != expected {
                problems.push(format!(
                    "{label}{} file(s) moved aside in the state directory, expected {expected}: {aside:?}",
                    aside.len()
                ));
            }
        }
        earlier.extend(lines);
        all_stderr.push_str(&stderr);
    }
    for piece in &expected_stderr {
        if !all_stderr.contains(piece.as_str()) {
            problems.push(format!("stderr lacks `{piece}`:\n{all_stderr}"));
        }
    }
    let actual = normalise(&earlier, &root, &state);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&state);
    (actual, problems)
}

/// The names of the `*.corrupt-*` files in `dir`.
fn corrupt_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.contains(".corrupt-"))
        .collect();
    names.sort();
    names
}

/// A tool_call whose callID can be read is owed exactly one decision: how
/// many a line holds (a line that is not JSON may hold several, `{..}{..}`,
/// or one whose `input` is not JSON).
fn readable_calls(line: &[u8]) -> usize {
    if let Ok(Value::Object(frame)) = serde_json::from_slice::<Value>(line) {
        let call = frame.get("type").and_then(Value::as_str) == Some("tool_call")
            && frame.get("callID").is_some_and(Value::is_string);
        if !call {
            return 0;
        }
        // `callID` given more than once: each distinct id is owed a decision.
        let mut ids: Vec<&str> = Vec::new();
        let found = toolgate_protocol::scan::scan(line);
        if let Some(head) = found.heads.first() {
            let all = head.earlier_call_ids.iter().chain(&head.call_id);
            for id in all.filter_map(toolgate_protocol::scan::Field::text) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        return ids.len().max(1);
    }
    if toolgate_protocol::decode(line).is_ok() {
        return 0;
    }
    toolgate_protocol::scan::scan(line)
        .heads
        .iter()
        .filter(|head| head.is_tool_call() && head.call_id().is_some())
        .count()
}

/// Every line is a JSON object with a type; every tool_call sent got exactly one
/// decision, except those refused as duplicates.
fn check_invariants(lines: &[String], sent_calls: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let mut decisions: HashMap<(String, String), usize> = HashMap::new();
    let mut duplicates = 0;
    for line in lines {
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(line) else {
            problems.push(format!("stdout line is not a JSON object: {line}"));
            continue;
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("decision") => {
                let key = (
                    frame["sessionID"].as_str().unwrap_or_default().to_string(),
                    frame["callID"].as_str().unwrap_or_default().to_string(),
                );
                *decisions.entry(key).or_default() += 1;
            }
            Some("error")
                if frame.get("code").and_then(Value::as_str) == Some("duplicate_call") =>
            {
                duplicates += 1
            }
            Some(_) => {}
            None => problems.push(format!("frame without type: {line}")),
        }
    }
    let total: usize = decisions.values().sum();
    if total + duplicates != sent_calls {
        problems.push(format!(
            "{sent_calls} tool_call lines sent, {duplicates} refused as duplicates, but {total} decisions written"
        ));
    }
    problems
}

/// Replace `per_N` / `grant_N` placeholders with the N-th permission or grant
/// id written by earlier runs and this one (waiting for it).
fn substitute(broker: &support::Broker, earlier: &[String], line: &str) -> String {
    let mut line = line.to_string();
    for prefix in ["per_", "grant_"] {
        let quoted = format!("\"{prefix}");
        let mut out = String::new();
        let mut rest = line.as_str();
        while let Some(at) = rest.find(&quoted) {
            let start = at + quoted.len();
            let digits: String = rest[start..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let after = start + digits.len();
            if digits.is_empty() || !rest[after..].starts_with('"') {
                out.push_str(&rest[..start]);
                rest = &rest[start..];
                continue;
            }
            let n: usize = digits.parse().unwrap();
            broker.wait_for(&format!("{prefix}{n}"), |lines| {
                ids_in_order(earlier.iter().chain(lines), prefix).len() >= n
            });
            let id = ids_in_order(earlier.iter().chain(&broker.lines()), prefix)[n - 1].clone();
            out.push_str(&rest[..at + 1]);
            out.push_str(&id);
            rest = &rest[after..];
        }
        out.push_str(rest);
        line = out;
    }
    line
}

/// Ids with `prefix` in order of first appearance.
fn ids_in_order<'a>(lines: impl IntoIterator<Item = &'a String>, prefix: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for line in lines {
        for id in find_ids(line, prefix) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// `prefix` followed by a UUID, wherever it occurs in `text`.
fn find_ids(text: &str, prefix: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(prefix) {
        let start = from + at;
        let id_end = start + prefix.len() + 36;
        if id_end <= text.len() && is_uuid(&text[start + prefix.len()..id_end]) {
            ids.push(text[start..id_end].to_string());
            from = id_end;
        } else {
            from = start + prefix.len();
        }
    }
    ids
}

fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn normalise(lines: &[String], root: &Path, state: &Path) -> String {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut counters: HashMap<&str, usize> = HashMap::new();
    let root = root.to_string_lossy().into_owned();
    let state = state.to_string_lossy().into_owned();
    let mut out = String::new();
    for line in lines {
        let mut line = line.replace(&state, "$STATE").replace(&root, "$ROOT");
        for prefix in ["per_", "grant_"] {
            for id in find_ids(&line.clone(), prefix) {
                let name = names
                    .entry(id.clone())
                    .or_insert_with(|| {
                        let counter = counters.entry(prefix).or_default();
                        *counter += 1;
                        format!("{prefix}{counter}")
                    })
                    .clone();
                line = line.replace(&id, &name);
            }
        }
        if let Some(at) = line.find("\"timestamp\":") {
            zero_number(&mut line, at + "\"timestamp\":".len());
        }
        // A grant's end is a time too: every one on the line.
        let mut from = 0;
        while let Some(at) = line[from..].find("\"expiresAt\":") {
            let start = from + at + "\"expiresAt\":".len();
            zero_number(&mut line, start);
            from = start;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The digits at `start` of `line` become `0`.
fn zero_number(line: &mut String, start: usize) {
    let end = start
        + line[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count();
    line.replace_range(start..end, "0");
}

fn diff(expected: &str, actual: &str) -> String {
    let expected: Vec<&str> = expected.lines().collect();
    let actual: Vec<&str> = actual.lines().collect();
    let mut out = String::from("output differs (run with UPDATE_EXPECT=1 to accept):\n");
    for i in 0..expected.len().max(actual.len()) {
        let (e, a) = (expected.get(i), actual.get(i));
        if e != a {
            out.push_str(&format!(
                "  line {}:\n    expected: {}\n    actual:   {}\n",
                i + 1,
                e.unwrap_or(&"<none>"),
                a.unwrap_or(&"<none>")
            ));
        }
    }
    out
}
