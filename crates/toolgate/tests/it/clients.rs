//! The minimal clients in `examples/clients/` (Python, Node) against the
//! real binary: their demo agent loop in plan mode and with questions
//! answered `once` and `reject`, and two questions pending at once answered
//! out of order, each reaching its own call. Skipped, saying so, where
//! python3 or node is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/clients")
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

const CALLS: &str = r#"[["bash", {"command": "ls"}],
 ["edit", {"filePath": "a.rs", "oldString": "a", "newString": "b"}],
 ["bash", {"command": "npm test"}]]"#;

/// Run `program ARGS` in a fresh project: (exit code, stdout).
fn run(name: &str, program: &str, args: &[&str]) -> (i32, String) {
    let dir = support::project_dir(name);
    std::fs::write(dir.join("calls.json"), CALLS).unwrap();
    let mut child = Command::new(program)
        .args(args)
        .current_dir(&dir)
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_PERMISSION")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A client that never gets its answer fails the test instead of hanging it.
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > support::PATIENCE {
            let _ = child.kill();
            panic!(
                "{program} {args:?} did not finish within {:?}",
                support::PATIENCE
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn demo(program: &str, script: &str) {
    if !have(program) {
        eprintln!("skipped: no {program} here");
        return;
    }
    let script = clients().join(script);
    let script = script.to_str().unwrap();
    let toolgate = env!("CARGO_BIN_EXE_toolgate");
    let (code, out) = run(
        &format!("client-{program}-plan"),
        program,
        &[
            script,
            "--toolgate",
            toolgate,
            "--mode",
            "plan",
            "calls.json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("bash {") && lines[0].contains(": runs (`ls` only reads"),
        "{out}"
    );
    assert!(
        lines[1].contains(": refused (plan mode does not allow file edits"),
        "{out}"
    );
    assert!(
        lines[2].contains(": refused (plan mode allows only read-only shell commands"),
        "{out}"
    );
    for (answer, verdict, reason) in [
        ("once", "runs", "the user allowed this call once"),
        ("reject", "refused", "the user rejected this call"),
    ] {
        let (code, out) = run(
            &format!("client-{program}-{answer}"),
            program,
            &[
                script,
                "--toolgate",
                toolgate,
                "--answer",
                answer,
                "calls.json",
            ],
        );
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(&format!("asked: a.rs -> {answer}")), "{out}");
        assert!(out.contains(&format!(": {verdict} ({reason})")), "{out}");
        assert!(
            out.contains(r#"{"command": "ls"}: runs"#) || out.contains(r#"{"command":"ls"}: runs"#),
            "{out}"
        );
    }
}

#[test]
fn the_python_client_runs_its_agent_loop_through_toolgate() {
    demo("python3", "toolgate_client.py");
}

#[test]
fn the_node_client_runs_its_agent_loop_through_toolgate() {
    demo("node", "toolgate_client.mjs");
}

/// Two calls pending at once (in two sessions: a `reject` also refuses the
/// other pending calls of its session); their questions answered in the
/// other order (the second `reject` with a message, then the first `once`):
/// each answer reaches its own call.
#[test]
fn two_questions_answered_out_of_order_reach_their_own_calls() {
    let toolgate = env!("CARGO_BIN_EXE_toolgate");
    let dir = clients();
    let python = format!(
        r#"
import sys, threading
sys.path.insert(0, {dir:?})
from toolgate_client import Toolgate
asked, both = [], threading.Barrier(2)
def on_question(request):
    asked.append(request["title"])
    both.wait()
    if request["title"] == "b.rs":
        return ("reject", "not b")
    first_done.wait()
    return "once"
first_done = threading.Event()
results = {{}}
with Toolgate([{toolgate:?}, "serve"], on_question=on_question) as gate:
    def call(path):
        results[path] = gate.check("s-" + path, "edit", {{"filePath": path}})
        if path == "b.rs":
            first_done.set()
    threads = [threading.Thread(target=call, args=(p,)) for p in ("a.rs", "b.rs")]
    [t.start() for t in threads]
    [t.join() for t in threads]
print(results["a.rs"]["decision"], results["b.rs"]["decision"], results["b.rs"].get("message"))
"#,
        dir = dir.to_str().unwrap()
    );
    let node = format!(
        r#"
import {{ Toolgate }} from {module:?};
let release;
const second = new Promise((resolve) => (release = resolve));
const onQuestion = async (request) => {{
  if (request.title === "b.rs") {{ return ["reject", "not b"]; }}
  await second;
  return "once";
}};
const gate = await Toolgate.spawn([{toolgate:?}, "serve"], {{ onQuestion }});
const a = gate.check("s-a", "edit", {{ filePath: "a.rs" }});
const b = gate.check("s-b", "edit", {{ filePath: "b.rs" }}).then((d) => {{ release(); return d; }});
const [da, db] = await Promise.all([a, b]);
console.log(da.decision, db.decision, db.message);
await gate.close();
"#,
        module = format!("file://{}/toolgate_client.mjs", dir.to_str().unwrap())
    );
    for (program, args) in [
        ("python3", vec!["-c", python.as_str()]),
        ("node", vec!["--input-type=module", "-e", node.as_str()]),
    ] {
        if !have(program) {
            eprintln!("skipped: no {program} here");
            continue;
        }
        let (code, out) = run(&format!("client-{program}-order"), program, &args);
        assert_eq!(code, 0, "{program}: {out}");
        assert_eq!(out.trim(), "allow deny not b", "{program}: {out}");
    }
}
