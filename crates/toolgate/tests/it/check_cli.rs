//! `toolgate check` through the spawned binary: a table of calls with the
//! answer and the steps each must show, and the promise that `check` and
//! `serve` never disagree: every call of a varied list is decided by both
//! (`serve` over stdio, in a fresh session per call) and compared.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use serde_json::{json, Value};

use crate::support;

/// `toolgate check ARGS` in `root` (the project root): exit code and JSON.
fn check(root: &Path, args: &[&str]) -> (i32, Value) {
    let root_arg = root.to_str().unwrap();
    let mut argv = vec!["check", "--json", "--project-root", root_arg];
    argv.extend_from_slice(args);
    let (code, out, err) = support::run(root, &argv, "");
    let value = serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("{args:?}: not one JSON object: {out:?}; stderr {err}"));
    (code, value)
}

/// The `text` of every step, as `permission subject → decision source`.
fn steps(answer: &Value) -> Vec<String> {
    answer["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            format!(
                "{} {} → {} {}",
                step["permission"].as_str().unwrap(),
                step["subject"].as_str().unwrap(),
                step["decision"].as_str().unwrap(),
                step["source"].as_str().unwrap()
            )
        })
        .collect()
}

/// Arguments, exit code, decision, source, steps.
type Case<'a> = (Vec<&'a str>, i32, &'a str, &'a str, Vec<&'a str>);

#[test]
fn check_shows_the_answer_and_each_step() {
    let dir = support::project_dir("check-table");
    let root = dir.canonicalize().unwrap();
    let rules = r#"{"bash":{"*":"ask","git *":"allow","git push *":"deny"}}"#;
    let mcp = r#"{"mcp__gw__invoke":{"*":"allow","gmail_delete*":"deny"}}"#;
    let cases: Vec<Case> = vec![
        (
            vec!["--mode", "plan", "--", "bash", "git push && ls"],
            1,
            "deny",
            "mode",
            vec!["bash git push → deny mode", "bash ls → allow mode"],
        ),
        (
            vec![
                "--permission",
                rules,
                "--",
                "bash",
                "git status && npm test",
            ],
            3,
            "ask",
            "rule",
            vec!["bash git status → allow rule", "bash npm test → ask rule"],
        ),
        (
            vec!["--permission", rules, "--", "Bash", "git push origin main"],
            1,
            "deny",
            "rule",
            vec!["bash git push origin main → deny rule"],
        ),
        // A disguised write is a step of its own kind.
        (
            vec!["--mode", "plan", "--", "run_shell_command", "cat a > b"],
            1,
            "deny",
            "mode",
            vec!["bash cat a >b → deny mode"],
        ),
        (
            vec!["--", "read", "/etc/passwd"],
            3,
            "ask",
            "rule",
            vec![
                "external_directory /etc/passwd → ask rule",
                "read /etc/passwd → allow mode",
            ],
        ),
        (
            vec!["--mode", "auto_edit", "--", "Write", "src/a.rs"],
            0,
            "allow",
            "mode",
            vec!["edit src/a.rs → allow mode"],
        ),
        (
            vec![
                "--session-scope",
                r#"{"commandPatterns":["ls *"]}"#,
                "--",
                "bash",
                "cat x",
            ],
            1,
            "deny",
            "scope",
            vec!["bash cat x → deny scope"],
        ),
        (
            vec!["--mode", "plan", "--", "mcp__github__create_issue"],
            1,
            "deny",
            "mode",
            vec!["mcp__github__create_issue * → deny mode"],
        ),
        (
            vec!["--input", r#"{"command": 7}"#, "--", "bash"],
            1,
            "deny",
            "invalid",
            vec![],
        ),
        // An MCP tool's subject is its `name` (the subject goes there).
        (
            vec![
                "--permission",
                mcp,
                "--",
                "mcp__gw__invoke",
                "gmail_delete_all",
            ],
            1,
            "deny",
            "rule",
            vec!["mcp__gw__invoke gmail_delete_all → deny rule"],
        ),
        (
            vec!["--permission", mcp, "--", "mcp__gw__invoke", "gmail_list"],
            0,
            "allow",
            "rule",
            vec!["mcp__gw__invoke gmail_list → allow rule"],
        ),
        // Without one, every deny rule of the permission may match.
        (
            vec![
                "--permission",
                mcp,
                "--input",
                "{}",
                "--",
                "mcp__gw__invoke",
            ],
            1,
            "deny",
            "rule",
            vec!["mcp__gw__invoke * → deny rule"],
        ),
        // Roo Code's `use_mcp_tool` is judged as the MCP call it makes.
        (
            vec![
                "--permission",
                mcp,
                "--input",
                r#"{"server_name":"gw","tool_name":"invoke","arguments":"{\"name\":\"gmail_delete_all\"}"}"#,
                "--",
                "use_mcp_tool",
            ],
            1,
            "deny",
            "rule",
            vec!["mcp__gw__invoke gmail_delete_all → deny rule"],
        ),
        (
            vec![
                "--input",
                r#"{"server_name":"gw","tool_name":7}"#,
                "--",
                "use_mcp_tool",
            ],
            1,
            "deny",
            "invalid",
            vec![],
        ),
    ];
    let mut failures = Vec::new();
    for (args, code, decision, source, expected) in &cases {
        let (actual_code, answer) = check(&root, args);
        let actual = (
            actual_code,
            answer["decision"].as_str().unwrap(),
            answer["source"].as_str().unwrap(),
            steps(&answer),
        );
        if actual
            != (
                *code,
                *decision,
                *source,
                expected.iter().map(|s| s.to_string()).collect(),
            )
        {
            failures.push(format!(
                "{args:?}\n  expected {code} {decision} {source} {expected:?}\n  actual   {actual:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every rule that matched is listed in the policy's order, the winner
/// marked; a simple command says why it is not read-only; what `always`
/// would grant is shown for a question.
#[test]
fn check_lists_the_rules_that_lost_and_the_always_patterns() {
    let dir = support::project_dir("check-rules");
    let root = dir.canonicalize().unwrap();
    std::fs::write(
        root.join("toolgate.json"),
        r#"{"permission":{"bash":{"npm *":"allow","npm publish *":"ask"}}}"#,
    )
    .unwrap();
    let (code, answer) = check(
        &root,
        &[
            "--permission",
            r#"{"bash":{"*":"ask"}}"#,
            "--",
            "bash",
            "npm publish --tag x",
        ],
    );
    assert_eq!(code, 3, "{answer}");
    let step = &answer["steps"][0];
    assert_eq!(step["readOnly"], false, "{step}");
    assert_eq!(
        step["notReadOnly"], "`npm` is not a known read-only program",
        "{step}"
    );
    let matched: Vec<(String, String, bool)> = step["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| {
            (
                rule["pattern"].as_str().unwrap().to_string(),
                rule["origin"]
                    .as_str()
                    .unwrap()
                    .replace(root.to_str().unwrap(), "$ROOT"),
                rule["decides"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        matched,
        vec![
            (
                "npm *".to_string(),
                "$ROOT/toolgate.json".to_string(),
                false
            ),
            (
                "npm publish *".to_string(),
                "$ROOT/toolgate.json".to_string(),
                false
            ),
            ("*".to_string(), "--permission".to_string(), true),
        ]
    );
    assert_eq!(
        answer["question"]["alwaysOptions"],
        json!([["npm publish --tag x"], ["npm publish *"]]),
        "{answer}"
    );
    // The text form says the same for a person.
    let (code, text, _) = support::run(
        &root,
        &[
            "check",
            "--project-root",
            root.to_str().unwrap(),
            "--permission",
            r#"{"bash":{"*":"ask"}}"#,
            "--",
            "bash",
            "npm publish --tag x",
        ],
        "",
    );
    assert_eq!(code, 3);
    for line in [
        "decision   ask (source rule): the `--permission` rule `bash: *` asks before `npm publish --tag x`",
        "  command  not read-only: `npm` is not a known read-only program",
        "  rule     `bash: npm *` allow (",
        "  rule     `bash: *` ask (--permission) decides `npm publish --tag x`",
        "  always   would grant `npm publish *`",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `use_mcp_tool` call shows the MCP call it makes, the subject fields of
/// that tool, and on each step the `use_mcp_tool` rules that tighten it.
#[test]
fn check_shows_the_mcp_call_use_mcp_tool_makes() {
    let dir = support::project_dir("check-use-mcp");
    let root = dir.canonicalize().unwrap();
    let rules = r#"{"mcp__gw__invoke":{"*":"allow"},"use_mcp_tool":{"mcp__gw__*":"ask"}}"#;
    let input =
        r#"{"server_name":"gw","tool_name":"invoke","arguments":"{\"name\":\"gmail_list\"}"}"#;
    let args = [
        "--permission",
        rules,
        "--input",
        input,
        "--",
        "use_mcp_tool",
    ];
    let (code, answer) = check(&root, &args);
    assert_eq!(code, 3, "{answer}");
    assert_eq!(answer["permission"], "mcp__gw__invoke");
    assert_eq!(
        answer["calls"],
        json!({"tool": "mcp__gw__invoke", "serverName": "gw", "toolName": "invoke", "arguments": {"name": "gmail_list"}})
    );
    assert_eq!(
        answer["subjectFields"],
        json!({"fields": ["name", "command", "path", "url"], "declared": false})
    );
    let step = &answer["steps"][0];
    assert_eq!(step["subject"], "gmail_list");
    assert_eq!(
        step["via"],
        json!({"permission": "use_mcp_tool", "name": "mcp__gw__invoke"})
    );
    assert_eq!(
        step["reason"],
        "the `--permission` rule `use_mcp_tool: mcp__gw__*` asks before `mcp__gw__invoke`"
    );
    let mut argv = vec!["check", "--project-root", root.to_str().unwrap()];
    argv.extend_from_slice(&args);
    let (code, text, _) = support::run(&root, &argv, "");
    assert_eq!(code, 3);
    for line in [
        "tool       use_mcp_tool → permission `mcp__gw__invoke`, kind other (a tool toolgate does not know: judged as other tools)\n",
        "calls      `mcp__gw__invoke` (server `gw`, tool `invoke`) with `arguments` as its input: judged as that call; the rules of `use_mcp_tool` are matched against `mcp__gw__invoke` and can only tighten\n",
        "subject    read from `name`, `command`, `path`, `url` (the default for MCP tools): each one given is judged\n",
        "step 1     mcp__gw__invoke `gmail_list`\n",
        "  via      `use_mcp_tool` rules match `mcp__gw__invoke` too (a deny or ask among them tightens)\n",
        "  rule     `mcp__gw__invoke: *` allow (--permission) matches `gmail_list`\n",
        "  rule     `use_mcp_tool: mcp__gw__*` ask (--permission) decides `mcp__gw__invoke`\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_flags_and_inputs_exit_2_naming_them() {
    let dir = support::project_dir("check-usage");
    for (args, message) in [
        (
            vec!["check", "--input", "[1]", "--", "bash"],
            "--input is not a JSON object",
        ),
        (
            vec!["check", "--input", "{", "--", "bash"],
            "--input is not JSON",
        ),
        (
            vec!["check", "--session-scope", "7", "--", "bash", "ls"],
            "--session-scope is not a scope",
        ),
        // A fresh session with no grants: the flags of a broker that keeps
        // state, asks or listens are not check's (clap names each).
        (
            vec!["check", "--state-dir", "/tmp", "--", "bash", "ls"],
            "unexpected argument '--state-dir'",
        ),
        (
            vec!["check", "--audit", "a.jsonl", "--", "bash", "ls"],
            "unexpected argument '--audit'",
        ),
        (
            vec!["check", "--on-ask", "deny", "--", "bash", "ls"],
            "unexpected argument '--on-ask'",
        ),
        (
            vec!["check", "--listen", "unix", "--", "bash", "ls"],
            "unexpected argument '--listen'",
        ),
        (
            vec!["check", "--approver", "tty", "--", "bash", "ls"],
            "unexpected argument '--approver'",
        ),
        // Before the subcommand, the same flags are refused, named.
        (
            vec![
                "--listen", "unix", "--audit", "a", "check", "--", "bash", "ls",
            ],
            "--audit, --listen cannot be used with `toolgate check`, which does not take them",
        ),
        (
            vec!["check", "--", "TodoWrite", "x"],
            "`TodoWrite` takes no subject",
        ),
        (
            vec!["check", "--permission", "{\"bash\":3}", "--", "bash", "ls"],
            "invalid policy",
        ),
    ] {
        let (code, out, err) = support::run(&dir, &args, "");
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check` and `serve` decide every call alike: decision, source and reason
/// (a question's reason for `ask`), each call in a fresh session.
#[test]
fn check_and_serve_never_disagree() {
    let dir = support::project_dir("check-serve");
    let root = dir.canonicalize().unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join(".env"), "X=1").unwrap();
    let rules = r#"{"bash":{"git push *":"deny","npm *":"ask","rm *":"deny"},"edit":{"*.lock":"deny"},"webfetch":{"https://docs.rs/*":"allow"},"mcp__gw__invoke":{"*":"allow","gmail_delete*":"deny","gmail_send*":"ask"},"mcp__sh__run":{"git *":"allow"}}"#;
    let calls: Vec<(&str, Value)> = vec![
        ("bash", json!({"command": "ls -la && git status"})),
        ("bash", json!({"command": "git push --force"})),
        ("bash", json!({"command": "echo hi > out.txt"})),
        ("bash", json!({"command": "sudo rm -rf /"})),
        ("bash", json!({"command": "bash -c 'rm -rf src'"})),
        ("bash", json!({"command": "npm test | tee log"})),
        ("bash", json!({"command": "cat .env"})),
        ("bash", json!({"command": "find . -name '*.rs' -delete"})),
        ("Bash", json!({"command": "cat /etc/hosts"})),
        ("bash", json!({"command": ["git", "log", "-1"]})),
        ("run_shell_command", json!({"command": "grep -r TODO src"})),
        ("exec_command", json!({"cmd": "sed -i s/a/b/ src/x"})),
        ("read", json!({"filePath": ".env"})),
        ("Read", json!({"file_path": "/etc/passwd"})),
        ("read", json!({"filePath": "src/main.rs"})),
        (
            "edit",
            json!({"filePath": "Cargo.lock", "oldString": "a", "newString": "b"}),
        ),
        ("Write", json!({"file_path": "src/new.rs", "content": "x"})),
        (
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: /tmp/x\n+x\n*** End Patch\n"}),
        ),
        ("webfetch", json!({"url": "https://docs.rs/serde"})),
        (
            "WebFetch",
            json!({"url": "https://evil.example/x", "prompt": "p"}),
        ),
        ("grep", json!({"pattern": "TODO", "path": "/"})),
        ("glob", json!({"pattern": "**/*.rs"})),
        (
            "Task",
            json!({"subagent_type": "Explore", "description": "d", "prompt": "p"}),
        ),
        ("mcp__github__create_issue", json!({"title": "t"})),
        ("mcp__gw__invoke", json!({"name": "gmail_delete_all"})),
        ("mcp__gw__invoke", json!({"name": "gmail_list"})),
        ("mcp__gw__invoke", json!({"name": "gmail_send_x"})),
        ("mcp__gw__invoke", json!({"name": {"x": 1}})),
        ("mcp__gw__invoke", json!({})),
        ("mcp__sh__run", json!({"command": "git status; rm -rf src"})),
        ("mcp__fs__read", json!({"path": "./.env"})),
        (
            "use_mcp_tool",
            json!({"server_name": "gw", "tool_name": "invoke", "arguments": "{\"name\":\"gmail_delete_all\"}"}),
        ),
        (
            "use_mcp_tool",
            json!({"server_name": "gw", "tool_name": "invoke", "arguments": {"name": "gmail_send_x"}}),
        ),
        (
            "use_mcp_tool",
            json!({"server_name": "sh", "tool_name": "run", "arguments": "{\"command\":\"git status\"}"}),
        ),
        (
            "use_mcp_tool",
            json!({"server_name": 3, "tool_name": "run"}),
        ),
        ("exit_plan_mode", json!({"plan": "do it"})),
        ("todowrite", json!({"todos": []})),
        ("bash", json!({"command": 7})),
    ];
    let mut failures = Vec::new();
    for mode in ["plan", "ask", "auto_edit", "auto", "readonly"] {
        // serve: one session per call, so that no call sees another's state.
        let mut input = String::new();
        for (n, (tool, call)) in calls.iter().enumerate() {
            input.push_str(&format!(
                "{}\n{}\n",
                json!({"type": "session_start", "sessionID": format!("s{n}"), "mode": mode}),
                json!({"type": "tool_call", "sessionID": format!("s{n}"), "callID": format!("c{n}"), "tool": tool, "input": call})
            ));
        }
        let root_arg = root.to_str().unwrap();
        let (code, out, err) = support::run(
            &root,
            &["serve", "--project-root", root_arg, "--permission", rules],
            &input,
        );
        assert_eq!(code, 0, "{err}");
        let frames: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (n, (tool, call)) in calls.iter().enumerate() {
            let id = format!("c{n}");
            let served = frames
                .iter()
                .find(|f| {
                    f["callID"] == id.as_str()
                        && (f["type"] == "decision" || f["type"] == "permission_request")
                })
                .unwrap_or_else(|| panic!("no answer for {id}: {out}"));
            let served = if served["type"] == "permission_request" {
                (
                    "ask".to_string(),
                    served["metadata"]["reason"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            } else {
                (
                    format!(
                        "{} {}",
                        served["decision"].as_str().unwrap(),
                        served["source"].as_str().unwrap()
                    ),
                    served["reason"].as_str().unwrap().to_string(),
                )
            };
            let (_, answer) = check(
                &root,
                &[
                    "--mode",
                    mode,
                    "--permission",
                    rules,
                    "--input",
                    &call.to_string(),
                    "--",
                    tool,
                ],
            );
            let checked = if answer["decision"] == "ask" {
                (
                    "ask".to_string(),
                    answer["reason"].as_str().unwrap().to_string(),
                )
            } else {
                (
                    format!(
                        "{} {}",
                        answer["decision"].as_str().unwrap(),
                        answer["source"].as_str().unwrap()
                    ),
                    answer["reason"].as_str().unwrap().to_string(),
                )
            };
            if served != checked {
                failures.push(format!(
                    "{mode} {tool} {call}\n  serve {served:?}\n  check {checked:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A declared `subject` through the binary: the fields read, the one each
/// step's subject came from, a nested field, and a call without it.
#[test]
fn check_shows_where_the_subject_came_from() {
    let dir = support::project_dir("check-subject");
    let root = dir.canonicalize().unwrap();
    let policy = root.join("toolgate.json");
    std::fs::write(
        &policy,
        json!({
            "tools": {
                "deploy": {"kind": "execute", "subject": ["args.env", "env"]},
                "mcp__sh__run": {"kind": "other", "permission": "sh"}
            },
            "permission": {
                "deploy": {"*": "ask", "staging*": "allow", "prod*": "deny"},
                "sh": {"*": "ask", "git *": "allow"}
            }
        })
        .to_string(),
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let cases: Vec<(Vec<&str>, i32, Value, Vec<Value>)> = vec![
        // The subject goes into the first declared field, nested.
        (
            vec!["--", "deploy", "prod-eu"],
            1,
            json!({"fields": ["args.env", "env"], "declared": true}),
            vec![
                json!({"subject": "prod-eu", "decision": "deny", "from": {"field": "args.env", "as": "text"}}),
            ],
        ),
        (
            vec!["--input", r#"{"env": "staging-2"}"#, "--", "deploy"],
            0,
            json!({"fields": ["args.env", "env"], "declared": true}),
            vec![
                json!({"subject": "staging-2", "decision": "allow", "from": {"field": "env", "as": "text"}}),
            ],
        ),
        (
            vec!["--input", r#"{"args": {}}"#, "--", "deploy"],
            1,
            json!({"fields": ["args.env", "env"], "declared": true}),
            vec![
                json!({"subject": "*", "decision": "deny", "from": {"field": null, "as": "unknown", "why": "the call gives none of `args.env`, `env`"}}),
            ],
        ),
        // A declared MCP tool keeps the default fields; a command is judged
        // simple command by simple command.
        (
            vec![
                "--input",
                r#"{"command": "git status && make"}"#,
                "--",
                "mcp__sh__run",
            ],
            3,
            json!({"fields": ["name", "command", "path", "url"], "declared": false}),
            vec![
                json!({"subject": "git status", "decision": "allow", "from": {"field": "command", "as": "command"}}),
                json!({"subject": "make", "decision": "ask", "from": {"field": "command", "as": "command"}}),
                json!({"permission": "bash", "subject": "git status", "decision": "allow"}),
                json!({"permission": "bash", "subject": "make", "decision": "allow"}),
            ],
        ),
        (
            vec!["--", "Bash", "ls"],
            0,
            Value::Null,
            vec![json!({"subject": "ls", "decision": "allow"})],
        ),
    ];
    for (args, code, fields, expected) in cases {
        let mut argv = vec!["--policy", policy];
        argv.extend_from_slice(&args);
        let (actual_code, answer) = check(&root, &argv);
        assert_eq!(actual_code, code, "{args:?}: {answer}");
        assert_eq!(answer["subjectFields"], fields, "{args:?}");
        let steps = answer["steps"].as_array().unwrap();
        assert_eq!(steps.len(), expected.len(), "{args:?}: {answer}");
        for (step, expected) in steps.iter().zip(&expected) {
            for (key, value) in expected.as_object().unwrap() {
                assert_eq!(&step[key], value, "{args:?} {key}: {step}");
            }
            if expected.get("from").is_none() {
                assert!(step.get("from").is_none(), "{args:?}: {step}");
            }
        }
    }
    // The text form says the same.
    let (code, out, err) = support::run(
        &root,
        &[
            "check",
            "--policy",
            policy,
            "--input",
            r#"{"args": {"env": 3}}"#,
            "--",
            "deploy",
        ],
        "",
    );
    assert_eq!(code, 3, "{out}{err}");
    for line in [
        "subject    read from `args.env`, `env` (declared in the policy's `tools`): each one given is judged\n",
        "step 1     deploy `3`\n  subject  from the input's `args.env`, matched as text\n",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `toolgate check` example of `docs/check.md` is what the binary prints.
#[test]
fn the_documented_example_is_the_output() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/check.md"))
            .unwrap();
    let start = page
        .find("$ toolgate check ")
        .expect("the example of docs/check.md");
    let block = &page[start..page[start..].find("```").unwrap() + start];
    let (command, expected) = block.split_once('\n').unwrap();
    // The command's two quoted arguments.
    let quoted: Vec<&str> = command.split('\'').collect();
    assert_eq!(quoted.len(), 5, "{command}");
    let dir = support::project_dir("check-docs-example");
    let (code, out, err) = support::run(
        &dir,
        &["check", "--permission", quoted[1], "--", "bash", quoted[3]],
        "",
    );
    assert_eq!(code, 3, "{err}");
    assert_eq!(
        out, expected,
        "docs/check.md's `toolgate check` example has drifted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example of an MCP call without its `name` in `docs/check.md` is what
/// the binary prints.
#[test]
fn the_documented_subject_example_is_the_output() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/check.md"))
            .unwrap();
    let start = page
        .find("$ toolgate check --permission '{\"mcp__")
        .expect("the MCP example of docs/check.md");
    let block = &page[start..page[start..].find("```").unwrap() + start];
    let (command, expected) = block.split_once('\n').unwrap();
    let quoted: Vec<&str> = command.split('\'').collect();
    assert_eq!(quoted.len(), 5, "{command}");
    let tool = quoted[4].trim().strip_prefix("-- ").unwrap();
    let dir = support::project_dir("check-docs-subject");
    let (code, out, err) = support::run(
        &dir,
        &[
            "check",
            "--permission",
            quoted[1],
            "--input",
            quoted[3],
            "--",
            tool,
        ],
        "",
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        out, expected,
        "docs/check.md's MCP `toolgate check` example has drifted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The text form shows the call's escape sequences and bidirectional
/// overrides escaped (`\x1b[2J`, `\u{202e}`), never raw: the tool name, the
/// input, each step's subject and the reasons built from it.
#[test]
fn check_shows_escape_sequences_visibly() {
    let dir = support::project_dir("check-escapes");
    let root = dir.canonicalize().unwrap();
    let command = "echo \u{1b}[2J\u{1b}]0;pwned\u{7} && cat \u{1b}[8mhidden\u{202e}txt.exe";
    let (code, out, err) = support::run(
        &root,
        &[
            "check",
            "--project-root",
            root.to_str().unwrap(),
            "--mode",
            "ask",
            "--",
            "bash",
            command,
        ],
        "",
    );
    assert_eq!(code, 3, "{out}\n{err}");
    for raw in ["\u{1b}", "\u{7}", "\u{9b}", "\u{202e}"] {
        assert!(!out.contains(raw), "{raw:?} raw in:\n{out}");
    }
    for shown in [
        r#"input      {"command":"echo \u001b[2J\u001b]0;pwned\u0007 && cat \u001b[8mhidden\u{202e}txt.exe"}"#,
        "step 1     bash `echo \\x1b[2J\\x1b]0;pwned\\x07 && cat \\x1b[8mhidden\\u{202e}txt.exe`",
        "  always   would grant `echo \\x1b[2J\\x1b]0;pwned\\x07 && cat \\x1b[8mhidden\\u{202e}txt.exe`",
        "asks       about bash [\"echo \\x1b[2J\\x1b]0;pwned\\x07 && cat \\x1b[8mhidden\\u{202e}txt.exe\"]",
    ] {
        assert!(out.contains(shown), "{shown:?} not in:\n{out}");
    }
    // What stderr says about the call is escaped too.
    let (code, out, err) = support::run(
        &root,
        &[
            "check",
            "--project-root",
            root.to_str().unwrap(),
            "--",
            "my\u{9b}tool\u{1b}[2J",
            "x",
        ],
        "",
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("toolgate check: `my\\u{9b}tool\\x1b[2J` takes no subject"),
        "{err}"
    );
}
