//! `toolgate grants list|revoke` against a state directory written by hand.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};
use std::process::Command;

const PROJECT_A: &str = r#"{
  "version": 1,
  "projectRoot": "/work/a",
  "projectGrants": [
    {"grantID": "grant_a1", "permission": "bash", "pattern": "npm run dev *", "literal": 11, "sessionID": "main"}
  ],
  "sessions": [
    {"sessionID": "main", "mode": "ask", "grants": [
      {"grantID": "grant_a2", "permission": "edit", "pattern": "*", "literal": 0, "sessionID": "main"}
    ]}
  ]
}
"#;

const PROJECT_B: &str = r#"{
  "version": 1,
  "projectRoot": "/work/b",
  "projectGrants": [],
  "sessions": [
    {"sessionID": "main", "mode": "auto_edit", "grants": [
      {"grantID": "grant_b1", "permission": "external_directory", "pattern": "/tmp/*", "literal": 5, "sessionID": "main"},
      {"grantID": "grant_b2", "permission": "bash", "pattern": "git commit *", "literal": 10, "sessionID": "main"}
    ]},
    {"sessionID": "reviewer", "parentID": "main", "mode": "readonly",
     "permissions": {"allowedTools": ["Read", "Grep"]},
     "grants": [
      {"grantID": "grant_b3", "permission": "read", "pattern": ".env", "literal": 4, "sessionID": "reviewer"}
    ]}
  ]
}
"#;

fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-grants-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run toolgate with `args` (`$DIR` replaced); (exit code, stdout, stderr).
fn toolgate(args: &[&str], dir: &Path, env: Option<&Path>) -> (i32, String, String) {
    let dir_text = dir.to_string_lossy();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .args(args.iter().map(|arg| arg.replace("$DIR", &dir_text)))
        .env_remove("TOOLGATE_STATE_DIR");
    if let Some(env) = env {
        command.env("TOOLGATE_STATE_DIR", env);
    }
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// One step: arguments, exit code, exact stdout, pieces of stderr (`$DIR` replaced).
struct Step {
    args: &'static [&'static str],
    env_dir: bool,
    exit: i32,
    stdout: &'static str,
    stderr: &'static [&'static str],
}

const TABLE: &str = "\
GRANT     SCOPE    SESSION   PERMISSION          PATTERN        EXPIRES  PROJECT
grant_a1  project  main      bash                npm run dev *  never    /work/a
grant_a2  session  main      edit                *              never    /work/a
grant_b1  session  main      external_directory  /tmp/*         never    /work/b
grant_b2  session  main      bash                git commit *   never    /work/b
grant_b3  session  reviewer  read                .env           never    /work/b
";

const STEPS: &[Step] = &[
    Step {
        args: &["grants", "list", "--state-dir", "$DIR"],
        env_dir: false,
        exit: 0,
        stdout: TABLE,
        stderr: &["toolgate: warning: skipping $DIR/project-ffffffffffffffff.json: not valid JSON"],
    },
    // A --state-dir before `grants` counts too; TOOLGATE_STATE_DIR as well.
    Step {
        args: &["--state-dir", "$DIR", "grants", "list"],
        env_dir: false,
        exit: 0,
        stdout: TABLE,
        stderr: &[],
    },
    Step {
        args: &["grants", "list", "--json"],
        env_dir: true,
        exit: 0,
        stdout: concat!(
            r#"{"grantID":"grant_a1","scope":"project","sessionID":"main","permission":"bash","pattern":"npm run dev *","projectRoot":"/work/a"}"#,
            "\n",
            r#"{"grantID":"grant_a2","scope":"session","sessionID":"main","permission":"edit","pattern":"*","projectRoot":"/work/a"}"#,
            "\n",
            r#"{"grantID":"grant_b1","scope":"session","sessionID":"main","permission":"external_directory","pattern":"/tmp/*","projectRoot":"/work/b"}"#,
            "\n",
            r#"{"grantID":"grant_b2","scope":"session","sessionID":"main","permission":"bash","pattern":"git commit *","projectRoot":"/work/b"}"#,
            "\n",
            r#"{"grantID":"grant_b3","scope":"session","sessionID":"reviewer","permission":"read","pattern":".env","projectRoot":"/work/b"}"#,
            "\n",
        ),
        stderr: &[],
    },
    Step {
        args: &["grants", "revoke", "--state-dir", "$DIR", "grant_b2"],
        env_dir: false,
        exit: 0,
        stdout:
            "revoked grant_b2 (session grant of session main: bash `git commit *`) for /work/b\n",
        stderr: &[],
    },
    Step {
        args: &["grants", "list", "--state-dir", "$DIR"],
        env_dir: false,
        exit: 0,
        stdout: "\
GRANT     SCOPE    SESSION   PERMISSION          PATTERN        EXPIRES  PROJECT
grant_a1  project  main      bash                npm run dev *  never    /work/a
grant_a2  session  main      edit                *              never    /work/a
grant_b1  session  main      external_directory  /tmp/*         never    /work/b
grant_b3  session  reviewer  read                .env           never    /work/b
",
        stderr: &[],
    },
    // Unknown ids: named on stderr, exit 1; the known ones are still removed.
    Step {
        args: &[
            "grants",
            "revoke",
            "--state-dir",
            "$DIR",
            "grant_nope",
            "grant_a1",
            "grant_b2",
        ],
        env_dir: false,
        exit: 1,
        stdout:
            "revoked grant_a1 (project grant of session main: bash `npm run dev *`) for /work/a\n",
        stderr: &[
            "toolgate: no grant has the id `grant_nope` in $DIR",
            "toolgate: no grant has the id `grant_b2` in $DIR",
        ],
    },
    Step {
        args: &["grants", "list", "--state-dir", "$DIR", "--json"],
        env_dir: false,
        exit: 0,
        stdout: concat!(
            r#"{"grantID":"grant_a2","scope":"session","sessionID":"main","permission":"edit","pattern":"*","projectRoot":"/work/a"}"#,
            "\n",
            r#"{"grantID":"grant_b1","scope":"session","sessionID":"main","permission":"external_directory","pattern":"/tmp/*","projectRoot":"/work/b"}"#,
            "\n",
            r#"{"grantID":"grant_b3","scope":"session","sessionID":"reviewer","permission":"read","pattern":".env","projectRoot":"/work/b"}"#,
            "\n",
        ),
        stderr: &[],
    },
    Step {
        args: &["grants", "list"],
        env_dir: false,
        exit: 2,
        stdout: "",
        stderr: &["toolgate: grants needs --state-dir DIR (or TOOLGATE_STATE_DIR)"],
    },
    Step {
        args: &[
            "grants",
            "revoke",
            "--state-dir",
            "$DIR/missing",
            "grant_a2",
        ],
        env_dir: false,
        exit: 1,
        stdout: "",
        stderr: &["toolgate: cannot read the state directory $DIR/missing"],
    },
];

#[test]
fn list_and_revoke_against_a_hand_written_state_dir() {
    let dir = state_dir("steps");
    let a = dir.join("project-000000000000000a.json");
    let b = dir.join("project-000000000000000b.json");
    std::fs::write(&a, PROJECT_A).unwrap();
    std::fs::write(&b, PROJECT_B).unwrap();
    std::fs::write(dir.join("project-ffffffffffffffff.json"), "{\"version\":").unwrap();
    std::fs::write(dir.join("project-000000000000000c.json.corrupt-1"), "{").unwrap();

    let dir_text = dir.to_string_lossy().into_owned();
    for (index, step) in STEPS.iter().enumerate() {
        let env = step.env_dir.then_some(dir.as_path());
        let (code, stdout, stderr) = toolgate(step.args, &dir, env);
        let what = format!("step {} ({:?})", index + 1, step.args);
        assert_eq!(code, step.exit, "{what}: exit code; stderr:\n{stderr}");
        assert_eq!(stdout, step.stdout, "{what}: stdout; stderr:\n{stderr}");
        for piece in step.stderr {
            let piece = piece.replace("$DIR", &dir_text);
            assert!(
                stderr.contains(&piece),
                "{what}: stderr lacks `{piece}`:\n{stderr}"
            );
        }
    }

    // The files are still valid state files, changed only where grants went.
    for path in [&a, &b] {
        let text = std::fs::read_to_string(path).unwrap();
        toolgate::store::parse_snapshot(&text).unwrap();
    }
    let b_now = toolgate::store::parse_snapshot(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let b_then = toolgate::store::parse_snapshot(PROJECT_B).unwrap();
    assert_eq!(b_now.sessions[1], b_then.sessions[1]);
    assert_eq!(b_now.sessions[0].grants, b_then.sessions[0].grants[..1]);
    // Nothing else appeared or went: no temporary files, the unusable ones
    // untouched (the lock files of the two revokes are bookkeeping).
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "project-000000000000000a.json",
            "project-000000000000000b.json",
            "project-000000000000000c.json.corrupt-1",
            "project-ffffffffffffffff.json",
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_empty_state_dir_lists_nothing() {
    let dir = state_dir("empty");
    for args in [
        &["grants", "list", "--state-dir", "$DIR"][..],
        &["grants", "list", "--json", "--state-dir", "$DIR"],
    ] {
        let (code, stdout, stderr) = toolgate(args, &dir, None);
        assert_eq!((code, stdout.as_str()), (0, ""), "{args:?}: {stderr}");
        assert!(stderr.contains("toolgate: no grants in"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan-mode kind grant as the broker stores it: listed with its mode, in
/// the table and in `--json`; a file of an earlier build (no `mode`) lists as before.
#[test]
fn plan_mode_grants_are_listed_with_their_mode() {
    let dir = state_dir("plan");
    std::fs::write(
        dir.join("project-000000000000000d.json"),
        r#"{"version":1,"projectRoot":"/work/d","projectGrants":[
            {"grantID":"grant_p","permission":"webfetch","pattern":"*","literal":0,"sessionID":"main","mode":"plan"},
            {"grantID":"grant_q","permission":"websearch","pattern":"*","literal":0,"sessionID":"main"}],
            "sessions":[]}"#,
    )
    .unwrap();
    let (code, stdout, stderr) = toolgate(&["grants", "list", "--state-dir", "$DIR"], &dir, None);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].contains("webfetch") && lines[1].contains("* (only in plan mode)"),
        "{stdout}"
    );
    assert!(
        lines[2].contains("websearch") && !lines[2].contains("plan"),
        "{stdout}"
    );
    let (code, stdout, stderr) = toolgate(
        &["grants", "list", "--json", "--state-dir", "$DIR"],
        &dir,
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows[0]["mode"], "plan", "{stdout}");
    assert!(rows[1].get("mode").is_none(), "{stdout}");
    // A mode toolgate does not know makes the file unusable, never a looser grant.
    std::fs::write(
        dir.join("project-000000000000000d.json"),
        r#"{"version":1,"projectRoot":"/work/d","projectGrants":[
            {"grantID":"grant_p","permission":"webfetch","pattern":"*","literal":0,"sessionID":"main","mode":"ask"}],
            "sessions":[]}"#,
    )
    .unwrap();
    let (_, stdout, stderr) = toolgate(&["grants", "list", "--state-dir", "$DIR"], &dir, None);
    assert!(!stdout.contains("grant_p"), "{stdout}");
    assert!(stderr.contains("`mode` must be `plan`"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Session ids and patterns come from agents: `grants list` and `grants
/// revoke` show their escape sequences and bidirectional overrides escaped
/// (`\x1b[2J`, `\u{202e}`), never raw.
#[test]
fn agent_text_is_shown_escaped() {
    let dir = state_dir("escapes");
    let project = r#"{
  "version": 1,
  "projectRoot": "/work/e",
  "projectGrants": [
    {"grantID": "grant_e1", "permission": "bash", "pattern": "echo \u001b]0;pwned\u0007 \u202etxt.exe", "literal": 5, "sessionID": "s\u001b[2J"}
  ],
  "sessions": [
    {"sessionID": "s\u001b[2J", "mode": "ask", "grants": [
      {"grantID": "grant_e2", "permission": "edit", "pattern": "\u001b[8mhidden\u2066", "literal": 0, "sessionID": "s\u001b[2J"}
    ]}
  ]
}
"#;
    std::fs::write(dir.join("project-000000000000000e.json"), project).unwrap();
    let (code, stdout, stderr) = toolgate(&["grants", "list", "--state-dir", "$DIR"], &dir, None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "\
GRANT     SCOPE    SESSION   PERMISSION  PATTERN                                EXPIRES  PROJECT
grant_e1  project  s\\x1b[2J  bash        echo \\x1b]0;pwned\\x07 \\u{202e}txt.exe  never    /work/e
grant_e2  session  s\\x1b[2J  edit        \\x1b[8mhidden\\u{2066}                  never    /work/e
"
    );
    let (code, stdout, stderr) = toolgate(
        &[
            "grants",
            "revoke",
            "--state-dir",
            "$DIR",
            "grant_e1",
            "grant_e2",
        ],
        &dir,
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "\
revoked grant_e1 (project grant of session s\\x1b[2J: bash `echo \\x1b]0;pwned\\x07 \\u{202e}txt.exe`) for /work/e
revoked grant_e2 (session grant of session s\\x1b[2J: edit `\\x1b[8mhidden\\u{2066}`) for /work/e
"
    );
}

/// Grants with a lifetime (`expiresAt`): one whose end has passed is not
/// listed (it covers nothing); one still running shows the time it has
/// left, in the table and in `--json`; one without an end says `never`.
#[test]
fn ended_grants_are_not_listed_and_the_others_show_their_time_left() {
    let dir = state_dir("lifetimes");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let later = now + 2 * 3_600_000;
    let file = format!(
        r#"{{"version":1,"projectRoot":"/work/h","projectGrants":[
            {{"grantID":"grant_old","permission":"bash","pattern":"ls *","literal":2,"sessionID":"main","expiresAt":1000}},
            {{"grantID":"grant_later","permission":"bash","pattern":"make *","literal":4,"sessionID":"main","expiresAt":{later}}},
            {{"grantID":"grant_always","permission":"edit","pattern":"*","literal":0,"sessionID":"main"}}],
            "sessions":[]}}"#
    );
    std::fs::write(dir.join("project-0000000000000001.json"), file).unwrap();
    let (code, stdout, stderr) = toolgate(&["grants", "list", "--state-dir", "$DIR"], &dir, None);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("grant_old"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    // Two hours less the moments since `now`: 1h 59m, or 2h 00m within a second.
    assert!(
        lines[1].starts_with("grant_later")
            && (lines[1].contains("  in 1h 59m  ") || lines[1].contains("  in 2h 00m  ")),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("grant_always") && lines[2].contains("  never  "),
        "{stdout}"
    );
    let (code, stdout, stderr) = toolgate(
        &["grants", "list", "--json", "--state-dir", "$DIR"],
        &dir,
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0]["expiresAt"], later);
    let left = rows[0]["expiresIn"].as_u64().unwrap();
    assert!((7_000..=7_200).contains(&left), "{left}");
    assert!(rows[1].get("expiresAt").is_none() && rows[1].get("expiresIn").is_none());
    // Revoked like any other; an ended one can be removed too.
    let (code, stdout, stderr) = toolgate(
        &[
            "grants",
            "revoke",
            "--state-dir",
            "$DIR",
            "grant_later",
            "grant_old",
        ],
        &dir,
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("revoked grant_later (project grant of session main: bash `make *`)"),
        "{stdout}"
    );
    let (_, stdout, _) = toolgate(&["grants", "list", "--state-dir", "$DIR"], &dir, None);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
