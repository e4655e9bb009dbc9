//! `toolgate replay` through the spawned binary, on real files: the golden
//! transcripts replayed give what `serve` gave for them, the same bytes
//! every time; a recording with UUID permission ids answers the replay's
//! questions; `--check`, `--summary` and `--compare` report what they
//! should; unusable input exits 2 naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support;

fn transcripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts")
}

/// `toolgate ARGS` in `dir` with HOME as the transcripts have it: exit
/// code, stdout, stderr.
fn toolgate(dir: &Path, args: &[&str]) -> (i32, String, String) {
    toolgate_in_mode(dir, args, None)
}

/// [`toolgate`] with `TOOLGATE_MODE` set to `mode`, when given.
fn toolgate_in_mode(dir: &Path, args: &[&str], mode: Option<&str>) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command.env_remove("TOOLGATE_MODE");
    if let Some(mode) = mode {
        command.env("TOOLGATE_MODE", mode);
    }
    let out = command
        .args(args)
        .current_dir(dir)
        .env("HOME", "/home/tester")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Shell words of a `# args:` line: blanks separate, single quotes quote.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// Directives a replay cannot follow: a running broker's state, timing,
/// raw bytes, restarts, its own exit code, or flags replay refuses.
fn unreplayable(line: &str) -> bool {
    const SKIP: &[&str] = &[
        "# cwd:",
        "# env:",
        "# exit:",
        "# wait:",
        "# sleep:",
        "# hex:",
        "# long-line:",
        "# restart",
        "# state-file:",
        "# state-moved-aside:",
    ];
    SKIP.iter().any(|prefix| line.starts_with(prefix))
        || (line.starts_with("# args:")
            && [
                "--state-dir",
                "--on-ask",
                "--ask-timeout",
                "--max-frame-bytes",
                " serve",
            ]
            .iter()
            .any(|flag| line.contains(flag)))
}

/// Grant ids numbered in order of appearance, as the transcripts have them
/// (a replay counts every grant made, shown or not).
fn renumber_grants(text: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\"grant_") {
        let (before, after) = rest.split_at(at + 1);
        out.push_str(before);
        let end = after.find('"').unwrap_or(after.len());
        let id = &after[..end];
        let n = match seen.iter().position(|known| known == id) {
            Some(n) => n + 1,
            None => {
                seen.push(id.to_string());
                seen.len()
            }
        };
        out.push_str(&format!("grant_{n}"));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every golden transcript a replay can follow, replayed: the output is the
/// expected output of `serve`, except that a question still open at the
/// end is denied as unanswered in the recording (source `replay`) instead
/// of by the broker's shutdown.
#[test]
fn the_golden_transcripts_replay_as_they_were_served() {
    let mut replayed = 0;
    let mut failures = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(transcripts())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".in.jsonl"))
        .collect();
    names.sort();
    for input in names {
        let text = std::fs::read_to_string(&input).unwrap();
        if text.lines().any(unreplayable) {
            continue;
        }
        let name = input
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".in.jsonl", "");
        let dir = support::project_dir(&format!("replay-{name}"));
        let root = dir.canonicalize().unwrap();
        let root_text = root.to_str().unwrap().to_string();
        let mut args: Vec<String> =
            vec!["replay".into(), "--project-root".into(), root_text.clone()];
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("# args:") {
                args.extend(words(&rest.replace("$ROOT", &root_text)));
            } else if let Some(policy) = line.strip_prefix("# policy:") {
                std::fs::write(root.join("toolgate.json"), policy.trim()).unwrap();
            } else if let Some(file) = line.strip_prefix("# file:") {
                let path = root.join(file.trim());
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, "").unwrap();
            } else if let Some(file) = line.strip_prefix("# write:") {
                let path = root.join(file.trim());
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                let mut body = String::new();
                while let Some(next) = lines.peek() {
                    let Some(content) = next.strip_prefix("#|") else {
                        break;
                    };
                    body.push_str(content.strip_prefix(' ').unwrap_or(content));
                    body.push('\n');
                    lines.next();
                }
                std::fs::write(path, body).unwrap();
            }
        }
        args.push(input.to_string_lossy().into_owned());
        // The mode `serve` was given is its default mode: for the replay
        // that is TOOLGATE_MODE (a `--mode` would hold for the whole
        // replay, setting the transcript's mode changes aside).
        let mut mode = None;
        let mut kept = Vec::new();
        let mut given = args.iter();
        while let Some(arg) = given.next() {
            match arg.as_str() {
                "--mode" | "--permission-mode" => mode = given.next().cloned(),
                other => match other
                    .strip_prefix("--mode=")
                    .or_else(|| other.strip_prefix("--permission-mode="))
                {
                    Some(value) => mode = Some(value.to_string()),
                    None => kept.push(arg.clone()),
                },
            }
        }
        let argv: Vec<&str> = kept.iter().map(String::as_str).collect();
        let (code, out, err) = toolgate_in_mode(&root, &argv, mode.as_deref());
        let expected = std::fs::read_to_string(input.with_file_name(format!("{name}.out.jsonl")))
            .unwrap()
            .replace(
                r#""source":"shutdown","reason":"the broker shut down before the question was answered""#,
                r#""source":"replay","reason":"the recording holds no answer to this question""#,
            );
        // The broker's own shutdown (a `shutdown` frame) stays a shutdown.
        let expected = if text.contains(r#""type":"shutdown""#) {
            expected.replace(
                r#""source":"replay","reason":"the recording holds no answer to this question""#,
                r#""source":"shutdown","reason":"the broker shut down before the question was answered""#,
            )
        } else {
            expected.replace(
                r#""reason":"the broker shut down before the question was answered"}"#,
                r#""reason":"the recording holds no answer to this question"}"#,
            )
        };
        let out = renumber_grants(&out.replace(&root_text, "$ROOT"));
        let expected = renumber_grants(&expected);
        replayed += 1;
        if code != 0 || out != expected {
            let diff: Vec<String> = expected
                .lines()
                .zip(out.lines().chain(std::iter::repeat("<nothing>")))
                .filter(|(a, b)| a != b)
                .take(2)
                .map(|(a, b)| format!("  expected {a}\n  replayed {b}"))
                .collect();
            failures.push(format!(
                "{name} (exit {code}): {} expected lines, {} replayed\n{}",
                expected.lines().count(),
                out.lines().count(),
                if diff.is_empty() {
                    err
                } else {
                    diff.join("\n")
                }
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        replayed >= 40,
        "only {replayed} transcripts could be replayed"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same files give the same bytes, every time: a whole directory of
/// recordings replayed twice.
#[test]
fn a_replay_is_byte_for_byte_deterministic() {
    let dir = support::project_dir("replay-twice");
    let root = dir.canonicalize().unwrap();
    let dir_arg = transcripts();
    let args = [
        "replay",
        "--project-root",
        root.to_str().unwrap(),
        dir_arg.to_str().unwrap(),
    ];
    let (code, first, err) = toolgate(&root, &args);
    assert_eq!(code, 0, "{err}");
    let (_, second, _) = toolgate(&root, &args);
    assert!(first.lines().count() > 1000, "{}", first.lines().count());
    assert!(first == second, "two replays of the same files differ");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session recorded from a live broker (random permission ids, wall-clock
/// timestamps, both directions in one file) replays with the recorded
/// answers reaching the replay's questions, the recorded times in them, and
/// `--check` finds every decision alike; under a stricter policy it lists
/// the one that changed and exits 1.
#[test]
fn a_live_recording_replays_and_checks() {
    let dir = support::project_dir("replay-live");
    let root = dir.canonicalize().unwrap();
    // Record: the agent's frames and the broker's answers, in order.
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--project-root", root.to_str().unwrap()])
        .current_dir(&root)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut recording = String::new();
    let mut read = |recording: &mut String| -> Value {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        recording.push_str(&line);
        serde_json::from_str(&line).unwrap()
    };
    let mut send = |recording: &mut String, frame: Value| {
        writeln!(stdin, "{frame}").unwrap();
        recording.push_str(&format!("{frame}\n"));
    };
    read(&mut recording); // ready
    send(
        &mut recording,
        json!({"type":"tool_call","sessionID":"s","callID":"c1","tool":"bash","input":{"command":"npm test"}}),
    );
    let question = read(&mut recording);
    assert!(
        question["permissionID"].as_str().unwrap().len() > 20,
        "{question}"
    );
    send(
        &mut recording,
        json!({"type":"permission_response","permissionID":question["permissionID"],"response":"always"}),
    );
    assert_eq!(read(&mut recording)["decision"], "allow");
    send(
        &mut recording,
        json!({"type":"tool_call","sessionID":"s","callID":"c2","tool":"bash","input":{"command":"npm test --watch"}}),
    );
    assert_eq!(read(&mut recording)["source"], "grant");
    send(
        &mut recording,
        json!({"type":"tool_call","sessionID":"s","callID":"c3","tool":"read","input":{"filePath":"a"}}),
    );
    assert_eq!(read(&mut recording)["decision"], "allow");
    send(
        &mut recording,
        json!({"type":"tool_call","sessionID":"s","callID":"c4","tool":"bash","input":{"command":"rm -rf x"}}),
    );
    let question = read(&mut recording);
    send(
        &mut recording,
        json!({"type":"permission_response","permissionID":question["permissionID"],"response":"reject","message":"no"}),
    );
    assert_eq!(read(&mut recording)["decision"], "deny");
    let recorded_time = question["timestamp"].as_u64().unwrap();
    drop(stdin);
    child.wait().unwrap();
    let file = root.join("live.jsonl");
    std::fs::write(&file, &recording).unwrap();
    let file_arg = file.to_str().unwrap();
    let root_arg = root.to_str().unwrap();

    let (code, out, err) = toolgate(&root, &["replay", "--project-root", root_arg, file_arg]);
    assert_eq!(code, 0, "{err}");
    let frames: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decisions: Vec<(String, String, String)> = frames
        .iter()
        .filter(|f| f["type"] == "decision")
        .map(|f| {
            (
                f["callID"].as_str().unwrap().to_string(),
                f["decision"].as_str().unwrap().to_string(),
                f["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = |c: &str, d: &str, s: &str| (c.to_string(), d.to_string(), s.to_string());
    assert_eq!(
        decisions,
        vec![
            expect("c1", "allow", "user"),
            expect("c2", "allow", "grant"),
            expect("c3", "allow", "mode"),
            expect("c4", "deny", "user"),
        ]
    );
    let questions: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "permission_request")
        .collect();
    assert_eq!(questions[0]["permissionID"], "per_1");
    assert_eq!(questions[1]["permissionID"], "per_2");
    assert_eq!(
        questions[1]["timestamp"], recorded_time,
        "the recorded time"
    );

    let (code, _, err) = toolgate(
        &root,
        &["replay", "--check", "--project-root", root_arg, file_arg],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("every recorded decision was replayed alike"),
        "{err}"
    );
    let (code, out, _) = toolgate(
        &root,
        &[
            "replay",
            "--check",
            "--project-root",
            root_arg,
            "--permission",
            r#"{"read":"deny"}"#,
            file_arg,
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("s c3 read `a`: recorded allow (ask mode allows file reads), replayed deny (rule: the `--permission` rule `read: *` denies `a`)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--summary` counts calls by tool, first answer and source, says how the
/// questions ended and which subjects were most often asked or denied.
#[test]
fn the_summary_counts_answers_and_names_the_subjects() {
    let dir = support::project_dir("replay-summary");
    let root = dir.canonicalize().unwrap();
    let mut frames = Vec::new();
    for n in 0..3 {
        frames.push(json!({"type":"tool_call","sessionID":"s","callID":format!("a{n}"),"tool":"bash","input":{"command":"npm test"}}));
    }
    frames.push(json!({"type":"tool_call","sessionID":"s","callID":"b","tool":"bash","input":{"command":"ls"}}));
    frames.push(json!({"type":"tool_call","sessionID":"s","callID":"c","tool":"read","input":{"filePath":"x"}}));
    frames.push(json!({"type":"tool_call","sessionID":"s","callID":"d","tool":"bash","input":{"command":"git push"}}));
    let text: String = frames.iter().map(|f| format!("{f}\n")).collect();
    std::fs::write(root.join("s.jsonl"), text).unwrap();
    let (code, out, err) = toolgate(
        &root,
        &[
            "replay",
            "--summary",
            "--project-root",
            root.to_str().unwrap(),
            "--permission",
            r#"{"bash":{"git push *":"deny"}}"#,
            root.join("s.jsonl").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let expected = "\
6 calls in 1 file

tool  answer    source       calls
bash  allow     mode             1
bash  ask       ask              3
bash  deny      rule             1
read  allow     mode             1

questions ended:
       3  deny (replay)

most often asked:
       3  bash: npm test

most often denied:
       3  bash: npm test
       1  bash: git push

replayed:
  mode: as recorded
  questions answered: 0 with a recorded answer, 0 with a recorded refusal, 0 inferred (the recording says only that the call ran); 3 left unanswered (the recording holds no answer: nobody was asked, or nothing says what became of the call)
";
    assert_eq!(out, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The reports show the recording's escape sequences and bidirectional
/// overrides escaped (`\x1b[2J`, `\u{202e}`), never raw.
#[test]
fn reports_show_escape_sequences_visibly() {
    let dir = support::project_dir("replay-escapes");
    let root = dir.canonicalize().unwrap();
    let command = "echo \u{1b}[2J\u{1b}]0;pwned\u{7}";
    let frames = [
        json!({"type":"tool_call","sessionID":"s\u{1b}[8m","callID":"c\u{202e}1","tool":"bash","input":{"command":command}}),
        json!({"type":"decision","sessionID":"s\u{1b}[8m","callID":"c\u{202e}1","decision":"allow","source":"user","reason":"ok"}),
    ];
    let text: String = frames.iter().map(|f| format!("{f}\n")).collect();
    let file = root.join("e.jsonl");
    std::fs::write(&file, text).unwrap();
    for (flag, shown) in [
        ("--summary", "bash: echo \\x1b[2J\\x1b]0;pwned\\x07"),
        (
            "--check",
            "s\\x1b[8m c\\u{202e}1 bash `echo \\x1b[2J\\x1b]0;pwned\\x07`: recorded allow",
        ),
    ] {
        let (_, out, err) = toolgate(
            &root,
            &[
                "replay",
                flag,
                "--project-root",
                root.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
        );
        for raw in ["\u{1b}", "\u{7}", "\u{202e}"] {
            assert!(!out.contains(raw), "{flag}: {raw:?} raw in:\n{out}");
        }
        assert!(
            out.contains(shown),
            "{flag}: {shown:?} not in:\n{out}\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--compare A B`: the calls answered differently, grouped by what
/// decided under B; exit 1 when there are some, 0 when there are none.
#[test]
fn compare_groups_the_changed_calls_by_rule() {
    let dir = support::project_dir("replay-compare");
    let root = dir.canonicalize().unwrap();
    let mut text = String::new();
    for (n, command) in ["npm test", "npm run build", "git status", "rm -rf build"]
        .iter()
        .enumerate()
    {
        text.push_str(&format!(
            "{}\n",
            json!({"type":"tool_call","sessionID":"s","callID":format!("c{n}"),"tool":"bash","input":{"command":command}})
        ));
    }
    std::fs::write(root.join("r.jsonl"), text).unwrap();
    std::fs::write(
        root.join("a.json"),
        r#"{"permission":{"bash":{"rm *":"deny"}}}"#,
    )
    .unwrap();
    std::fs::write(
        root.join("b.json"),
        r#"{"permission":{"bash":{"npm *":"allow","rm *":"deny"}}}"#,
    )
    .unwrap();
    let root_arg = root.to_str().unwrap();
    let file = root.join("r.jsonl");
    let (a, b) = (root.join("a.json"), root.join("b.json"));
    let (code, out, err) = toolgate(
        &root,
        &[
            "replay",
            "--project-root",
            root_arg,
            "--compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{err}");
    let out = out.replace(root_arg, "$ROOT");
    let expected = "\
2 of 4 calls answered differently under $ROOT/b.json than under $ROOT/a.json

rule `bash: npm *` allow ($ROOT/b.json): 2 calls
  ask → allow  bash `npm test` (s c0)
  ask → allow  bash `npm run build` (s c1)
";
    assert_eq!(out, expected);
    let (code, out, _) = toolgate(
        &root,
        &[
            "replay",
            "--project-root",
            root_arg,
            "--compare",
            a.to_str().unwrap(),
            a.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("0 of 4 calls answered differently"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_input_exits_2_naming_it() {
    let dir = support::project_dir("replay-usage");
    let root = dir.canonicalize().unwrap();
    std::fs::write(root.join("prose.jsonl"), "hello\n{\"x\":1}\n").unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    for (args, message) in [
        (vec!["replay", "missing.jsonl"], "cannot read missing.jsonl"),
        (
            vec!["replay", "prose.jsonl"],
            "prose.jsonl: not a recording toolgate can read",
        ),
        (vec!["replay", "empty"], "no .jsonl files to replay"),
        // A fresh broker answering from the recording: the flags of one
        // that keeps state, asks or listens are not replay's.
        (
            vec!["replay", "--state-dir", "/tmp", "prose.jsonl"],
            "unexpected argument '--state-dir'",
        ),
        (
            vec!["replay", "--ask-timeout", "5", "prose.jsonl"],
            "unexpected argument '--ask-timeout'",
        ),
        (
            vec!["replay", "--audit", "a.jsonl", "prose.jsonl"],
            "unexpected argument '--audit'",
        ),
        (
            vec!["replay", "--listen", "unix", "prose.jsonl"],
            "unexpected argument '--listen'",
        ),
        (
            vec![
                "replay",
                "--policy",
                "a.json",
                "--compare",
                "a.json",
                "b.json",
                "prose.jsonl",
            ],
            "--policy does not apply with --compare",
        ),
        (
            vec!["replay", "--permission", "{\"bash\":3}", "prose.jsonl"],
            "invalid policy",
        ),
    ] {
        let (code, out, err) = toolgate(&root, &args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    // A line that is not JSON in a recording is a warning, not a stop.
    std::fs::write(
        root.join("torn.jsonl"),
        "{\"type\":\"tool_call\",\"callID\":\"c\",\"tool\":\"read\",\"input\":{\"filePath\":\"a\"}}\n{\"type\":\"tool_ca\n",
    )
    .unwrap();
    let (code, out, err) = toolgate(&root, &["replay", "torn.jsonl"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("torn.jsonl:2: not a JSON frame"), "{err}");
    assert!(out.contains(r#""callID":"c","decision":"allow""#), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recorded answer may name its call instead of a question (`callID`,
/// and `sessionID` unless it is the default session): it answers the
/// replay's question about that call.
#[test]
fn an_answer_naming_its_call_answers_that_question() {
    let dir = support::project_dir("replay-by-call");
    let root = dir.canonicalize().unwrap();
    let lines = [
        json!({"type":"tool_call","callID":"c1","tool":"bash","input":{"command":"npm test"}}),
        json!({"type":"tool_call","callID":"c2","tool":"bash","input":{"command":"npm run build"}}),
        json!({"type":"permission_response","callID":"c2","response":"once"}),
        json!({"type":"permission_response","callID":"c1","response":"reject","message":"not now"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(root.join("r.jsonl"), text).unwrap();
    let (code, out, err) = toolgate(
        &root,
        &[
            "replay",
            "--project-root",
            root.to_str().unwrap(),
            root.join("r.jsonl").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let decisions: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["type"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 2, "{out}");
    assert_eq!(decisions[0]["callID"], "c2");
    assert_eq!(decisions[0]["source"], "user");
    assert_eq!(decisions[0]["decision"], "allow");
    assert_eq!(decisions[1]["callID"], "c1");
    assert_eq!(decisions[1]["decision"], "deny");
    assert_eq!(decisions[1]["message"], "not now");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FIFO (or a link to one) named `*.jsonl` in a directory replayed is
/// skipped with a warning naming it, instead of blocking the replay
/// forever on its open (issue 25 item 11); the regular files are replayed.
#[test]
fn a_fifo_in_a_replayed_directory_is_skipped() {
    let dir = support::project_dir("replay-fifo");
    std::fs::write(
        dir.join("a.jsonl"),
        "{\"type\":\"tool_call\",\"sessionID\":\"s\",\"callID\":\"c1\",\"tool\":\"read\",\"input\":{\"filePath\":\"README.md\"}}\n",
    )
    .unwrap();
    let fifo = dir.join("b.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink(&fifo, dir.join("c.jsonl")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--summary", "--mode", "plan", "."])
        .current_dir(&dir)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("replay blocked on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for name in ["b.jsonl", "c.jsonl"] {
        assert!(
            stderr.contains(name) && stderr.contains("not a regular file (a FIFO)"),
            "{name}: {stderr}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 call") || stdout.contains("calls"),
        "{stdout}"
    );
}

/// `--mode` on the command line holds for the whole replay of toolgate's
/// own frames too: a recorded `session_start` mode and a `set_mode` are set
/// aside (and counted); without it they apply.
#[test]
fn a_mode_given_holds_over_recorded_modes() {
    let dir = support::project_dir("replay-mode-given");
    let root = dir.canonicalize().unwrap();
    let frames = [
        json!({"type":"session_start","sessionID":"s","mode":"auto"}),
        json!({"type":"tool_call","sessionID":"s","callID":"w1","tool":"write","input":{"filePath":"a.txt","content":"x"}}),
        json!({"type":"set_mode","sessionID":"s","mode":"auto"}),
        json!({"type":"tool_call","sessionID":"s","callID":"w2","tool":"write","input":{"filePath":"b.txt","content":"x"}}),
    ];
    let text: String = frames.iter().map(|f| format!("{f}\n")).collect();
    std::fs::write(root.join("r.jsonl"), text).unwrap();
    let file = root.join("r.jsonl");
    let run = |args: &[&str]| {
        let mut argv = vec!["replay", "--project-root", root.to_str().unwrap()];
        argv.extend_from_slice(args);
        argv.push(file.to_str().unwrap());
        toolgate(&root, &argv)
    };
    let verdicts = |out: &str| -> Vec<String> {
        out.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|frame| frame["type"] == "decision")
            .map(|frame| {
                format!(
                    "{} {}",
                    frame["decision"].as_str().unwrap(),
                    frame["source"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (code, out, err) = run(&["--mode", "plan"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verdicts(&out), ["deny mode", "deny mode"], "{out}");
    let (_, summary, _) = run(&["--mode", "plan", "--summary"]);
    assert!(
        summary.contains("mode: plan for every session (--mode); 2 recorded modes set aside"),
        "{summary}"
    );
    let (code, out, err) = run(&[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verdicts(&out), ["allow mode", "allow mode"], "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
