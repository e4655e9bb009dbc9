//! `--opencode`: OpenCode's own configuration found and merged as OpenCode
//! does, through the spawned binary, in a made-up home and project (a
//! global config under XDG_CONFIG_HOME, project files found upward to the
//! repository root, a `.opencode` directory, OPENCODE_PERMISSION): which
//! files are layers and in what order, which rule decides and who set it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support;

/// A home, a global config directory, and a repository `proj` with a
/// subdirectory `sub` (where toolgate runs), each with an OpenCode config.
struct World {
    top: PathBuf,
    home: PathBuf,
    xdg: PathBuf,
    proj: PathBuf,
    sub: PathBuf,
}

fn world(name: &str) -> World {
    let top = support::project_dir(name).canonicalize().unwrap();
    let home = top.join("home");
    let xdg = top.join("xdg");
    let proj = top.join("proj");
    let sub = proj.join("sub");
    for dir in [
        &home,
        &xdg.join("opencode"),
        &proj.join(".git"),
        &proj.join(".opencode"),
        &sub,
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let write = |path: PathBuf, text: &str| std::fs::write(path, text).unwrap();
    // Above the repository root: never read.
    write(
        top.join("opencode.json"),
        r#"{"permission": {"*": "allow"}}"#,
    );
    write(
        xdg.join("opencode/opencode.json"),
        r#"{"model": "m", "permission": {"bash": {"*": "deny", "git *": "allow"}}}"#,
    );
    write(
        proj.join("opencode.json"),
        r#"{"permission": {"bash": {"git push *": "deny"}}}"#,
    );
    write(
        sub.join("opencode.jsonc"),
        "{\n  // asks instead of denying; `git *` still allows\n  \"permission\": {\"bash\": {\"*\": \"ask\"},},\n}",
    );
    write(
        proj.join(".opencode/opencode.json"),
        r#"{"permission": {"webfetch": "deny"}}"#,
    );
    World {
        top,
        home,
        xdg,
        proj,
        sub,
    }
}

/// `toolgate ARGS` in `world.sub` with the world's HOME and
/// XDG_CONFIG_HOME, no other OpenCode variable but `env`: exit code,
/// stdout, stderr.
fn run(world: &World, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .args(args)
        .current_dir(&world.sub)
        .env("HOME", &world.home)
        .env("XDG_CONFIG_HOME", &world.xdg)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in [
        "TOOLGATE_MODE",
        "TOOLGATE_PERMISSION",
        "TOOLGATE_STATE_DIR",
        "TOOLGATE_SOCKET",
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_DIR",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_PERMISSION",
        "OPENCODE_DISABLE_PROJECT_CONFIG",
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

/// `ready.policySources` of `toolgate --opencode`, the world's paths as
/// `$TOP`.
fn sources(world: &World, env: &[(&str, &str)]) -> Vec<String> {
    let (code, out, err) = run(world, &["--opencode"], env);
    assert_eq!(code, 0, "{err}");
    let ready: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(ready["type"], "ready");
    ready["policySources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|source| {
            source
                .as_str()
                .unwrap()
                .replace(world.top.to_str().unwrap(), "$TOP")
        })
        .collect()
}

/// `toolgate check --opencode -- TOOL SUBJECT`: exit code, decision and
/// the origin of the deciding rule (`$TOP` for the world's directory).
fn decide(world: &World, tool: &str, subject: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let (code, out, err) = run(
        world,
        &["check", "--json", "--opencode", "--", tool, subject],
        env,
    );
    let answer: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("{tool} {subject}: {out:?}; stderr {err}"));
    let origin = answer["steps"][0]["matched"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["decides"] == json!(true))
        .map(|rule| {
            rule["origin"]
                .as_str()
                .unwrap()
                .replace(world.top.to_str().unwrap(), "$TOP")
        })
        .unwrap_or_default();
    (
        code,
        answer["decision"].as_str().unwrap().to_string(),
        origin,
    )
}

const PERMISSION: &str = r#"{"bash": {"git push *": "allow"}}"#;

#[test]
fn the_configs_are_layers_in_opencodes_order() {
    let world = world("opencode-order");
    assert_eq!(
        sources(&world, &[]),
        [
            "built-in",
            "$TOP/xdg/opencode/opencode.json",
            "$TOP/proj/opencode.json",
            "$TOP/proj/sub/opencode.jsonc",
            "$TOP/proj/.opencode/opencode.json",
        ]
    );
    // OPENCODE_PERMISSION comes after every file; TOOLGATE_PERMISSION after it.
    assert_eq!(
        sources(
            &world,
            &[
                ("OPENCODE_PERMISSION", PERMISSION),
                ("TOOLGATE_PERMISSION", r#"{"read": "allow"}"#),
            ]
        )[5..],
        ["OPENCODE_PERMISSION", "TOOLGATE_PERMISSION"]
    );
    // OPENCODE_CONFIG after the global config, before the project's.
    let extra = world.top.join("extra.json");
    std::fs::write(&extra, r#"{"permission": {}}"#).unwrap();
    assert_eq!(
        sources(&world, &[("OPENCODE_CONFIG", extra.to_str().unwrap())])[1..3],
        ["$TOP/xdg/opencode/opencode.json", "$TOP/extra.json"]
    );
    // OPENCODE_DISABLE_PROJECT_CONFIG leaves the global config only.
    assert_eq!(
        sources(&world, &[("OPENCODE_DISABLE_PROJECT_CONFIG", "1")]),
        ["built-in", "$TOP/xdg/opencode/opencode.json"]
    );
    let _ = std::fs::remove_dir_all(&world.top);
}

#[test]
fn rules_merge_as_opencode_merges_them() {
    let world = world("opencode-merge");
    let xdg = "$TOP/xdg/opencode/opencode.json";
    let sub = "$TOP/proj/sub/opencode.jsonc";
    // sub's `*: ask` replaces the global `*: deny` where that key stands,
    // before the global `git *`: as in OpenCode, `git status` stays allowed
    // (stacked as layers, sub's `*` would come last and ask).
    assert_eq!(
        decide(&world, "bash", "git status", &[]),
        (0, "allow".into(), xdg.into())
    );
    assert_eq!(
        decide(&world, "bash", "make build", &[]),
        (3, "ask".into(), sub.into())
    );
    assert_eq!(
        decide(&world, "bash", "git push origin main", &[]),
        (1, "deny".into(), "$TOP/proj/opencode.json".into())
    );
    assert_eq!(
        decide(&world, "webfetch", "https://example.com/", &[]),
        (1, "deny".into(), "$TOP/proj/.opencode/opencode.json".into())
    );
    // OPENCODE_PERMISSION is merged over all of them.
    assert_eq!(
        decide(
            &world,
            "bash",
            "git push origin main",
            &[("OPENCODE_PERMISSION", PERMISSION)]
        ),
        (0, "allow".into(), "OPENCODE_PERMISSION".into())
    );
    let _ = std::fs::remove_dir_all(&world.top);
}

#[test]
fn a_broken_config_stops_toolgate_naming_it() {
    let world = world("opencode-broken");
    let broken = world.proj.join(".opencode/opencode.json");
    std::fs::write(&broken, "{\"permission\": ").unwrap();
    let (code, out, err) = run(&world, &["--opencode"], &[]);
    assert_eq!(code, 2, "{out} {err}");
    assert!(
        err.contains(&format!("{}: not valid JSON", broken.display())),
        "{err}"
    );
    std::fs::write(&broken, "{}").unwrap();
    let (code, _, err) = run(
        &world,
        &["--opencode"],
        &[("OPENCODE_PERMISSION", "{\"bash\": ")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("OPENCODE_PERMISSION: not valid JSON"), "{err}");
    let _ = std::fs::remove_dir_all(&world.top);
}

#[test]
fn opencode_and_policy_conflict() {
    let world = world("opencode-conflict");
    let (code, out, err) = run(&world, &["--opencode", "--policy", "x.json"], &[]);
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("cannot be used with"), "{err}");
    // Given on both sides of the subcommand.
    let (code, _, err) = run(
        &world,
        &[
            "--opencode",
            "check",
            "--policy",
            "x.json",
            "--",
            "bash",
            "ls",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--opencode"), "{err}");
    let _ = std::fs::remove_dir_all(&world.top);
}

/// A project config that belongs to another user is skipped with a
/// warning. Only where this process may give a file away (as root).
#[test]
fn another_users_project_config_is_skipped() {
    let world = world("opencode-owner");
    let planted = world.proj.join("opencode.json");
    if std::os::unix::fs::chown(&planted, Some(54321), None).is_err() {
        eprintln!("skipped: cannot give a file to another user here");
        let _ = std::fs::remove_dir_all(&world.top);
        return;
    }
    let (code, out, err) = run(&world, &["--opencode"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "{} is not used: it belongs to user 54321",
            planted.display()
        )),
        "{err}"
    );
    assert!(!out.contains(planted.to_str().unwrap()), "{out}");
    let _ = std::fs::remove_dir_all(&world.top);
}
