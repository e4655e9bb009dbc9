//! The state directory: loading, atomic saving, corrupt files, other projects,
//! and the functions behind `toolgate grants list|revoke`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::{Path, PathBuf};

use toolgate::store::{
    list_grants, parse_snapshot, revoke_grants, session_fingerprint, state_file, write_snapshot,
    FileStore, GrantScope, Invalid, IoOp, MemoryStore, Snapshot, StateError, Store, StoredClosed,
    StoredGrant, StoredSession, Task, Unreadable, VERSION,
};
use toolgate_protocol::ScopeSpec;

/// A fresh empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        // The lock files are bookkeeping.
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

fn grant(id: &str, permission: &str, pattern: &str, literal: usize, session: &str) -> StoredGrant {
    StoredGrant {
        grant_id: id.to_string(),
        permission: permission.to_string(),
        pattern: pattern.to_string(),
        literal,
        session_id: session.to_string(),
        mode: None,
        expires_at: None,
    }
}

fn sample(root: &str) -> Snapshot {
    Snapshot {
        version: VERSION,
        project_root: root.to_string(),
        project_grants: vec![grant("grant_p1", "bash", "git commit *", 10, "main")],
        sessions: vec![
            StoredSession {
                session_id: "worker".to_string(),
                parent_id: Some("main".to_string()),
                mode: "readonly".to_string(),
                permissions: Some(ScopeSpec {
                    allowed_tools: Some(vec!["Read".to_string()]),
                    ..ScopeSpec::default()
                }),
                grants: vec![grant("grant_w1", "read", ".env", 4, "worker")],
                started: true,
                implicit: false,
                joined: Vec::new(),
            },
            StoredSession {
                session_id: "main".to_string(),
                parent_id: None,
                mode: "ask".to_string(),
                permissions: None,
                grants: vec![
                    grant("grant_m1", "edit", "*", 0, "main"),
                    grant("grant_m2", "bash", "rm -rf *", 8, "main"),
                ],
                started: false,
                implicit: false,
                joined: Vec::new(),
            },
        ],
        closed: vec![StoredClosed {
            fingerprint: format!("{:016x}", session_fingerprint("old-worker")),
            why: "ended".to_string(),
        }],
    }
}

#[test]
fn state_file_name_is_a_hash_of_the_root() {
    let dir = Path::new("/state");
    let a = state_file(dir, Path::new("/work/a"));
    let b = state_file(dir, Path::new("/work/b"));
    assert_ne!(a, b);
    assert_eq!(a, state_file(dir, Path::new("/work/a")));
    let name = a.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("project-") && name.ends_with(".json"),
        "{name}"
    );
    assert_eq!(name.len(), "project-".len() + 16 + ".json".len(), "{name}");
    // FNV-1a 64 of the empty string is its offset basis.
    assert_eq!(
        state_file(dir, Path::new("")),
        dir.join("project-cbf29ce484222325.json")
    );
}

#[test]
fn round_trip_and_no_temp_file_left_behind() {
    let dir = scratch("round-trip");
    let root = Path::new("/work/project");
    let (mut store, loaded, warnings) = FileStore::open(&dir, root, 1).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(loaded, Snapshot::new(root));
    assert_eq!(store.path(), state_file(&dir, root));

    let saved = sample("/work/project");
    store.save(&saved).unwrap();
    assert_eq!(
        names_in(&dir),
        vec![store.path().file_name().unwrap().to_str().unwrap()]
    );
    // A broker that stopped released the file.
    let path = store.path().to_path_buf();
    drop(store);

    let (mut store, reloaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut expected = saved.clone();
    expected
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));
    assert_eq!(reloaded, expected);

    // Pretty, with sessions in sessionID order, and deterministic.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\n  \"version\": 1,\n  \"projectRoot\": \"/work/project\""));
    assert!(text.find("\"main\"").unwrap() < text.find("\"worker\"").unwrap());
    store.save(&saved).unwrap();
    assert_eq!(std::fs::read_to_string(store.path()).unwrap(), text);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn save_writes_the_current_version_and_the_stores_root() {
    let dir = scratch("normalises");
    let root = Path::new("/work/project");
    let (mut store, _, _) = FileStore::open(&dir, root, 1).unwrap();
    store.save(&Snapshot::default()).unwrap();
    drop(store);
    let (_, reloaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(reloaded, Snapshot::new(root));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files that cannot be used: (name, contents, a piece of the warning).
const UNUSABLE: &[(&str, &str, &str)] = &[
    ("truncated", "{\"version\":1,\"projectRoot\":", "not valid JSON"),
    ("empty", "", "not valid JSON"),
    ("not an object", "[1,2]", "no version"),
    ("no version", "{\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[]}", "no version"),
    ("version 2", "{\"version\":2,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[]}", "version 2, expected 1"),
    ("version as text", "{\"version\":\"1\",\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[]}", "version \"1\", expected 1"),
    ("missing sessions", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[]}", "missing field `sessions`"),
    ("mistyped grant", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[{\"grantID\":\"g\",\"permission\":\"bash\",\"pattern\":\"x\",\"literal\":-1,\"sessionID\":\"s\"}],\"sessions\":[]}", "not a state file"),
    ("literal too long", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[{\"grantID\":\"g\",\"permission\":\"bash\",\"pattern\":\"ls *\",\"literal\":9,\"sessionID\":\"s\"}],\"sessions\":[]}", "grant g: literal length 9 does not fit the pattern `ls *`"),
    ("literal inside a character", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[{\"sessionID\":\"s\",\"mode\":\"ask\",\"grants\":[{\"grantID\":\"g\",\"permission\":\"edit\",\"pattern\":\"é*\",\"literal\":1,\"sessionID\":\"s\"}]}]}", "literal length 1 does not fit"),
    ("fingerprint not hex", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[],\"closed\":[{\"fingerprint\":\"00000000000000zz\",\"why\":\"ended\"}]}", "the closed fingerprint `00000000000000zz` is not 16 lowercase hex digits"),
    ("fingerprint too short", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[],\"closed\":[{\"fingerprint\":\"abc\",\"why\":\"refused\"}]}", "the closed fingerprint `abc` is not"),
    ("journalGeneration not a count", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[],\"journalGeneration\":-3}", "journalGeneration -3 is not a count"),
    ("session twice", "{\"version\":1,\"projectRoot\":\"/work/project\",\"projectGrants\":[],\"sessions\":[{\"sessionID\":\"s\",\"mode\":\"ask\",\"grants\":[]},{\"sessionID\":\"s\",\"mode\":\"plan\",\"grants\":[]}]}", "the session s is stored twice"),
];

/// A state file that cannot be used is not moved aside to start clean
/// (which would forget which sessions ended): opening it fails, naming the
/// file, the reason and the repair, and leaves it as it is.
#[test]
fn unusable_files_are_refused_naming_the_reason() {
    let root = Path::new("/work/project");
    for (index, (name, contents, reason)) in UNUSABLE.iter().enumerate() {
        let dir = scratch(&format!("unusable-{index}"));
        let file = state_file(&dir, root);
        std::fs::write(&file, contents).unwrap();
        let refused = FileStore::open(&dir, root, 1234).err().unwrap();
        assert!(
            matches!(&refused, StateError::Unusable { reason, .. }
                if matches!(**reason, Unreadable::Invalid(_))),
            "{name}: {refused:?}"
        );
        let refused = refused.to_string();
        assert!(
            refused.contains(&file.display().to_string()),
            "{name}: {refused}"
        );
        assert!(
            refused.contains(reason),
            "{name}: `{refused}` lacks `{reason}`"
        );
        assert!(
            refused.contains("toolgate state repair"),
            "{name}: {refused}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), *contents, "{name}");
        assert_eq!(names_in(&dir).len(), 1, "{name}: {:?}", names_in(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn parse_snapshot_accepts_what_save_writes_and_ignores_unknown_fields() {
    let text = serde_json::to_string(&sample("/r")).unwrap();
    assert_eq!(parse_snapshot(&text).unwrap(), sample("/r"));
    let extra = text.replacen('{', "{\"comment\":\"later versions may add fields\",", 1);
    assert_eq!(parse_snapshot(&extra).unwrap(), sample("/r"));
}

/// A joined session's `joined` is written and read back; a file without
/// it (of an earlier build) loads as not joined.
#[test]
fn a_joined_sessions_scopes_are_kept_and_older_files_load_as_not_joined() {
    let mut snapshot = sample("/r");
    snapshot.sessions[0].joined = vec![toolgate::store::StoredJoined {
        session_id: "t1".to_string(),
        permissions: ScopeSpec {
            allowed_tools: Some(vec!["Read".to_string()]),
            ..ScopeSpec::default()
        },
    }];
    let text = serde_json::to_string(&snapshot).unwrap();
    assert!(
        text.contains(r#""joined":[{"sessionID":"t1","permissions":{"allowedTools":["Read"]"#),
        "{text}"
    );
    assert_eq!(parse_snapshot(&text).unwrap(), snapshot);
    let older = serde_json::to_string(&sample("/r")).unwrap();
    assert!(!older.contains("joined"), "{older}");
    let loaded = parse_snapshot(&older).unwrap();
    assert!(loaded.sessions.iter().all(|s| s.joined.is_empty()));
}

#[test]
fn a_directory_in_place_of_the_file_is_refused() {
    let dir = scratch("dir-in-place");
    let root = Path::new("/work/project");
    let file = state_file(&dir, root);
    std::fs::create_dir(&file).unwrap();
    let refused = FileStore::open(&dir, root, 5).err().unwrap();
    assert!(
        matches!(&refused, StateError::Unusable { reason, .. }
            if matches!(**reason, Unreadable::Read(_))),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("cannot read it"), "{refused}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_uncreatable_directory_warns_and_saves_fail() {
    let dir = scratch("uncreatable");
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let state_dir = blocker.join("state");
    let root = Path::new("/work/project");
    let (mut store, snapshot, warnings) = FileStore::open(&state_dir, root, 1).unwrap();
    assert_eq!(snapshot, Snapshot::new(root));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&format!(
            "cannot create the state directory {}",
            state_dir.display()
        )),
        "{warnings:?}"
    );
    let err = store.save(&sample("/work/project")).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Io {
                op: IoOp::Write,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&state_dir.display().to_string()),
        "{err}"
    );
    assert_eq!(names_in(&dir), vec!["a-file"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_save_names_the_path_and_leaves_no_temp_file() {
    let dir = scratch("failed-save");
    // Renaming a file over a non-empty directory fails.
    let target = dir.join("project-0000000000000000.json");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    let err = write_snapshot(&target, &sample("/r")).unwrap_err();
    assert!(matches!(err, StateError::Rename { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&target.display().to_string()),
        "{err}"
    );
    assert_eq!(names_in(&dir), vec!["project-0000000000000000.json"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_of_another_project_is_left_alone() {
    let dir = scratch("other-project");
    let root = Path::new("/work/project");
    let file = state_file(&dir, root);
    // As if another root hashed to the same name.
    let other = serde_json::to_string_pretty(&sample("/work/elsewhere")).unwrap();
    std::fs::write(&file, &other).unwrap();
    let (mut store, snapshot, warnings) = FileStore::open(&dir, root, 1).unwrap();
    assert_eq!(snapshot, Snapshot::new(root));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("belongs to the project /work/elsewhere, not /work/project"),
        "{warnings:?}"
    );
    assert_ne!(store.path(), file);
    store.save(&sample("/work/project")).unwrap();
    // The other project's file is untouched; ours lives next to it.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), other);
    let path = store.path().to_path_buf();
    drop(store);
    let (again, reloaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert_eq!(again.path(), path);
    assert_eq!(reloaded.project_grants, sample("/").project_grants);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_store_records_saves_and_can_fail() {
    let store = MemoryStore::new();
    let mut held: Box<dyn Store> = Box::new(store.clone());
    held.save(&sample("/r")).unwrap();
    assert_eq!(store.saved().len(), 1);
    assert_eq!(store.last().unwrap().sessions[0].session_id, "main");
    store.fail_with(Some("disk full"));
    let err = held.save(&sample("/r")).unwrap_err();
    assert!(matches!(&err, StateError::Injected(text) if text == "disk full"));
    assert_eq!(err.to_string(), "disk full");
    store.fail_with(None);
    held.save(&Snapshot::default()).unwrap();
    assert_eq!(store.saved().len(), 2);
}

/// A state directory with two projects and a file that cannot be used.
fn two_projects(name: &str) -> PathBuf {
    let dir = scratch(name);
    for root in ["/work/a", "/work/b"] {
        write_snapshot(&state_file(&dir, Path::new(root)), &sample(root)).unwrap();
    }
    std::fs::write(dir.join("project-ffffffffffffffff.json"), "{").unwrap();
    std::fs::write(dir.join("project-1.json.corrupt-5"), "{").unwrap();
    dir
}

#[test]
fn list_shows_every_grant_of_every_project() {
    let dir = two_projects("list");
    let (rows, warnings) = list_grants(&dir, 0).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("project-ffffffffffffffff.json"),
        "{warnings:?}"
    );
    let mut roots: Vec<&str> = vec!["/work/a", "/work/b"];
    roots.sort_by_key(|root| state_file(&dir, Path::new(root)));
    let mut expected = Vec::new();
    for root in roots {
        for (id, scope, session, permission, pattern) in [
            (
                "grant_p1",
                GrantScope::Project,
                "main",
                "bash",
                "git commit *",
            ),
            ("grant_m1", GrantScope::Session, "main", "edit", "*"),
            ("grant_m2", GrantScope::Session, "main", "bash", "rm -rf *"),
            ("grant_w1", GrantScope::Session, "worker", "read", ".env"),
        ] {
            expected.push(format!(
                "{id} {scope:?} {session} {permission} {pattern} {root}"
            ));
        }
    }
    let got: Vec<String> = rows
        .iter()
        .map(|row| {
            format!(
                "{} {:?} {} {} {} {}",
                row.grant_id,
                row.scope,
                row.session_id,
                row.permission,
                row.pattern,
                row.project_root
            )
        })
        .collect();
    assert_eq!(got, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn list_of_a_missing_directory_is_an_error() {
    let dir = scratch("missing").join("nothing-here");
    let err = list_grants(&dir, 0).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Io {
                op: IoOp::ReadDir,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&dir.display().to_string()),
        "{err}"
    );
}

#[test]
fn revoke_removes_from_whichever_file_holds_the_grant() {
    let dir = scratch("revoke");
    let a = state_file(&dir, Path::new("/work/a"));
    let b = state_file(&dir, Path::new("/work/b"));
    let mut only_b = sample("/work/b");
    only_b.project_grants[0].grant_id = "grant_b".to_string();
    only_b.sessions[0].grants[0].grant_id = "grant_bw".to_string();
    write_snapshot(&a, &sample("/work/a")).unwrap();
    write_snapshot(&b, &only_b).unwrap();
    let before_b = std::fs::read_to_string(&b).unwrap();

    let ids = ["grant_m2", "grant_nope", "grant_w1", "grant_nope"].map(str::to_string);
    let revoked = revoke_grants(&dir, &ids).unwrap();
    let removed: Vec<(&str, &Path)> = revoked
        .removed
        .iter()
        .map(|row| (row.grant_id.as_str(), row.file.as_path()))
        .collect();
    // Both files hold grant_m2 (sample's ids), only a holds grant_w1.
    let mut expected = vec![
        ("grant_m2", a.as_path()),
        ("grant_w1", a.as_path()),
        ("grant_m2", b.as_path()),
    ];
    if b < a {
        expected = vec![expected[2], expected[0], expected[1]];
    }
    assert_eq!(removed, expected);
    assert_eq!(revoked.unknown, vec!["grant_nope".to_string()]);

    let text = std::fs::read_to_string(&a).unwrap();
    let after = parse_snapshot(&text).unwrap();
    let left: Vec<&str> = after
        .sessions
        .iter()
        .flat_map(|session| &session.grants)
        .chain(&after.project_grants)
        .map(|grant| grant.grant_id.as_str())
        .collect();
    assert_eq!(left, vec!["grant_m1", "grant_p1"]);
    assert_ne!(std::fs::read_to_string(&b).unwrap(), before_b);
    assert!(names_in(&dir).iter().all(|name| !name.contains(".tmp-")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The state file shown in docs/protocol.md is one this build reads.
#[test]
fn protocol_md_state_file_example_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/protocol.md");
    let text = std::fs::read_to_string(path).unwrap();
    let section = &text[text
        .find("## State directory")
        .expect("a State directory section")..];
    let start = section.find("```json\n").unwrap() + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    let snapshot = parse_snapshot(&section[start..end]).unwrap();
    assert_eq!(snapshot.sessions.len(), 2);
    assert_eq!(snapshot.project_grants[0].literal, "git commit".len());
}

#[test]
fn the_table_keeps_each_grant_on_one_line() {
    use toolgate::store::{grants_table, GrantRow};
    let row = |id: &str, session: &str, pattern: &str| GrantRow {
        grant_id: id.to_string(),
        scope: GrantScope::Session,
        session_id: session.to_string(),
        permission: "bash".to_string(),
        pattern: pattern.to_string(),
        mode: None,
        expires_at: None,
        expires_in: None,
        project_root: "/r".to_string(),
        file: PathBuf::new(),
    };
    let table = grants_table(&[
        row("grant_1", "main", "printf 'a\nb'\t*"),
        row("grant_22", "", "ls *"),
        GrantRow {
            expires_at: Some(1_800_000),
            expires_in: Some(1_799),
            ..row("grant_3", "main", "git log *")
        },
    ]);
    assert_eq!(
        table,
        "\
GRANT     SCOPE    SESSION  PERMISSION  PATTERN           EXPIRES     PROJECT
grant_1   session  main     bash        printf 'a\\nb'\\t*  never       /r
grant_22  session  \"\"       bash        ls *              never       /r
grant_3   session  main     bash        git log *         in 29m 59s  /r
"
    );
}

/// One broker per state file: a second store starts from the state but
/// refuses to save, and `grants revoke` refuses while a broker holds it.
#[test]
fn a_held_state_file_is_read_but_not_written() {
    let dir = scratch("held");
    let root = Path::new("/work/held");
    let (mut first, _, warnings) = FileStore::open(&dir, root, 1).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut snapshot = sample(&root.to_string_lossy());
    first.save(&snapshot).unwrap();

    let (mut second, loaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert_eq!(loaded.project_grants, snapshot.project_grants);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("another toolgate holds the state file"),
        "{warnings:?}"
    );
    snapshot.project_grants.clear();
    let err = second.save(&snapshot).unwrap_err();
    assert!(matches!(err, StateError::HeldElsewhere { .. }), "{err:?}");
    assert!(err.to_string().contains("another toolgate holds"), "{err}");

    let err = revoke_grants(&dir, &["grant_p1".to_string()]).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Locked {
                task: Task::Revoke,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("revoke_grant frame"), "{err}");
    drop(first);
    drop(second);
    let revoked = revoke_grants(&dir, &["grant_p1".to_string()]).unwrap();
    assert_eq!(revoked.removed.len(), 1);
}

/// A temporary file left by a broker that died mid-save is removed by the
/// next broker that holds the file; other files are left alone.
#[test]
fn stale_temporary_files_are_removed_under_the_lock() {
    let dir = scratch("stale-tmp");
    let root = Path::new("/work/project");
    let file = state_file(&dir, root);
    let name = file.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::write(dir.join(format!(".{name}.tmp-999-1")), "{half").unwrap();
    std::fs::write(dir.join(".other.json.tmp-999-1"), "x").unwrap();
    let (_store, _, warnings) = FileStore::open(&dir, root, 1).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(names_in(&dir), vec![".other.json.tmp-999-1".to_string()]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn journal_lines(store: &FileStore) -> Vec<String> {
    std::fs::read_to_string(store.journal_path())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn records_replay_and_a_stale_journal_is_never_replayed() {
    use toolgate::store::{journal_file, Change, StoredClosed};
    let dir = scratch("journal-generations");
    let root = Path::new("/work/project");
    let (mut store, _, warnings) = FileStore::open(&dir, root, 1).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let main = sample("/work/project").sessions[1].clone();
    // The first change writes the snapshot (generation 1) and a journal.
    store.record(&[Change::Session(main.clone())]).unwrap();
    store
        .record(&[Change::ProjectGrant(grant(
            "grant_p", "bash", "make *", 5, "main",
        ))])
        .unwrap();
    store
        .record(&[
            Change::RemoveSession("main".to_string()),
            Change::Closed(StoredClosed {
                fingerprint: format!("{:016x}", session_fingerprint("main")),
                why: "ended".to_string(),
            }),
        ])
        .unwrap();
    assert_eq!(
        journal_lines(&store)[0],
        "{\"journalGeneration\":1}",
        "{:?}",
        journal_lines(&store)
    );
    // Several changes of one record are one line.
    assert_eq!(journal_lines(&store).len(), 3);
    assert!(journal_lines(&store)[2].starts_with("[{\"removeSession\":\"main\"}"));
    let path = store.path().to_path_buf();
    drop(store);
    let (_, loaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(loaded.sessions.is_empty());
    assert_eq!(loaded.project_grants.len(), 1);
    assert_eq!(loaded.closed.len(), 1);

    // A crash in a compaction, after the new snapshot (generation 2, which
    // no longer has the grant: a revocation) and before the new journal: the
    // journal of generation 1 still holds the grant and must not bring it back.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["journalGeneration"] = 2.into();
    value["projectGrants"] = serde_json::json!([]);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let (mut store, loaded, warnings) = FileStore::open(&dir, root, 3).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(loaded.project_grants.is_empty(), "{loaded:?}");
    // The next change starts generation 3 rather than append to the stale journal.
    store.record(&[Change::Session(main.clone())]).unwrap();
    assert_eq!(journal_lines(&store), ["{\"journalGeneration\":3}"]);
    drop(store);
    let (_, loaded, _) = FileStore::open(&dir, root, 4).unwrap();
    assert!(loaded.project_grants.is_empty());
    assert_eq!(loaded.sessions, [main]);
    // Starting the session again forgot that it was shut.
    assert!(loaded.closed.is_empty());
    assert!(journal_file(&path).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_batch_applies_none_of_its_changes() {
    use toolgate::store::{Change, StoredClosed};
    let dir = scratch("journal-torn-batch");
    let root = Path::new("/work/project");
    let (mut store, _, _) = FileStore::open(&dir, root, 1).unwrap();
    let main = sample("/work/project").sessions[1].clone();
    store.record(&[Change::Session(main.clone())]).unwrap();
    store
        .record(&[Change::Session(StoredSession {
            session_id: "worker".to_string(),
            ..main.clone()
        })])
        .unwrap();
    let journal = store.journal_path().to_path_buf();
    drop(store);
    // A session_end whose line was cut after its first change.
    let batch = serde_json::to_string(&[
        Change::RemoveSession("worker".to_string()),
        Change::Closed(StoredClosed {
            fingerprint: format!("{:016x}", session_fingerprint("worker")),
            why: "ended".to_string(),
        }),
    ])
    .unwrap();
    let cut = batch.find("},{").unwrap() + 2;
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str(&batch[..cut]);
    std::fs::write(&journal, text).unwrap();
    let (_, loaded, warnings) = FileStore::open(&dir, root, 2).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("incomplete record"), "{warnings:?}");
    assert_eq!(loaded.sessions.len(), 2, "{loaded:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restarted_store_appends_to_a_complete_journal() {
    use toolgate::store::Change;
    let dir = scratch("journal-restart-append");
    let root = Path::new("/work/project");
    let main = sample("/work/project").sessions[1].clone();
    let (mut store, _, _) = FileStore::open(&dir, root, 1).unwrap();
    store.record(&[Change::Session(main.clone())]).unwrap();
    store
        .record(&[Change::ProjectGrant(grant(
            "grant_p", "bash", "make *", 5, "main",
        ))])
        .unwrap();
    drop(store);
    let snapshot = std::fs::read(state_file(&dir, root)).unwrap();
    let (mut store, _, _) = FileStore::open(&dir, root, 2).unwrap();
    store
        .record(&[Change::RemoveProjectGrant("grant_p".to_string())])
        .unwrap();
    // No compaction: same snapshot, same generation, one more line.
    assert_eq!(std::fs::read(state_file(&dir, root)).unwrap(), snapshot);
    let lines = journal_lines(&store);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], "{\"journalGeneration\":1}");
    drop(store);
    let (_, loaded, warnings) = FileStore::open(&dir, root, 3).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(loaded.project_grants.is_empty());
    assert_eq!(loaded.sessions, [main]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A journal whose first line cannot be read is refused too; its records
/// cannot be known to follow the snapshot, so the repair keeps only what
/// closes a session, and says so line by line.
#[test]
fn a_journal_with_an_unreadable_header_is_repaired_to_its_closings() {
    use toolgate::store::{journal_file, repair, Change};
    let dir = scratch("repair-header");
    let root = Path::new("/work/project");
    let main = sample("/work/project").sessions[1].clone();
    let late = StoredSession {
        session_id: "late".to_string(),
        ..main.clone()
    };
    let gone = StoredClosed {
        fingerprint: format!("{:016x}", session_fingerprint("gone")),
        why: "ended".to_string(),
    };
    let (mut store, _, _) = FileStore::open(&dir, root, 1).unwrap();
    // The first change writes the snapshot; the others are journal lines.
    store.record(&[Change::Session(main.clone())]).unwrap();
    store.record(&[Change::Closed(gone.clone())]).unwrap();
    store.record(&[Change::Session(late)]).unwrap();
    drop(store);
    let journal = journal_file(&state_file(&dir, root));
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    std::fs::write(
        &journal,
        text.replacen("{\"journalGeneration\"", "{\"journalGen", 1),
    )
    .unwrap();

    let refused = FileStore::open(&dir, root, 2).unwrap_err();
    assert!(
        matches!(&refused, StateError::Damaged { damage, .. }
            if matches!(damage.lines[..], [(1, Invalid::Header(_))])),
        "{refused:?}"
    );
    let refused = refused.to_string();
    assert!(refused.contains("cannot be read at line 1"), "{refused}");
    assert!(refused.contains("toolgate state repair"), "{refused}");

    let (repaired, warnings) = repair(&dir, 3, None).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(repaired.len(), 1);
    let numbers: Vec<usize> = repaired[0].lines.iter().map(|line| line.number).collect();
    assert_eq!(numbers, [1, 3], "{}", repaired[0]);
    assert_eq!(repaired[0].kept, 1, "{}", repaired[0]);
    let (_, loaded, warnings) = FileStore::open(&dir, root, 4).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(loaded.sessions, [main]);
    assert_eq!(loaded.closed, [gone]);
    // Nothing is left to repair.
    assert!(repair(&dir, 5, None).unwrap().0.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
