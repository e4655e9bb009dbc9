//! `toolgate tokens create|list|revoke|verify` through the real binary
//! against a real PostgreSQL (support::pg).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, pg};

/// `toolgate ARGS --store URL` with `input` on stdin.
fn toolgate(url: &str, args: &[&str], input: &str) -> Output {
    let mut argv = args.to_vec();
    argv.extend(["--store", url]);
    support::toolgate_process(Path::new("/"), &argv, &[], input.as_bytes())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A migrated store for one test: its URL and cluster.
#[track_caller]
fn store(name: &str) -> Option<(String, String, &'static pg::Cluster)> {
    let (database, cluster) = pg::database(name)?;
    let url = cluster.url(&database);
    let out = toolgate(&url, &["store", "migrate"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Some((url, database, cluster))
}

/// `tokens create ARGS`: the token (the last line of stdout) and stdout.
fn create(url: &str, args: &[&str]) -> (String, String) {
    let mut argv = vec!["tokens", "create"];
    argv.extend_from_slice(args);
    let out = toolgate(url, &argv, "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let stdout = text(&out.stdout);
    let token = stdout.lines().last().unwrap().to_string();
    (token, stdout)
}

/// `tokens verify` of `token`: exit code, stdout, stderr.
fn verify(url: &str, token: &str) -> (i32, String, String) {
    let out = toolgate(url, &["tokens", "verify"], &format!("{token}\n"));
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `tokens list --json`, parsed.
fn listed(url: &str) -> Vec<Value> {
    let out = toolgate(url, &["tokens", "list", "--json"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn create_list_verify_revoke() {
    let Some((url, database, cluster)) = store("round_trip") else {
        return;
    };
    let (agent, stdout) = create(
        &url,
        &[
            "--role",
            "agent",
            "--name",
            "ci runner",
            "--project",
            "/work/app",
        ],
    );
    assert!(
        agent.starts_with("tg_") && agent.len() == 46,
        "the last line is the token: {stdout}"
    );
    let first = stdout.lines().next().unwrap();
    assert!(
        first
            .starts_with("created token `ci runner` (agent; project /work/app; expires never; id "),
        "{first}"
    );
    let (approver, _) = create(&url, &["--role", "approver", "--name", "alice"]);
    assert_ne!(agent, approver);

    // The printed tokens verify, as who they are.
    let (code, out, err) = verify(&url, &agent);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(
        out.starts_with("valid: token `ci runner` (agent; project /work/app; expires never; id "),
        "{out}"
    );
    let (code, out, _) = verify(&url, &approver);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("valid: token `alice` (approver; every project;"),
        "{out}"
    );

    // Only the SHA-256 is kept: no column holds the token's text.
    for token in [&agent, &approver] {
        let body = &token[3..];
        assert_eq!(
            cluster.psql(
                &database,
                &format!(
                    "SELECT count(*) FROM toolgate_tokens \
                     WHERE hash = sha256(convert_to('{token}', 'UTF8'))"
                )
            ),
            "1\n"
        );
        assert_eq!(
            cluster.psql(
                &database,
                &format!(
                    "SELECT count(*) FROM toolgate_tokens t WHERE row_to_json(t)::text LIKE '%{body}%'"
                )
            ),
            "0\n"
        );
    }

    // The table, and never a token in it.
    let out = toolgate(&url, &["tokens", "list"], "");
    assert_eq!(out.status.code(), Some(0));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ROLE", "PROJECT", "CREATED", "EXPIRES", "REVOKED", "ID"]
    );
    assert!(
        lines[1].starts_with("ci runner  agent     /work/app  "),
        "{table}"
    );
    assert!(
        lines[2].starts_with("alice      approver  *          "),
        "{table}"
    );
    assert!(
        lines[1].contains(" never ") && lines[1].contains(" - "),
        "{table}"
    );
    assert!(!table.contains(&agent[3..]) && !table.contains(&approver[3..]));

    let rows = listed(&url);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["name"], "ci runner");
    assert_eq!(rows[0]["role"], "agent");
    assert_eq!(rows[0]["project"], "/work/app");
    assert_eq!(rows[0]["expiresAt"], Value::Null);
    assert_eq!(rows[0]["revokedAt"], Value::Null);
    assert!(rows[0]["createdAt"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(rows[1]["project"], Value::Null);
    let approver_id = rows[1]["id"].as_str().unwrap().to_string();

    // Revoked by name: refused from then on; revoking again changes nothing.
    let out = toolgate(&url, &["tokens", "revoke", "ci runner"], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("revoked token `ci runner` (id "));
    assert_eq!(
        verify(&url, &agent),
        (
            1,
            String::new(),
            "toolgate: token refused: the token `ci runner` was revoked\n".to_string()
        )
    );
    let out = toolgate(&url, &["tokens", "revoke", "ci runner"], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("was revoked already, at "),
        "{}",
        text(&out.stdout)
    );
    // By id.
    let out = toolgate(&url, &["tokens", "revoke", &approver_id], "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("revoked token `alice` (id {approver_id})\n")
    );
    assert_eq!(verify(&url, &approver).0, 1);
    let rows = listed(&url);
    assert!(rows.iter().all(|row| row["revokedAt"].as_u64().is_some()));

    // A revoked token's name may be used again; the old token stays refused.
    let (again, _) = create(&url, &["--role", "observer", "--name", "alice"]);
    assert_eq!(verify(&url, &again).0, 0);
    assert_eq!(verify(&url, &approver).0, 1);

    // Unknown names and ids.
    for unknown in ["bob", "00000000-0000-0000-0000-000000000000"] {
        let out = toolgate(&url, &["tokens", "revoke", unknown], "");
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr),
            format!("toolgate: no token has the name or id `{unknown}` in {url}\n")
        );
    }
}

#[test]
fn a_live_name_is_taken() {
    let Some((url, _, _)) = store("name_taken") else {
        return;
    };
    create(&url, &["--role", "agent", "--name", "ci"]);
    let out = toolgate(
        &url,
        &["tokens", "create", "--role", "admin", "--name", "ci"],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "toolgate: a token named `ci` already exists and is not revoked: \
         revoke it or choose another name\n"
    );
    assert_eq!(text(&out.stdout), "");
    assert_eq!(listed(&url).len(), 1);
}

#[test]
fn an_expired_token_is_refused() {
    let Some((url, _, _)) = store("expired") else {
        return;
    };
    let (token, stdout) = create(
        &url,
        &["--role", "agent", "--name", "brief", "--expires", "1"],
    );
    assert!(!stdout.contains("expires never"), "{stdout}");
    // It may still be valid now; in a while it is not.
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(
        verify(&url, &token),
        (
            1,
            String::new(),
            "toolgate: token refused: the token `brief` has expired\n".to_string()
        )
    );
    let rows = listed(&url);
    assert_eq!(rows[0]["expired"], true);
    assert!(rows[0]["expiresAt"].as_u64().unwrap() > rows[0]["createdAt"].as_u64().unwrap());
    let table = text(&toolgate(&url, &["tokens", "list"], "").stdout);
    assert!(table.contains(" (expired) "), "{table}");
}

#[test]
fn tokens_that_are_not_ours_are_refused() {
    let Some((url, _, _)) = store("refused") else {
        return;
    };
    let (token, _) = create(&url, &["--role", "agent", "--name", "ci"]);
    // One character changed: still a token's shape, but nobody's.
    let mut other = token.clone().into_bytes();
    let at = 10;
    other[at] = if other[at] == b'A' { b'B' } else { b'A' };
    let other = String::from_utf8(other).unwrap();
    let malformed = "toolgate: token refused: not a toolgate token \
                     (expected `tg_` and 43 base64url characters)\n";
    let unknown = "toolgate: token refused: unknown token\n";
    let cases: &[(&str, &str)] = &[
        ("", malformed),
        ("hunter2", malformed),
        (&token[3..], malformed),
        (&token[..token.len() - 1], malformed),
        (&format!("{token}A"), malformed),
        (&token.replace("tg_", "TG_"), malformed),
        (&format!("tg_{}", "A".repeat(43)), unknown),
        (&other, unknown),
    ];
    for (input, expected) in cases {
        let (code, stdout, stderr) = verify(&url, input);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (1, "", *expected),
            "{input:?}"
        );
    }
    // Spaces and a line end around the token are not part of it.
    let out = toolgate(
        &url,
        &["tokens", "verify"],
        &format!("  {token}  \r\nmore\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// No server needed: what is wrong is said before connecting (the store
/// here is unreachable, and the exit code is 2, not 3).
#[test]
fn bad_input_is_named() {
    let url = "postgres://postgres@127.0.0.1:9/toolgate";
    let out = toolgate(
        url,
        &["tokens", "create", "--role", "root", "--name", "x"],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "invalid value 'root' for '--role <ROLE>': unknown role `root`: \
             a role is one of agent, approver, observer, admin"
        ),
        "{stderr}"
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["--name", ""],
            "toolgate: a token's name cannot be empty\n",
        ),
        (
            &["--name", " padded"],
            "toolgate: a token's name ` padded` holds control characters or spaces at either end\n",
        ),
        (
            &["--name", "67e55044-10b1-426f-9247-bb680e5fe0c8"],
            "toolgate: a token's name `67e55044-10b1-426f-9247-bb680e5fe0c8` cannot have \
             the form of a token id (a UUID)\n",
        ),
        (
            &["--name", "x", "--project", ""],
            "toolgate: --project cannot be empty (leave it out for a token of every project)\n",
        ),
        (
            &["--name", "x", "--expires", "0"],
            "toolgate: --expires is a number of seconds from 1 to 3153600000 (100 years), not 0\n",
        ),
    ];
    for (args, expected) in cases {
        let mut argv = vec!["tokens", "create", "--role", "agent"];
        argv.extend_from_slice(args);
        let out = toolgate(url, &argv, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr), *expected, "{args:?}");
    }
    let out = toolgate(
        url,
        &[
            "tokens",
            "create",
            "--role",
            "agent",
            "--name",
            "x",
            "--expires",
            "soon",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid value 'soon' for '--expires <SECS>'"));
}

/// A broker without `--store` has no tokens: the token frames get
/// `invalid_frame` saying so, and the broker goes on.
#[test]
fn token_frames_need_a_store() {
    let dir = support::project_dir("token_frames_need_a_store");
    let (code, stdout, stderr) = support::run(
        &dir,
        &["serve"],
        "{\"type\":\"list_tokens\"}\n{\"type\":\"create_token\",\"name\":\"x\",\"role\":\"admin\"}\n{\"type\":\"revoke_token\",\"name\":\"x\"}\n{\"type\":\"get_reminder\",\"sessionID\":\"s\"}\n",
    );
    assert_eq!(code, 0, "{stderr}");
    let frames: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let errors: Vec<&Value> = frames.iter().filter(|f| f["type"] == "error").collect();
    assert_eq!(errors.len(), 3, "{stdout}");
    for (error, line) in errors.iter().zip(1..) {
        assert_eq!(error["code"], "invalid_frame", "{error}");
        assert_eq!(error["line"], line, "{error}");
        assert!(
            error["message"].as_str().unwrap().starts_with(
                "this broker shares no store (it was started without --store), so it has no tokens"
            ),
            "{error}"
        );
    }
    assert_eq!(frames.last().unwrap()["type"], "reminder", "{stdout}");
}
