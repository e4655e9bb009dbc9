//! How the command line, the environment and the files choose the mode and
//! the policy, through the spawned binary: every `--permission-mode` value a
//! link-assistant or Claude Code caller passes, the mode's precedence, the
//! upward search for `toolgate.json`, and what `ready` and a SIGHUP reload
//! say about the policy's sources.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use serde_json::Value;

use crate::support;

/// The `ready` frame of a broker started in `dir` with `args` and `env`.
fn ready(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    let broker = support::Broker::start(dir, &args, &env);
    broker.wait_for("ready", |lines| !lines.is_empty());
    let (status, lines, stderr) = broker.finish();
    assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
    let frame: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(frame["type"], "ready");
    frame
}

#[test]
fn every_permission_mode_spelling_is_accepted() {
    let root = support::project_dir("config-permission-mode");
    let cases = [
        ("default", "ask"),
        ("acceptEdits", "auto_edit"),
        ("plan", "plan"),
        ("bypassPermissions", "auto"),
        ("auto", "auto"),
        ("readonly", "readonly"),
    ];
    for (value, mode) in cases {
        for flag in ["--permission-mode", "--mode"] {
            assert_eq!(
                ready(&root, &[flag, value], &[])["mode"],
                mode,
                "{flag} {value}"
            );
            // Also after `serve`, and as TOOLGATE_MODE.
            assert_eq!(ready(&root, &["serve", flag, value], &[])["mode"], mode);
        }
        assert_eq!(ready(&root, &[], &[("TOOLGATE_MODE", value)])["mode"], mode);
    }
    // The same mode under both flags is fine.
    let both = ready(
        &root,
        &["--mode", "ask", "--permission-mode", "default"],
        &[],
    );
    assert_eq!(both["mode"], "ask");
    // An empty TOOLGATE_MODE is unset.
    assert_eq!(ready(&root, &[], &[("TOOLGATE_MODE", "")])["mode"], "ask");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn claude_codes_dont_ask_points_to_on_ask_deny() {
    let root = support::project_dir("config-dont-ask");
    let broker = support::Broker::start(
        &root,
        &["--permission-mode".to_string(), "dontAsk".to_string()],
        &[],
    );
    let (status, lines, stderr) = broker.finish();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(lines.is_empty());
    assert!(stderr.contains("unknown mode `dontAsk`"), "{stderr}");
    assert!(stderr.contains("use --on-ask deny"), "{stderr}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_upward_search_stops_at_the_repository_root() {
    let root = support::project_dir("config-upward");
    let canonical = root.canonicalize().unwrap();
    std::fs::write(root.join("toolgate.json"), r#"{"mode":"plan"}"#).unwrap();
    let deep = root.join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    // No repository: found three levels up; the project root is its directory.
    let frame = ready(&deep, &[], &[]);
    assert_eq!(frame["mode"], "plan");
    assert_eq!(frame["projectRoot"], canonical.to_str().unwrap());
    let file = canonical.join("toolgate.json");
    assert_eq!(
        frame["policySources"],
        serde_json::json!(["built-in", file.to_str().unwrap()])
    );
    // --project-root names the only place looked at.
    let frame = ready(&deep, &["--project-root", "."], &[]);
    assert_eq!(frame["mode"], "ask");
    assert_eq!(frame["policySources"], serde_json::json!(["built-in"]));
    // The file's projectRoot still beats the directory it was found in.
    std::fs::write(
        root.join("toolgate.json"),
        r#"{"mode":"plan","projectRoot":"a"}"#,
    )
    .unwrap();
    let frame = ready(&deep, &[], &[]);
    assert_eq!(frame["projectRoot"], canonical.join("a").to_str().unwrap());
    // A repository at a/b: the search stops there.
    std::fs::create_dir_all(root.join("a/b/.git")).unwrap();
    let frame = ready(&deep, &[], &[]);
    assert_eq!(frame["mode"], "ask");
    assert_eq!(
        frame["projectRoot"],
        canonical.join("a/b/c").to_str().unwrap()
    );
    // A toolgate.json at the repository root is found.
    std::fs::write(root.join("a/b/toolgate.json"), r#"{"mode":"readonly"}"#).unwrap();
    let frame = ready(&deep, &[], &[]);
    assert_eq!(frame["mode"], "readonly");
    assert_eq!(
        frame["projectRoot"],
        canonical.join("a/b").to_str().unwrap()
    );
    // An opencode.json is never found by searching.
    std::fs::remove_file(root.join("a/b/toolgate.json")).unwrap();
    std::fs::write(root.join("a/b/c/opencode.json"), r#"{"permission":"deny"}"#).unwrap();
    let frame = ready(&deep, &[], &[]);
    assert_eq!(frame["policySources"], serde_json::json!(["built-in"]));
    let _ = std::fs::remove_dir_all(&root);
}

/// A `toolgate.json` above the working directory that belongs to another
/// user (as one planted in `/tmp` would) is not picked up by the search, and
/// the warning names it; naming it with `--policy` still uses it.
#[cfg(unix)]
#[test]
fn the_upward_search_skips_another_users_file() {
    let root = support::project_dir("config-upward-owner");
    let file = root.join("toolgate.json");
    std::fs::write(&file, r#"{"mode":"auto"}"#).unwrap();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Someone else's file: only root can give a file away.
    if let Err(err) = std::os::unix::fs::chown(&file, Some(65534), Some(65534)) {
        eprintln!("skipped: cannot chown a file to another user here ({err})");
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let broker = support::Broker::start(&work, &[], &[]);
    broker.wait_for("ready", |lines| !lines.is_empty());
    let (status, lines, stderr) = broker.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let frame: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(frame["mode"], "ask", "another user's policy was used");
    assert_eq!(frame["policySources"], serde_json::json!(["built-in"]));
    assert!(
        stderr.contains("toolgate.json is not used: it belongs to user 65534"),
        "{stderr}"
    );
    // Named, it is used.
    let named = ready(&work, &["--policy", file.to_str().unwrap()], &[]);
    assert_eq!(named["mode"], "auto");
    let _ = std::fs::remove_dir_all(&root);
}

#[cfg(unix)]
#[test]
fn a_sighup_reload_names_the_same_sources_as_ready() {
    let root = support::project_dir("config-sighup");
    std::fs::write(
        root.join("opencode.json"),
        "{\n  // comment\n  \"model\": \"m\",\n  \"agent\": {\"review\": {\"permission\": {\"bash\": \"deny\"}}},\n}\n",
    )
    .unwrap();
    let args: Vec<String> = ["--policy", "opencode.json", "--agent", "review"]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    let env = [(
        "TOOLGATE_PERMISSION".to_string(),
        r#"{"edit":"ask"}"#.to_string(),
    )];
    let broker = support::Broker::start(&root, &args, &env);
    broker.wait_for("ready", |lines| !lines.is_empty());
    let frame: Value = serde_json::from_str(&broker.lines()[0]).unwrap();
    let sources: Vec<String> = frame["policySources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|source| source.as_str().unwrap().to_string())
        .collect();
    let file = root.canonicalize().unwrap().join("opencode.json");
    let file = file.to_str().unwrap();
    assert_eq!(
        sources,
        [
            "built-in".to_string(),
            file.to_string(),
            format!("{file}#agent.review"),
            "TOOLGATE_PERMISSION".to_string()
        ]
    );
    broker.signal("HUP");
    broker.wait_for_stderr(&format!("reloaded the policy ({})", sources.join(" + ")));
    let (status, _, stderr) = broker.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
    // The ignored keys are named once per load.
    assert!(stderr.contains("ignored: model"), "{stderr}");
    let _ = std::fs::remove_dir_all(&root);
}
