//! `toolgate init AGENT` and `toolgate doctor` through the spawned binary,
//! with a scratch HOME and project: each agent's hook merged into an empty
//! and into a populated settings file (the rest kept, a second run changes
//! nothing, a backup of the old file, `--dry-run` writes nothing), and
//! doctor passing after init and failing, with what to fix, for a missing
//! program, a missing hook and a broker that does not answer. The real
//! agents run what init writes in `scripts/e2e-hooks` (scenario `init`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::support;

/// A scratch HOME and project under one directory.
struct Place {
    home: PathBuf,
    project: PathBuf,
}

fn place(name: &str) -> Place {
    let dir = support::project_dir(name);
    let dir = std::fs::canonicalize(dir).unwrap();
    let (home, project) = (dir.join("home"), dir.join("project"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    Place { home, project }
}

/// `toolgate ARGS` in the project, HOME the scratch home: exit code, stdout, stderr.
fn toolgate(place: &Place, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .args(args)
        .current_dir(&place.project)
        .env("HOME", &place.home)
        // No `codex` to trust a hook with (the real one runs in scripts/e2e-hooks).
        .env("PATH", "/usr/bin:/bin");
    for name in [
        "CODEX_HOME",
        "TOOLGATE_SOCKET",
        "TOOLGATE_MODE",
        "TOOLGATE_PERMISSION",
        "TOOLGATE_STATE_DIR",
        "GEMINI_CLI_TRUST_WORKSPACE",
        "XDG_CONFIG_HOME",
    ] {
        command.env_remove(name);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");

/// Each agent: its flag, its file (relative to project or home), its event,
/// matcher and timeout.
fn agents(
    place: &Place,
) -> Vec<(
    &'static str,
    &'static str,
    PathBuf,
    &'static str,
    &'static str,
    u64,
)> {
    vec![
        (
            "claude",
            "--project",
            place.project.join(".claude/settings.json"),
            "PreToolUse",
            "*",
            30,
        ),
        (
            "gemini",
            "--project",
            place.project.join(".gemini/settings.json"),
            "BeforeTool",
            ".*",
            30000,
        ),
        (
            "qwen",
            "--user",
            place.home.join(".qwen/settings.json"),
            "PreToolUse",
            "*",
            30000,
        ),
    ]
}

#[test]
fn init_json_agents_into_empty_and_populated_settings() {
    let place = place("json");
    for (agent, flag, file, event, matcher, timeout) in agents(&place) {
        // Empty: --dry-run writes nothing, then the file is created.
        let (code, out, _) = toolgate(&place, &["init", agent, flag, "--dry-run"], &[]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("--dry-run: nothing written"), "{out}");
        assert!(
            !file.exists(),
            "{agent}: --dry-run wrote {}",
            file.display()
        );
        let (code, out, _) = toolgate(&place, &["init", agent, flag], &[]);
        assert_eq!(code, 0, "{out}");
        let settings: Value = serde_json::from_str(&read(&file)).unwrap();
        let command = format!("{TOOLGATE} hook {agent}");
        let mut hook = json!({"type": "command", "command": command, "timeout": timeout});
        if agent == "gemini" {
            hook = json!({"name": "toolgate", "type": "command", "command": command, "timeout": timeout});
        }
        assert_eq!(
            settings,
            json!({"hooks": {event: [{"matcher": matcher, "hooks": [hook]}]}}),
            "{agent}"
        );
        assert!(!edit_backup(&file).exists(), "{agent}: a backup of nothing");

        // Populated: every other key and hook is kept, in its order.
        let before = json!({
            "model": "m",
            "hooks": {
                event: [{"matcher": "Bash", "hooks": [{"type": "command", "command": "my-linter"}]},
                        {"matcher": matcher, "hooks": [{"type": "command", "command": "/old/toolgate hook claude --mode plan"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "notify"}]}]
            },
            "env": {"B": "2", "A": "1"}
        });
        let text = serde_json::to_string(&before).unwrap();
        std::fs::write(&file, &text).unwrap();
        let (code, out, _) = toolgate(&place, &["init", agent, flag, "--dry-run"], &[]);
        assert_eq!(code, 0);
        assert!(
            out.contains(&format!("+             \"command\": \"{command}\"")),
            "{out}"
        );
        assert_eq!(read(&file), text, "{agent}: --dry-run changed the file");
        let (code, out, _) = toolgate(&place, &["init", agent, flag], &[]);
        assert_eq!(code, 0);
        assert!(out.contains("the old file is in"), "{out}");
        assert_eq!(
            read(&edit_backup(&file)),
            text,
            "{agent}: the backup is the old file"
        );
        let after: Value = serde_json::from_str(&read(&file)).unwrap();
        let mut want = before.clone();
        want["hooks"][event][1] = json!({"matcher": matcher, "hooks": [hook]});
        assert_eq!(after, want, "{agent}");
        let keys: Vec<&String> = after.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["model", "hooks", "env"], "{agent}: key order");
        let env_keys: Vec<&String> = after["env"].as_object().unwrap().keys().collect();
        assert_eq!(env_keys, ["B", "A"], "{agent}: key order");

        // Idempotent: the second run says so and touches nothing.
        let written = read(&file);
        std::fs::remove_file(edit_backup(&file)).unwrap();
        let (code, out, _) = toolgate(&place, &["init", agent, flag], &[]);
        assert_eq!(code, 0);
        assert!(out.contains("already there; nothing to change"), "{out}");
        assert_eq!(read(&file), written);
        assert!(
            !edit_backup(&file).exists(),
            "{agent}: a backup when nothing changed"
        );
    }
}

fn edit_backup(file: &Path) -> PathBuf {
    PathBuf::from(format!("{}.toolgate-backup", file.display()))
}

#[test]
fn init_codex_edits_toml_in_place_and_says_how_to_trust() {
    let place = place("codex");
    let codex_home = place.home.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let file = codex_home.join("config.toml");
    let before = "# my config\nmodel = \"gpt-5.5\" # the model\n\n[model_providers.stub]\nname = \"stub\"\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"my-linter\"\n";
    std::fs::write(&file, before).unwrap();
    let env = [("CODEX_HOME", codex_home.to_str().unwrap())];
    let (code, out, err) = toolgate(
        &place,
        &["init", "codex", "--user", "--socket", "/run/x.sock"],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    let after = read(&file);
    assert!(
        after.starts_with(before),
        "the old text is kept as it was:\n{after}"
    );
    assert!(
        after.ends_with(&format!(
            "\n[[hooks.PreToolUse]]\nmatcher = \"*\"\n\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"{TOOLGATE} hook codex --socket /run/x.sock\"\ntimeout = 60\n"
        )),
        "{after}"
    );
    assert_eq!(read(&edit_backup(&file)), before);
    let key = format!("{}:pre_tool_use:1:0", file.display());
    assert!(
        err.contains(&format!("hooks.state.\"{key}\".trusted_hash")),
        "{err}"
    );
    // Again: nothing changes.
    let (code, out, _) = toolgate(
        &place,
        &["init", "codex", "--user", "--socket", "/run/x.sock"],
        &env,
    );
    assert_eq!(code, 0);
    assert!(out.contains("nothing to change"), "{out}");
    assert_eq!(read(&file), after);
    // Without --socket: the hook is replaced, not doubled.
    toolgate(&place, &["init", "codex", "--user"], &env);
    let replaced = read(&file);
    assert_eq!(replaced.matches("hook codex").count(), 1, "{replaced}");
    assert!(replaced.contains("timeout = 30"), "{replaced}");
}

#[test]
fn init_opencode_writes_a_plugin_that_runs_the_hook() {
    let place = place("opencode");
    let plugin = place.project.join(".opencode/plugins/toolgate.js");
    let (code, out, err) = toolgate(&place, &["init", "opencode", "--dry-run"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("tool.execute.before") && !plugin.exists(),
        "{out}"
    );
    let (code, _, err) = toolgate(&place, &["init", "opencode"], &[]);
    assert_eq!(code, 0, "{err}");
    let text = read(&plugin);
    let program = env!("CARGO_BIN_EXE_toolgate");
    assert!(
        text.contains(&format!(
            r#"const TOOLGATE = ["{program}","hook","claude"];"#
        )),
        "{text}"
    );
    // Only `allow` lets a call run.
    assert!(text.contains(r#"if (answer.permissionDecision === "allow") return;"#));
    let (_, out, _) = toolgate(&place, &["init", "opencode"], &[]);
    assert!(out.contains("nothing to change"), "{out}");
    // With a broker: rewritten (the old one kept), the hook waiting longer.
    let (code, _, err) = toolgate(
        &place,
        &["init", "opencode", "--socket", "/run/t.sock"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let text = read(&plugin);
    assert!(
        text.contains(r#""--socket","/run/t.sock"]"#) && text.contains("timeout: 60000"),
        "{text}"
    );
    assert!(edit_backup(&plugin).exists());
    // The user's plugins are under XDG_CONFIG_HOME when it is set.
    let config = place.home.join("config");
    let config_env = config.display().to_string();
    let (code, _, err) = toolgate(
        &place,
        &["init", "opencode", "--user"],
        &[("XDG_CONFIG_HOME", &config_env)],
    );
    assert_eq!(code, 0, "{err}");
    assert!(config.join("opencode/plugins/toolgate.js").exists());
    // doctor: the project's plugin runs an executable hook that answers.
    let (code, out, _) = toolgate(&place, &["init", "opencode"], &[]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = toolgate(&place, &["doctor", "opencode"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("a dry-run read call is decided"), "{out}");
    // A toolgate.js of someone else's: init leaves it, doctor says so.
    std::fs::write(&plugin, "export const Mine = async () => ({});\n").unwrap();
    let (code, _, err) = toolgate(&place, &["init", "opencode"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("not written by `toolgate init opencode`"),
        "{err}"
    );
    assert_eq!(read(&plugin), "export const Mine = async () => ({});\n");
    let (code, out, _) = toolgate(&place, &["doctor", "opencode"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL") && out.contains("did not write"),
        "{out}"
    );
}

#[test]
fn init_refuses_a_file_it_cannot_parse() {
    let place = place("broken");
    let file = place.project.join(".claude/settings.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{\"hooks\": [").unwrap();
    let (code, _, err) = toolgate(&place, &["init", "claude"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be parsed"), "{err}");
    assert_eq!(read(&file), "{\"hooks\": [");
    // Valid, but `hooks` is not an object: left as it is.
    std::fs::write(&file, r#"{"hooks": "none"}"#).unwrap();
    let (code, _, err) = toolgate(&place, &["init", "claude"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`hooks` is not an object; toolgate will not change it, edit it by hand"),
        "{err}"
    );
    assert_eq!(read(&file), r#"{"hooks": "none"}"#);
    assert!(!edit_backup(&file).exists());
}

/// The lines of doctor's report that failed.
fn failed(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|line| line.starts_with("FAIL"))
        .collect()
}

#[test]
fn doctor_passes_after_init() {
    let place = place("doctor-ok");
    let codex_home = place.home.join(".codex");
    for (agent, flag) in [
        ("claude", "--project"),
        ("gemini", "--project"),
        ("qwen", "--project"),
        ("codex", "--user"),
    ] {
        let (code, _, err) = toolgate(&place, &["init", agent, flag], &[]);
        assert_eq!(code, 0, "{err}");
    }
    // Codex's trust and Gemini CLI's trusted folder are the user's to give.
    let (code, out, _) = toolgate(&place, &["doctor"], &[]);
    assert_eq!(code, 1, "{out}");
    let fails = failed(&out);
    assert_eq!(fails.len(), 2, "{out}");
    assert!(
        fails[0].contains("Codex has not trusted the hook")
            && fails[0].contains("fix: trust it once"),
        "{out}"
    );
    assert!(
        fails[1].contains("is not a trusted folder")
            && fails[1].contains("toolgate init gemini --user"),
        "{out}"
    );
    let config = codex_home.join("config.toml");
    let key = format!("{}:pre_tool_use:0:0", config.display());
    let mut text = read(&config);
    text.push_str(&format!(
        "\n[hooks.state.\"{key}\"]\ntrusted_hash = \"sha256:0\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    std::fs::create_dir_all(place.home.join(".gemini")).unwrap();
    std::fs::write(
        place.home.join(".gemini/trustedFolders.json"),
        json!({place.project.to_str().unwrap(): "TRUST_FOLDER"}).to_string(),
    )
    .unwrap();
    let (code, out, _) = toolgate(&place, &["doctor"], &[]);
    assert_eq!(code, 0, "{out}");
    for agent in ["claude", "codex", "gemini", "qwen"] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("ok   {agent} "))
                && l.contains("a dry-run read call is decided: allow")),
            "{agent}: {out}"
        );
    }
}

#[cfg(unix)]
#[test]
fn doctor_passes_with_a_running_broker() {
    let place = place("doctor-broker");
    let broker = support::Listening::start(&place.home.join("run"), &place.project, &[]);
    let socket = broker.socket.to_str().unwrap().to_string();
    let socket = socket.as_str();
    toolgate(&place, &["init", "claude", "--socket", socket], &[]);
    let (code, out, _) = toolgate(&place, &["doctor", "claude"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("the broker at {socket} answers")),
        "{out}"
    );
    assert!(
        out.contains("a dry-run read call is decided: allow"),
        "{out}"
    );
    drop(broker);
    let (code, out, _) = toolgate(&place, &["doctor", "claude"], &[]);
    assert_eq!(code, 1, "{out}");
    let fails = failed(&out);
    assert_eq!(fails.len(), 1, "{out}");
    assert!(
        fails[0].contains(&format!("no toolgate broker listens on {socket}")),
        "{out}"
    );
    assert!(
        fails[0].contains(&format!("fix: toolgate serve --listen unix:{socket}")),
        "{out}"
    );
}

#[test]
fn doctor_fails_a_broken_setup_saying_what_to_fix() {
    let place = place("doctor-broken");
    // No hook at all in Claude Code's settings.
    let claude = place.project.join(".claude/settings.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    std::fs::write(&claude, r#"{"model":"m"}"#).unwrap();
    // A program that does not exist, a matcher for one tool, a timeout in seconds.
    let qwen = place.project.join(".qwen/settings.json");
    std::fs::create_dir_all(qwen.parent().unwrap()).unwrap();
    std::fs::write(
        &qwen,
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "/nowhere/toolgate hook qwen", "timeout": 30}]}]}})
        .to_string(),
    )
    .unwrap();
    // A bare `toolgate` that is not on PATH.
    let gemini = place.home.join(".gemini/settings.json");
    std::fs::create_dir_all(gemini.parent().unwrap()).unwrap();
    std::fs::write(
        &gemini,
        json!({"hooks": {"BeforeTool": [{"matcher": ".*", "hooks": [
            {"type": "command", "command": "toolgate hook gemini", "timeout": 30000}]}]}})
        .to_string(),
    )
    .unwrap();
    let (code, out, _) = toolgate(&place, &["doctor"], &[("PATH", "/usr/bin:/bin")]);
    assert_eq!(code, 1, "{out}");
    let fails = failed(&out).join("\n");
    for want in [
        "FAIL claude: no toolgate hook in",
        "Claude Code runs its tools ungated; fix: toolgate init claude",
        "matcher \"Bash\" does not cover every tool",
        "timeout 30 is in milliseconds for qwen-code",
        "/nowhere/toolgate does not exist: qwen-code lets the call through",
        "`toolgate` is not on PATH: Gemini CLI lets the call through",
    ] {
        assert!(fails.contains(want), "{want:?} not in:\n{out}");
    }
    // Nothing configured at all.
    let empty = self::place("doctor-empty");
    let (code, out, _) = toolgate(&empty, &["doctor"], &[]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL toolgate: no agent's settings were found"),
        "{out}"
    );
}

/// A stand-in for `codex app-server` that lists the hook at `$CODEX_HOME/config.toml`
/// (group 0, hook 0) with a made-up hash and logs what it is asked to write.
const FAKE_CODEX: &str = r#"#!/usr/bin/env python3
import json, os, sys
assert sys.argv[1:] == ["app-server"], sys.argv
key = os.environ["CODEX_HOME"] + "/config.toml:pre_tool_use:0:0"
log = open(os.environ["FAKE_LOG"], "a")
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    result = {}
    if msg["method"] == "hooks/list":
        result = {"data": [{"cwd": msg["params"]["cwds"][0], "hooks": [
            {"key": key + ".other", "currentHash": "sha256:wrong"},
            {"key": key, "eventName": "preToolUse", "currentHash": "sha256:fake"}]}]}
    if msg["method"] == "config/value/write":
        log.write(json.dumps(msg["params"]) + "\n")
        log.flush()
    print(json.dumps({"id": msg["id"], "result": result}), flush=True)
"#;

#[cfg(unix)]
#[test]
fn init_codex_trusts_the_hook_through_the_app_server() {
    use std::os::unix::fs::PermissionsExt;
    let place = place("codex-trust");
    let fake = place.home.join("codex");
    std::fs::write(&fake, FAKE_CODEX).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let codex_home = place.home.join(".codex");
    let log = place.home.join("writes.jsonl");
    let env = [
        ("CODEX_HOME", codex_home.to_str().unwrap()),
        ("FAKE_LOG", log.to_str().unwrap()),
    ];
    let (code, _, err) = toolgate(
        &place,
        &["init", "codex", "--user", "--codex", fake.to_str().unwrap()],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let key = format!(
        "{}:pre_tool_use:0:0",
        codex_home.join("config.toml").display()
    );
    assert!(err.contains(&format!("trusts the hook {key}")), "{err}");
    assert!(!err.contains("trust it once"), "{err}");
    let written: Value = serde_json::from_str(read(&log).trim()).unwrap();
    assert_eq!(
        written,
        json!({"keyPath": format!("hooks.state.\"{key}\".trusted_hash"), "value": "sha256:fake", "mergeStrategy": "upsert"})
    );
    // --dry-run asks nobody.
    std::fs::remove_file(&log).unwrap();
    let (code, _, _) = toolgate(
        &place,
        &[
            "init",
            "codex",
            "--user",
            "--dry-run",
            "--codex",
            fake.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(code, 0);
    assert!(!log.exists());
}
