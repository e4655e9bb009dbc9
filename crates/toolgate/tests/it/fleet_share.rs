//! Brokers sharing one store (`toolgate serve --listen unix:… --store URL`),
//! through the real binary and a real PostgreSQL (support::pg): a question
//! asked on one broker answered on another, many questions answered at
//! once on two brokers, a grant made on one used on another and revoked on
//! a third, a broker killed mid-question, the store stopped and started
//! again, and the notification connection cut.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{pg, project_dir, Peer, PATIENCE};

/// The brokers' lease in these tests (milliseconds): short, so that a dead
/// broker's questions are cancelled soon.
const LEASE_MS: u64 = 3000;

/// A migrated store for one test (a database of its own): its URL, the
/// cluster and the database.
#[track_caller]
fn store(name: &str) -> Option<(String, &'static pg::Cluster, String)> {
    let (database, cluster) = pg::database(name)?;
    Some((cluster.url(&database), cluster, database))
}

/// One broker of the fleet, killed (and its directory removed) on drop.
struct Node {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Node {
    /// `toolgate serve --listen unix:… --store URL --mode ask` for `root`,
    /// waited for.
    fn start(name: &str, url: &str, root: &Path) -> Node {
        Node::with_lease(name, url, root, LEASE_MS)
    }

    /// The same with a lease of `lease_ms`.
    fn with_lease(name: &str, url: &str, root: &Path, lease_ms: u64) -> Node {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        // A short path: a socket's path is limited to about 100 bytes.
        let dir = std::env::temp_dir().join(format!(
            "tgf-{}-{}-{name}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.join("b.sock");
        let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(["serve", "--mode", "ask", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--project-root")
            .arg(root)
            .args(["--store", url])
            .current_dir(root);
        for variable in [
            "TOOLGATE_MODE",
            "TOOLGATE_PERMISSION",
            "TOOLGATE_STATE_DIR",
            "TOOLGATE_MANAGED",
            "TOOLGATE_STORE",
        ] {
            command.env_remove(variable);
        }
        let child = command
            .env("TOOLGATE_LEASE_MS", lease_ms.to_string())
            .env("RUST_LOG", "debug,tokio_postgres=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let node = Node { child, dir, socket };
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
            assert!(
                started.elapsed() < PATIENCE,
                "broker {name} did not start: {}",
                node.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    fn agent(&self, client: &str) -> Peer {
        Peer::connect(
            &self.socket,
            json!({"type": "hello", "role": "agent", "client": client}),
        )
    }

    fn approver(&self, client: &str) -> Peer {
        Peer::connect(
            &self.socket,
            json!({"type": "hello", "role": "approver", "client": client}),
        )
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and its exit.
    fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < PATIENCE, "the broker did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("stderr of {}:\n{}", self.dir.display(), self.stderr());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `tool_call` for bash `command` (ask mode asks about it).
fn call(session: &str, call: &str, command: &str) -> Value {
    json!({"type": "tool_call", "sessionID": session, "callID": call,
           "tool": "bash", "input": {"command": command}})
}

/// An answer to `request`.
fn answer(request: &Value, response: &str) -> Value {
    json!({"type": "permission_response", "permissionID": request["permissionID"],
           "response": response})
}

/// Frames until one that `wanted` accepts (the others are dropped).
#[track_caller]
fn wait(peer: &mut Peer, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < PATIENCE, "no {what} in time");
        let frame = peer.recv();
        if wanted(&frame) {
            return frame;
        }
    }
}

fn kind(frame: &Value, kind: &str) -> bool {
    frame["type"] == kind
}

/// Poll `query` in `database` until it prints `expected`.
#[track_caller]
fn wait_sql(cluster: &pg::Cluster, database: &str, query: &str, expected: &str) {
    let started = Instant::now();
    loop {
        let got = cluster.psql(database, query);
        if got.trim() == expected {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{query}: {got:?}, expected {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ask `peer` for its grants until `wanted` accepts them: the grants.
#[track_caller]
fn grants_until(peer: &mut Peer, wanted: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let frame = peer.ask(json!({"type": "list_grants"}), "grants");
        let grants = frame["grants"].as_array().cloned().unwrap_or_default();
        if wanted(&grants) {
            return grants;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "grants never as wanted: {grants:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_question_asked_on_one_broker_is_answered_on_another() {
    let Some((url, cluster, database)) = store("answered_elsewhere") else {
        return;
    };
    let root = project_dir("answered_elsewhere");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let c = Node::start("c", &url, &root);
    let mut bob = b.approver("bob");
    let mut carol = c.approver("carol");
    let mut agent = a.agent("agent");
    agent.send(call("s1", "c1", "touch f1"));
    let on_c = wait(&mut carol, "the question on C", |f| {
        kind(f, "permission_request")
    });
    let on_b = wait(&mut bob, "the question on B", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(on_b, on_c, "the same request on every broker");
    assert_eq!(on_c["callID"], "c1");
    assert_eq!(on_c["title"], "touch f1");
    carol.send(answer(&on_c, "once"));
    let decision = wait(&mut agent, "the decision on A", |f| kind(f, "decision"));
    assert_eq!(decision["callID"], "c1");
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
    let resolved = wait(&mut bob, "the question resolved on B", |f| {
        kind(f, "permission_resolved")
    });
    assert_eq!(resolved["permissionID"], on_c["permissionID"]);
    let reason = resolved["reason"].as_str().unwrap();
    assert!(reason.starts_with("answered by carol on "), "{reason}");
    // A late answer from B is refused: the store's first answer stands.
    bob.send(answer(&on_b, "reject"));
    let refused = bob.recv();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "already_resolved", "{refused}");
    let row = cluster.psql(
        &database,
        "SELECT state || '|' || answered_by FROM toolgate_questions",
    );
    assert!(row.starts_with("answered|carol on "), "{row}");
    // The agent hears nothing else: no question was put to it.
    assert!(agent.quiet(Duration::from_millis(200)).is_empty());
}

#[test]
fn many_questions_answered_at_once_on_two_brokers_get_one_answer_each() {
    let Some((url, cluster, database)) = store("answer_race") else {
        return;
    };
    let count: usize = std::env::var("TOOLGATE_FLEET_RACE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let root = project_dir("answer_race");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let c = Node::start("c", &url, &root);
    // Each approver answers every question as soon as it sees it: `always`,
    // granting the narrowest option (the command itself), so that no grant
    // decides another call.
    let racer = |mut peer: Peer, done: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut frames = Vec::new();
            let mut answered = 0;
            while !done.load(Ordering::SeqCst) {
                for frame in peer.quiet(Duration::from_millis(100)) {
                    if kind(&frame, "permission_request") {
                        peer.send(json!({
                            "type": "permission_response",
                            "permissionID": frame["permissionID"],
                            "response": "always",
                            "patterns": frame["alwaysOptions"][0],
                        }));
                        answered += 1;
                    }
                    frames.push(frame);
                }
            }
            frames.extend(peer.quiet(Duration::from_millis(500)));
            (answered, frames)
        })
    };
    let done = Arc::new(AtomicBool::new(false));
    let bob = racer(b.approver("bob"), done.clone());
    let carol = racer(c.approver("carol"), done.clone());
    let mut agent = a.agent("agent");
    for n in 0..count {
        agent.send(call("race", &format!("c{n}"), &format!("touch f{n}")));
    }
    let mut decided = std::collections::HashSet::new();
    while decided.len() < count {
        let frame = agent.recv();
        if kind(&frame, "decision") {
            assert_eq!(frame["decision"], "allow", "{frame}");
            assert_eq!(frame["source"], "user", "{frame}");
            assert!(
                decided.insert(frame["callID"].as_str().unwrap().to_string()),
                "two decisions for one call: {frame}"
            );
        }
    }
    done.store(true, Ordering::SeqCst);
    let (bob_answered, bob_frames) = bob.join().unwrap();
    let (carol_answered, carol_frames) = carol.join().unwrap();
    assert_eq!(bob_answered, count, "bob saw every question");
    assert_eq!(carol_answered, count, "carol saw every question");
    // Exactly one answer per question, its grant written once.
    let answered = cluster.psql(
        &database,
        "SELECT count(*) FILTER (WHERE state = 'answered'), count(*) FROM toolgate_questions",
    );
    assert_eq!(answered.trim(), format!("{count}|{count}"));
    let grants = cluster.psql(
        &database,
        "SELECT count(*), count(DISTINCT question_id) FROM toolgate_grants",
    );
    assert_eq!(grants.trim(), format!("{count}|{count}"));
    let doubled = cluster.psql(
        &database,
        "SELECT count(*) FROM toolgate_grants g JOIN toolgate_questions q ON q.id = g.question_id \
         WHERE g.made_by <> q.answered_by",
    );
    assert_eq!(doubled.trim(), "0", "a grant by the answer that lost");
    // Each approver was told of every answer it lost, and of no other.
    let wins = |who: &str| -> usize {
        cluster
            .psql(
                &database,
                &format!(
                    "SELECT count(*) FROM toolgate_questions WHERE answered_by LIKE '{who} on %'"
                ),
            )
            .trim()
            .parse()
            .unwrap()
    };
    let (bob_won, carol_won) = (wins("bob"), wins("carol"));
    assert_eq!(bob_won + carol_won, count);
    let lost = |frames: &[Value]| {
        frames
            .iter()
            .filter(|f| kind(f, "error") && f["code"] == "already_resolved")
            .count()
    };
    assert_eq!(lost(&bob_frames), count - bob_won, "bob's lost answers");
    assert_eq!(
        lost(&carol_frames),
        count - carol_won,
        "carol's lost answers"
    );
    // No broker's reads by revision gave up on a change that then came:
    // each renewal's whole read (every second with this lease) would find
    // it, and says so.
    for (name, node) in [("a", &a), ("b", &b), ("c", &c)] {
        let log = node.stderr();
        let missed: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("that the reads by revision had passed"))
            .collect();
        assert!(missed.is_empty(), "broker {name}: {missed:#?}");
    }
}

#[test]
fn an_always_on_one_broker_holds_on_another_until_a_third_revokes_it() {
    let Some((url, _cluster, _database)) = store("grant_shared") else {
        return;
    };
    let root = project_dir("grant_shared");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let c = Node::start("c", &url, &root);
    // A's own approver answers `always` for the project.
    let mut alice = a.approver("alice");
    let mut agent_a = a.agent("agent-a");
    agent_a.send(call("s1", "c1", "git commit -m one"));
    let asked = wait(&mut alice, "the question on A", |f| {
        kind(f, "permission_request")
    });
    alice.send(
        json!({"type": "permission_response", "permissionID": asked["permissionID"],
                      "response": "always", "scope": "project"}),
    );
    let decision = wait(&mut agent_a, "the decision on A", |f| kind(f, "decision"));
    assert_eq!(decision["decision"], "allow", "{decision}");
    let reason = decision["reason"].as_str().unwrap();
    assert!(
        reason.contains("granted its `always` patterns for every session of the project"),
        "{reason}"
    );
    // B learns the grant, and a call of another session there is allowed by it.
    let mut agent_b = b.agent("agent-b");
    let grants = grants_until(&mut agent_b, |grants| grants.len() == 1);
    assert_eq!(grants[0]["pattern"], "git commit *");
    assert_eq!(grants[0]["scope"], "project");
    let id = grants[0]["grantID"].clone();
    let on_b = agent_b.ask(call("s2", "c2", "git commit -m two"), "decision");
    assert_eq!(on_b["decision"], "allow", "{on_b}");
    assert_eq!(on_b["source"], "grant", "{on_b}");
    // C revokes it; its reply comes once the store has it.
    let mut admin = c.agent("admin");
    grants_until(&mut admin, |grants| grants.len() == 1);
    let revoked = admin.ask(json!({"type": "revoke_grant", "grantID": id}), "grants");
    assert_eq!(revoked["grants"], json!([]), "{revoked}");
    assert!(revoked.get("notSaved").is_none(), "{revoked}");
    // B drops it: its next such call asks (C's approver is asked) again.
    grants_until(&mut agent_b, <[Value]>::is_empty);
    let mut carol = c.approver("carol");
    agent_b.send(call("s2", "c3", "git commit -m three"));
    let asked = wait(&mut carol, "the question on C", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(asked["callID"], "c3");
    carol.send(answer(&asked, "reject"));
    let decision = wait(&mut agent_b, "the decision on B", |f| kind(f, "decision"));
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
}

#[test]
fn a_broker_killed_mid_question_has_its_question_cancelled_within_its_lease() {
    let Some((url, cluster, database)) = store("killed_mid_question") else {
        return;
    };
    let root = project_dir("killed_mid_question");
    let mut a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let mut bob = b.approver("bob");
    let mut agent = a.agent("agent");
    agent.send(call("s1", "c1", "touch f1"));
    let asked = wait(&mut bob, "the question on B", |f| {
        kind(f, "permission_request")
    });
    a.kill();
    let killed = Instant::now();
    let resolved = wait(&mut bob, "the question cancelled", |f| {
        kind(f, "permission_resolved")
    });
    // Its lease, and at most a third of one more for B's renewal to see it.
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(LEASE_MS * 2),
        "cancelled after {took:?}"
    );
    assert_eq!(resolved["permissionID"], asked["permissionID"]);
    let reason = resolved["reason"].as_str().unwrap();
    assert!(reason.contains("lease"), "{reason}");
    // A late answer is refused.
    bob.send(answer(&asked, "once"));
    let refused = bob.recv();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        cluster
            .psql(
                &database,
                "SELECT state || '|' || cancelled FROM toolgate_questions"
            )
            .trim(),
        "cancelled|lease"
    );
    wait_sql(
        cluster,
        &database,
        "SELECT count(*) FROM toolgate_brokers",
        "1",
    );
}

#[test]
fn a_broker_that_stops_cleanly_cancels_its_questions_and_leaves() {
    let Some((url, cluster, database)) = store("clean_stop") else {
        return;
    };
    let root = project_dir("clean_stop");
    let mut a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let mut bob = b.approver("bob");
    let mut agent = a.agent("agent");
    agent.send(call("s1", "c1", "touch f1"));
    wait(&mut bob, "the question on B", |f| {
        kind(f, "permission_request")
    });
    assert!(a.stop().success());
    let resolved = wait(&mut bob, "the question cancelled", |f| {
        kind(f, "permission_resolved")
    });
    let reason = resolved["reason"].as_str().unwrap();
    assert!(
        reason.contains("shut down") || reason.contains("stopped"),
        "{reason}"
    );
    assert_eq!(
        cluster
            .psql(&database, "SELECT count(*) FROM toolgate_brokers")
            .trim(),
        "1",
        "A left the store"
    );
}

#[test]
fn a_cut_notification_connection_is_made_again_and_what_it_missed_is_read() {
    let Some((url, cluster, database)) = store("listen_cut") else {
        return;
    };
    let root = project_dir("listen_cut");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let mut bob = b.approver("bob");
    let mut agent = a.agent("agent");
    for round in 0..3 {
        cluster.psql(
            &database,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        );
        // Asked at once, while B may still be reconnecting: B reads it when
        // it has.
        agent.send(call("s1", &format!("c{round}"), &format!("touch f{round}")));
        let asked = wait(&mut bob, "the question on B", |f| {
            kind(f, "permission_request")
        });
        assert_eq!(asked["callID"], format!("c{round}"));
        bob.send(answer(&asked, "once"));
        let decision = wait(&mut agent, "the decision", |f| kind(f, "decision"));
        assert_eq!(decision["decision"], "allow", "{decision}");
    }
    // Both listen again.
    wait_sql(
        cluster,
        &database,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND query LIKE 'LISTEN%'",
        "2",
    );
}

/// A cluster of this test's own (stopping the process's one would stop
/// every test's) with a database `name`, and its URL.
fn own_cluster(name: &str) -> Option<(pg::Cluster, String)> {
    pg::cluster()?;
    let cluster = pg::Cluster::start().unwrap();
    cluster.psql("postgres", &format!("CREATE DATABASE {name}"));
    let url = cluster.url(name);
    Some((cluster, url))
}

#[test]
fn a_store_stopped_and_started_again_loses_no_question_and_no_reported_change() {
    let Some((cluster, url)) = own_cluster("restart") else {
        return;
    };
    let root = project_dir("restart");
    // A lease longer than the restart: the question outlives it.
    let a = Node::with_lease("a", &url, &root, 20_000);
    let c = Node::with_lease("c", &url, &root, 20_000);
    let mut carol = c.approver("carol");
    let mut agent = a.agent("agent");
    let started = agent.ask(
        json!({"type": "session_start", "sessionID": "s1"}),
        "session_started",
    );
    assert!(started.get("notSaved").is_none(), "{started}");
    agent.send(call("s1", "c1", "touch f1"));
    let asked = wait(&mut carol, "the question on C", |f| {
        kind(f, "permission_request")
    });
    // As a crash would.
    cluster.stop();
    // A change made meanwhile is in force and said not to be saved yet.
    let changed = agent.ask(
        json!({"type": "set_mode", "sessionID": "s3", "mode": "readonly"}),
        "mode_changed",
    );
    assert_eq!(changed["mode"], "readonly");
    let not_saved = changed["notSaved"].as_str().unwrap_or_default();
    assert!(
        not_saved.starts_with("not in the shared store yet"),
        "{changed}"
    );
    // A question nobody here can be asked is denied at once.
    let denied = agent.ask(call("s2", "c2", "touch f2"), "decision");
    assert_eq!(denied["decision"], "deny", "{denied}");
    let reason = denied["reason"].as_str().unwrap();
    assert!(reason.ends_with("so nobody can be asked"), "{reason}");
    cluster.start_again().unwrap();
    // The change reaches the store once it is back.
    wait_sql(
        &cluster,
        "restart",
        "SELECT mode FROM toolgate_sessions WHERE session_id = 's3'",
        "readonly",
    );
    // The question asked before the stop is still open, and answered from C
    // (once C is back: until then it says it cannot reach the store).
    let begun = Instant::now();
    loop {
        carol.send(answer(&asked, "once"));
        let Some(refusal) = carol.quiet(Duration::from_millis(300)).into_iter().next() else {
            break;
        };
        assert_eq!(refusal["type"], "error", "{refusal}");
        assert_eq!(refusal["code"], "store_unavailable", "{refusal}");
        let message = refusal["message"].as_str().unwrap();
        assert!(message.contains("cannot be reached now"), "{message}");
        assert!(begun.elapsed() < PATIENCE, "C never came back");
    }
    let decision = wait(&mut agent, "the decision on A", |f| kind(f, "decision"));
    assert_eq!(decision["callID"], "c1");
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
    drop((a, c));
    drop(cluster);
}

#[test]
fn grants_are_not_used_past_the_staleness_bound_and_always_becomes_once() {
    let Some((cluster, url)) = own_cluster("stale") else {
        return;
    };
    let root = project_dir("stale");
    // A lease of 1 s: grants are used for 2 s after the store was last heard.
    let a = Node::with_lease("a", &url, &root, 1000);
    let mut alice = a.approver("alice");
    let mut agent = a.agent("agent");
    agent.send(call("s1", "c1", "git commit -m one"));
    let asked = wait(&mut alice, "the question", |f| {
        kind(f, "permission_request")
    });
    alice.send(
        json!({"type": "permission_response", "permissionID": asked["permissionID"],
                      "response": "always", "scope": "project"}),
    );
    let decision = wait(&mut agent, "the decision", |f| kind(f, "decision"));
    assert_eq!(decision["decision"], "allow", "{decision}");
    let granted = agent.ask(call("s1", "c2", "git commit -m two"), "decision");
    assert_eq!(granted["source"], "grant", "{granted}");
    cluster.stop();
    // Past the bound (twice the lease) the grant is not used: the call asks
    // this broker's approver, and its `always` counts as `once`.
    std::thread::sleep(Duration::from_millis(2500));
    agent.send(call("s1", "c3", "git commit -m three"));
    let asked = wait(&mut alice, "the question", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(asked["callID"], "c3");
    alice.send(
        json!({"type": "permission_response", "permissionID": asked["permissionID"],
                      "response": "always", "scope": "project"}),
    );
    let decision = wait(&mut agent, "the decision", |f| kind(f, "decision"));
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
    let reason = decision["reason"].as_str().unwrap();
    assert!(
        reason.contains("counts as `once` and granted nothing"),
        "{reason}"
    );
    cluster.start_again().unwrap();
    // Heard from again: the grant is used again.
    let begun = Instant::now();
    for n in 4.. {
        // (A command of its own each time: the same one again and again
        // would be asked about as a loop.)
        agent.send(call("s1", &format!("c{n}"), &format!("git commit -m {n}")));
        // Not back yet: the call asks alice, who rejects it.
        if let Some(asked) = alice
            .quiet(Duration::from_millis(200))
            .into_iter()
            .find(|f| kind(f, "permission_request"))
        {
            alice.send(answer(&asked, "reject"));
        }
        let decision = wait(&mut agent, "the decision", |f| kind(f, "decision"));
        if decision["source"] == "grant" {
            break;
        }
        assert_eq!(decision["decision"], "deny", "{decision}");
        assert!(
            begun.elapsed() < PATIENCE,
            "the grant never came back: {decision}"
        );
    }
    drop(a);
    drop(cluster);
}

/// A TCP proxy to the store that can be cut as a network partition cuts:
/// nothing more is forwarded either way, and no connection is closed.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let cutting = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let cut = cutting.clone();
                std::thread::spawn(move || {
                    let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    let pump = |mut from: std::net::TcpStream,
                                mut to: std::net::TcpStream,
                                cut: Arc<AtomicBool>| {
                        use std::io::{Read, Write};
                        let mut buffer = [0u8; 16 * 1024];
                        loop {
                            match from.read(&mut buffer) {
                                Ok(0) | Err(_) => return,
                                // Cut: swallowed, never answered, never closed.
                                Ok(_) if cut.load(Ordering::SeqCst) => {}
                                Ok(n) => {
                                    if to.write_all(&buffer[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    };
                    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let cut2 = cut.clone();
                    std::thread::spawn(move || pump(c2, s2, cut2));
                    pump(server, client, cut);
                });
            }
        });
        Proxy { port, cut }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_revocation_reaches_a_cut_off_broker_within_the_bound_or_its_grants_go_unused() {
    let Some((url, cluster, database)) = store("cut_off") else {
        return;
    };
    let root = project_dir("cut_off");
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|tail| tail.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap();
    let proxy = Proxy::start(port);
    let through = url.replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
    // B reaches the store through the proxy; its lease is 1 s, so the bound
    // (twice the lease) is 2 s.
    let a = Node::with_lease("a", &url, &root, 1000);
    let b = Node::with_lease("b", &through, &root, 1000);
    let mut alice = a.approver("alice");
    let mut agent_a = a.agent("agent-a");
    agent_a.send(call("s1", "c1", "git commit -m one"));
    let asked = wait(&mut alice, "the question", |f| {
        kind(f, "permission_request")
    });
    alice.send(
        json!({"type": "permission_response", "permissionID": asked["permissionID"],
                      "response": "always", "scope": "project"}),
    );
    wait(&mut agent_a, "the decision", |f| kind(f, "decision"));
    let mut agent_b = b.agent("agent-b");
    let grants = grants_until(&mut agent_b, |grants| grants.len() == 1);
    let on_b = agent_b.ask(call("s2", "c2", "git commit -m two"), "decision");
    assert_eq!(on_b["source"], "grant", "{on_b}");
    // B is cut off; the grant is revoked on A meanwhile.
    proxy.cut();
    let revoked = agent_a.ask(
        json!({"type": "revoke_grant", "grantID": grants[0]["grantID"]}),
        "grants",
    );
    assert!(revoked.get("notSaved").is_none(), "{revoked}");
    let revoked_at = Instant::now();
    assert_eq!(
        cluster
            .psql(
                &database,
                "SELECT count(*) FROM toolgate_grants WHERE revoked_at IS NOT NULL"
            )
            .trim(),
        "1"
    );
    // B never hears of it; from the bound on, it does not use the grant.
    let bound = Duration::from_millis(2 * 1000);
    for n in 3.. {
        let decision = agent_b.ask(
            call("s2", &format!("c{n}"), &format!("git commit -m {n}")),
            "decision",
        );
        let at = revoked_at.elapsed();
        if decision["source"] == "grant" {
            assert!(
                at < bound,
                "the revoked grant allowed a call {at:?} after its revocation"
            );
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        // Nobody can be asked from B now (once it knows): the call is denied.
        assert_eq!(decision["decision"], "deny", "{decision}");
        let reason = decision["reason"].as_str().unwrap();
        assert!(reason.contains("nobody can be asked"), "{reason}");
        break;
    }
    drop(proxy);
}

#[test]
fn a_change_that_commits_after_later_ones_were_read_is_still_read() {
    // A grant's insert draws its revision, then takes three seconds (a
    // trigger of the test's, after toolgate's) before it commits; two
    // grants written meanwhile commit and are read first. The broker must
    // not give the slow one up while its transaction runs: it is read when
    // it commits, not at the next whole read (every 20 s with this lease).
    let Some((url, cluster, database)) = store("slow_commit") else {
        return;
    };
    let root = project_dir("slow_commit");
    let b = Node::with_lease("b", &url, &root, 60_000);
    let mut agent = b.agent("agent");
    cluster.psql(
        &database,
        "CREATE FUNCTION zz_slow() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.id = 'grant_slow' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$; \
         CREATE TRIGGER zz_slow BEFORE INSERT ON toolgate_grants \
         FOR EACH ROW EXECUTE FUNCTION zz_slow()",
    );
    let project = root.to_str().unwrap().replace('\'', "''");
    let insert = move |id: &str, command: &str| {
        format!(
            "INSERT INTO toolgate_grants (id, project, session_id, scope, permission, \
             pattern, literal, revision) VALUES ('{id}', '{project}', 's1', 'project', \
             'bash', '{command}', {}, 0)",
            command.len()
        )
    };
    // A first revision drawn: the sequence logs (and takes a transaction
    // id for) one draw in 32, the first among them.
    cluster.psql(&database, &insert("grant_first", "touch first"));
    grants_until(&mut agent, |grants| grants.len() == 1);
    let slow = {
        let (cluster, database, sql) = (
            cluster,
            database.clone(),
            insert("grant_slow", "touch slow"),
        );
        std::thread::spawn(move || {
            cluster.psql(&database, &sql);
            Instant::now()
        })
    };
    for (n, id) in ["grant_a", "grant_b", "grant_c"].iter().enumerate() {
        std::thread::sleep(Duration::from_millis(500));
        cluster.psql(&database, &insert(id, &format!("touch {id}")));
        grants_until(&mut agent, |grants| grants.len() == n + 2);
    }
    let committed = slow.join().unwrap();
    let grants = grants_until(&mut agent, |grants| grants.len() == 5);
    assert!(
        grants.iter().any(|g| g["grantID"] == "grant_slow"),
        "{grants:?}"
    );
    assert!(
        committed.elapsed() < Duration::from_secs(5),
        "the slow grant was read {:?} after it committed",
        committed.elapsed()
    );
    agent.send(call("s1", "c1", "touch slow"));
    let decision = wait(&mut agent, "the decision", |f| kind(f, "decision"));
    assert_eq!(decision["source"], "grant", "{decision}");
}

/// The effective mode `peer`'s broker holds for `session` (`list_sessions`),
/// `None` when it holds no such session (closed, or never heard of).
fn listed_mode(peer: &mut Peer, session: &str) -> Option<String> {
    let listed = peer.ask(json!({"type": "list_sessions"}), "sessions");
    listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|info| info["sessionID"] == session)
        .map(|info| info["mode"].as_str().unwrap().to_string())
}

/// The store's row of `session`: its mode and whether it is closed
/// (`mode|closed`, empty parts for NULL).
fn stored_session(cluster: &pg::Cluster, database: &str, session: &str) -> String {
    cluster
        .psql(
            database,
            &format!(
                "SELECT coalesce(mode, '') || '|' || coalesce(closed, '') \
                 FROM toolgate_sessions WHERE session_id = '{session}'"
            ),
        )
        .trim()
        .to_string()
}

/// Wait until every broker of `peers` holds `session` in the mode the store
/// holds for it (open): that mode.
#[track_caller]
fn converged(
    cluster: &pg::Cluster,
    database: &str,
    peers: &mut [&mut Peer],
    session: &str,
) -> String {
    let started = Instant::now();
    loop {
        let stored = stored_session(cluster, database, session);
        let (mode, closed) = stored.split_once('|').unwrap();
        assert_eq!(closed, "", "{session} is closed in the store");
        let held: Vec<Option<String>> = peers
            .iter_mut()
            .map(|peer| listed_mode(peer, session))
            .collect();
        if held.iter().all(|held| held.as_deref() == Some(mode)) {
            // The store did not move meanwhile.
            if stored_session(cluster, database, session) == stored {
                return mode.to_string();
            }
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the brokers hold {held:?} for {session}, the store {stored}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two brokers changing one session's mode at the same moment, many times:
/// the store keeps one of them, and both brokers end on the store's. A
/// start on B that names no mode, racing a mode change on A, never
/// overwrites A's mode with B's stale one (it did when every session write
/// was the whole session: a session set to plan could end in ask).
/// `TOOLGATE_FLEET_SESSION_RACE=N` makes each race N rounds long.
#[test]
fn racing_session_writes_on_two_brokers_end_on_the_stores_mode_everywhere() {
    let Some((url, cluster, database)) = store("mode_race") else {
        return;
    };
    let rounds: usize = std::env::var("TOOLGATE_FLEET_SESSION_RACE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    let root = project_dir("mode_race");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let mut on_a = a.agent("agent-a");
    let mut on_b = b.agent("agent-b");
    on_a.ask(
        json!({"type": "session_start", "sessionID": "s", "mode": "ask"}),
        "session_started",
    );
    let mut ends = std::collections::BTreeMap::new();
    for round in 0..rounds {
        let (to_a, to_b) = if round % 2 == 0 {
            ("plan", "auto")
        } else {
            ("auto", "plan")
        };
        on_a.send(json!({"type": "set_mode", "sessionID": "s", "mode": to_a}));
        on_b.send(json!({"type": "set_mode", "sessionID": "s", "mode": to_b}));
        let changed_a = on_a.until("mode_changed").pop().unwrap();
        let changed_b = on_b.until("mode_changed").pop().unwrap();
        assert!(changed_a.get("notSaved").is_none(), "{changed_a}");
        assert!(changed_b.get("notSaved").is_none(), "{changed_b}");
        let mode = converged(cluster, &database, &mut [&mut on_a, &mut on_b], "s");
        assert!(mode == "plan" || mode == "auto", "{mode}");
        *ends.entry(mode).or_insert(0) += 1;
    }
    eprintln!("the store ended on {ends:?}");
    // A mode set on A racing a start on B that names none: the start keeps
    // the mode the store holds, so the session ends in plan whichever
    // commits first, on both brokers.
    for round in 0..rounds {
        let session = format!("t{round}");
        on_a.send(json!({"type": "set_mode", "sessionID": session, "mode": "plan"}));
        on_b.send(json!({"type": "session_start", "sessionID": session}));
        let changed = on_a.until("mode_changed").pop().unwrap();
        assert_eq!(changed["mode"], "plan", "{changed}");
        let started = on_b.until("session_started").pop().unwrap();
        assert!(started.get("notSaved").is_none(), "{started}");
        // Both writes are committed before their frames leave.
        assert_eq!(
            stored_session(cluster, &database, &session),
            "plan|",
            "round {round}"
        );
        let mode = converged(cluster, &database, &mut [&mut on_a, &mut on_b], &session);
        assert_eq!(mode, "plan", "round {round}");
    }
    drop((a, b));
}

/// A session closed elsewhere stays closed when a broker that has not heard
/// yet changes its mode: the store refuses the change, the broker learns
/// that the session is closed and denies its calls. Only a start opens it
/// again. (A mode change used to write the whole session and open it.)
#[test]
fn a_mode_change_never_opens_a_session_closed_on_another_broker() {
    let Some((url, cluster, database)) = store("closed_mode") else {
        return;
    };
    let root = project_dir("closed_mode");
    // A long lease: no renewal reads the store during the test (the first
    // one comes after a third of it), so A hears only by notification.
    let a = Node::with_lease("a", &url, &root, 90_000);
    let b = Node::with_lease("b", &url, &root, 90_000);
    let mut on_a = a.agent("agent-a");
    let mut on_b = b.agent("agent-b");
    let closed_on_a = |on_a: &mut Peer, session: &str| {
        let started = Instant::now();
        while listed_mode(on_a, session).is_some() {
            assert!(started.elapsed() < PATIENCE, "A still runs {session}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let denied = on_a.ask(call(session, "c1", "touch f"), "decision");
        assert_eq!(denied["decision"], "deny", "{denied}");
        let reason = denied["reason"].as_str().unwrap();
        assert!(
            reason.starts_with(&format!("the session `{session}` has ended")),
            "{reason}"
        );
    };
    // Closed in the store without a notification (as if A had not heard
    // yet): A's mode change is refused there.
    on_a.ask(
        json!({"type": "session_start", "sessionID": "quiet", "mode": "ask"}),
        "session_started",
    );
    cluster.psql(
        &database,
        "BEGIN; ALTER TABLE toolgate_sessions DISABLE TRIGGER toolgate_sessions_notify; \
         UPDATE toolgate_sessions SET closed = 'ended', closed_at = now() \
         WHERE session_id = 'quiet'; \
         ALTER TABLE toolgate_sessions ENABLE TRIGGER toolgate_sessions_notify; COMMIT;",
    );
    on_a.send(json!({"type": "set_mode", "sessionID": "quiet", "mode": "auto"}));
    let reply = wait(&mut on_a, "A's answer to set_mode", |f| {
        kind(f, "mode_changed") || kind(f, "error")
    });
    assert_eq!(reply["mode"], "auto", "A had not heard: {reply}");
    // Its frame says that the store did not take it.
    assert_eq!(
        reply["notSaved"],
        "the session `quiet` ended on another broker sharing the store: the mode change was not saved, and the session ends here too",
        "{reply}"
    );
    assert_eq!(stored_session(cluster, &database, "quiet"), "ask|ended");
    closed_on_a(&mut on_a, "quiet");
    // Ended on B while A changes its mode, at the same moment, many times:
    // it ends closed in the store and on A, whichever came first.
    for round in 0..20 {
        let session = format!("e{round}");
        on_a.ask(
            json!({"type": "session_start", "sessionID": session, "mode": "ask"}),
            "session_started",
        );
        let started = Instant::now();
        while listed_mode(&mut on_b, &session).is_none() {
            assert!(started.elapsed() < PATIENCE, "B never heard of {session}");
            std::thread::sleep(Duration::from_millis(10));
        }
        on_b.send(json!({"type": "session_end", "sessionID": session}));
        on_a.send(json!({"type": "set_mode", "sessionID": session, "mode": "auto"}));
        on_b.until("session_ended");
        // A either changed the mode (it had not heard) or was told the
        // session ended.
        let reply = wait(&mut on_a, "A's answer to set_mode", |f| {
            kind(f, "mode_changed") || kind(f, "error")
        });
        assert!(
            kind(&reply, "mode_changed") || reply["code"] == "unknown_session",
            "{reply}"
        );
        // A mode change the store refused says so; one it took came before
        // the end.
        if let Some(why) = reply["notSaved"].as_str() {
            assert!(why.contains("the mode change was not saved"), "{reply}");
        }
        assert_eq!(
            stored_session(cluster, &database, &session)
                .split_once('|')
                .unwrap()
                .1,
            "ended",
            "round {round}: {reply}"
        );
        closed_on_a(&mut on_a, &session);
    }
    // A start opens it again, everywhere.
    on_b.ask(
        json!({"type": "session_start", "sessionID": "quiet", "mode": "plan"}),
        "session_started",
    );
    assert_eq!(
        converged(cluster, &database, &mut [&mut on_a, &mut on_b], "quiet"),
        "plan"
    );
    drop((a, b));
}

/// A session joined under a parent without a scope of its own meets the
/// scopes of the parent's other sub-tasks on the broker that started it,
/// and keeps that scope once its own write comes back from the store (it
/// used to be scoped again from its parent's alone, wider, when the store's
/// row of it was read back).
#[test]
fn a_joined_session_keeps_its_scope_when_its_own_write_is_read_back() {
    let Some((url, cluster, database)) = store("joined") else {
        return;
    };
    let root = project_dir("joined");
    let a = Node::start("a", &url, &root);
    let mut on_a = a.agent("agent-a");
    on_a.ask(
        json!({"type": "session_start", "sessionID": "main", "mode": "auto"}),
        "session_started",
    );
    on_a.ask(
        json!({"type": "session_start", "sessionID": "task", "parentID": "main",
               "permissions": {"allowedTools": ["Read", "Grep"]}}),
        "session_started",
    );
    let joined = on_a.ask(
        json!({"type": "session_start", "sessionID": "sub", "parentID": "main", "join": true}),
        "session_started",
    );
    let scope = joined["scope"].clone();
    assert_ne!(scope, Value::Null, "{joined}");
    wait_sql(
        cluster,
        &database,
        "SELECT count(*) FROM toolgate_sessions WHERE session_id = 'sub'",
        "1",
    );
    // The store's row of it is read back within a notification; a renewal
    // reads everything again within a third of the lease.
    std::thread::sleep(Duration::from_millis(LEASE_MS / 3 + 500));
    let listed = on_a.ask(json!({"type": "list_sessions"}), "sessions");
    let held = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|info| info["sessionID"] == "sub")
        .unwrap()["scope"]
        .clone();
    assert_eq!(held, scope, "{listed}");
    // And a call the joined scope denies is denied.
    let denied = on_a.ask(call("sub", "c1", "touch f"), "decision");
    assert_eq!(denied["decision"], "deny", "{denied}");
    drop(a);
}

/// The scope `peer`'s broker lists for `session`, once it lists one
/// equal to `wanted` (or what it lists at the deadline).
fn listed_scope(peer: &mut Peer, session: &str, wanted: &Value) -> Value {
    let started = Instant::now();
    loop {
        let listed = peer.ask(json!({"type": "list_sessions"}), "sessions");
        let scope = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|info| info["sessionID"] == session)
            .map(|info| info["scope"].clone())
            .unwrap_or(Value::Null);
        if scope == *wanted || started.elapsed() > PATIENCE {
            return scope;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A session joined under `main` without a scope of its own, after `main`
/// started the sub-task `t1` with one, has the same scope on the other
/// brokers: one that read its row while running, and one started after
/// (it used to come back with `main`'s scope alone there, and its call was
/// allowed), even once `t1` ended.
#[test]
fn a_joined_session_has_its_scope_on_every_broker() {
    let Some((url, cluster, database)) = store("joined-fleet") else {
        return;
    };
    let root = project_dir("joined-fleet");
    let a = Node::start("a", &url, &root);
    let b = Node::start("b", &url, &root);
    let mut on_a = a.agent("agent-a");
    let mut on_b = b.agent("agent-b");
    on_a.ask(
        json!({"type": "session_start", "sessionID": "main", "mode": "auto"}),
        "session_started",
    );
    on_a.ask(
        json!({"type": "session_start", "sessionID": "t1", "parentID": "main",
               "permissions": {"allowedTools": ["Read"]}}),
        "session_started",
    );
    let joined = on_a.ask(
        json!({"type": "session_start", "sessionID": "c", "parentID": "main", "join": true}),
        "session_started",
    );
    let scope = joined["scope"].clone();
    let denied = on_a.ask(call("c", "a1", "rm -rf build"), "decision");
    assert_eq!(denied["source"], "scope", "{denied}");
    wait_sql(
        cluster,
        &database,
        "SELECT joined IS NOT NULL FROM toolgate_sessions WHERE session_id = 'c'",
        "t",
    );
    // B read the rows while running.
    assert_eq!(listed_scope(&mut on_b, "c", &scope), scope);
    let denied = on_b.ask(call("c", "b1", "rm -rf build"), "decision");
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert_eq!(denied["source"], "scope", "{denied}");
    // C starts from the store, once t1 ended.
    on_a.ask(
        json!({"type": "session_end", "sessionID": "t1"}),
        "session_ended",
    );
    wait_sql(
        cluster,
        &database,
        "SELECT closed FROM toolgate_sessions WHERE session_id = 't1'",
        "ended",
    );
    let c = Node::start("c", &url, &root);
    let mut on_c = c.agent("agent-c");
    assert_eq!(listed_scope(&mut on_c, "c", &scope), scope);
    let denied = on_c.ask(call("c", "c1", "rm -rf build"), "decision");
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert_eq!(denied["source"], "scope", "{denied}");
    drop((a, b, c));
}

/// An approver (`role`) on `node` that follows every project (`hello`
/// with `"projects": "all"`): its `ready` says so.
fn follower(node: &Node, client: &str, role: &str) -> Peer {
    let stream = std::os::unix::net::UnixStream::connect(&node.socket).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut peer = Peer::from_stream(stream);
    assert_eq!(peer.recv()["type"], "ready");
    peer.send(json!({"type": "hello", "role": role, "client": client, "projects": "all"}));
    let ready = peer.recv();
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["role"], role, "{ready}");
    assert_eq!(ready["projects"], "all", "{ready}");
    peer
}

/// The `permission_request` frames among `frames`.
fn requests(frames: &[Value]) -> Vec<&Value> {
    frames
        .iter()
        .filter(|f| kind(f, "permission_request"))
        .collect()
}

/// One inbox across projects: brokers A (/p1) and B (/p2) on one store; an
/// approver on A that follows every project sees B's questions (those open
/// when it connects too), named by project and host, answers them through
/// the store (`once`; `always`, whose grant is B's project's: B allows the
/// next such call, A never holds it), hears them closed when B withdraws
/// them, and a late answer is refused. An approver on A without the option
/// never sees B's questions, and an observer that follows every project
/// sees them but cannot answer.
#[test]
fn one_inbox_across_projects() {
    let Some((url, cluster, database)) = store("inbox") else {
        return;
    };
    let p1 = project_dir("inbox_p1");
    let p2 = project_dir("inbox_p2");
    let a = Node::start("a", &url, &p1);
    let b = Node::start("b", &url, &p2);
    let mut plain = a.approver("plain");
    let mut agent_b = b.agent("agent-b");
    // A question of /p2 open before the lead connects.
    agent_b.send(call("s1", "c1", "touch f1"));
    wait_sql(
        cluster,
        &database,
        "SELECT count(*) FROM toolgate_questions WHERE state = 'open'",
        "1",
    );
    let mut lead = follower(&a, "lead", "approver");
    let mut watcher = follower(&a, "watcher", "observer");
    let asked = wait(&mut lead, "B's open question on A", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(asked["callID"], "c1", "{asked}");
    assert_eq!(
        asked["metadata"]["project"],
        p2.to_string_lossy().as_ref(),
        "{asked}"
    );
    assert!(asked["metadata"]["host"].is_string(), "{asked}");
    let seen = wait(&mut watcher, "B's question for the observer", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(seen["permissionID"], asked["permissionID"]);
    // The observer cannot answer it.
    watcher.send(answer(&seen, "reject"));
    let refused = wait(&mut watcher, "the observer's refusal", |f| kind(f, "error"));
    assert_eq!(refused["code"], "forbidden", "{refused}");
    // The plain approver cannot either: it was never asked.
    plain.send(answer(&asked, "reject"));
    let refused = wait(&mut plain, "the plain approver's refusal", |f| {
        kind(f, "error")
    });
    assert_eq!(refused["code"], "unknown_permission", "{refused}");
    lead.send(answer(&asked, "once"));
    let decision = wait(&mut agent_b, "the decision on B", |f| kind(f, "decision"));
    assert_eq!(decision["callID"], "c1", "{decision}");
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
    let row = cluster.psql(
        &database,
        "SELECT state || '|' || answered_by FROM toolgate_questions",
    );
    assert!(row.starts_with("answered|lead on "), "{row}");
    // The observer hears it closed; a second answer is refused.
    let closed = wait(&mut watcher, "the question closed for the observer", |f| {
        kind(f, "permission_resolved")
    });
    assert_eq!(closed["permissionID"], asked["permissionID"]);
    lead.send(answer(&asked, "reject"));
    let late = wait(&mut lead, "the late answer's refusal", |f| kind(f, "error"));
    assert_eq!(late["code"], "already_resolved", "{late}");

    // `always` for the project, given on A to B's question.
    agent_b.send(call("s2", "c2", "git commit -m one"));
    let asked = wait(&mut lead, "B's second question on A", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(asked["callID"], "c2", "{asked}");
    lead.send(
        json!({"type": "permission_response", "permissionID": asked["permissionID"],
                     "response": "always", "scope": "project"}),
    );
    let decision = wait(&mut agent_b, "the decision on B", |f| kind(f, "decision"));
    assert_eq!(decision["callID"], "c2", "{decision}");
    assert_eq!(decision["decision"], "allow", "{decision}");
    let projects = cluster.psql(
        &database,
        "SELECT string_agg(DISTINCT project, ',') FROM toolgate_grants",
    );
    assert_eq!(projects.trim(), p2.to_string_lossy(), "the grant's project");
    // B holds the grant: its next such call is allowed without asking.
    grants_until(&mut agent_b, |grants| grants.len() == 1);
    let on_b = agent_b.ask(call("s3", "c3", "git commit -m two"), "decision");
    assert_eq!(on_b["decision"], "allow", "{on_b}");
    assert_eq!(on_b["source"], "grant", "{on_b}");
    // A does not: its agent in /p1 is still asked, by both approvers.
    let mut agent_a = a.agent("agent-a");
    let on_a = agent_a.ask(json!({"type": "list_grants"}), "grants");
    assert_eq!(on_a["grants"], json!([]), "{on_a}");
    agent_a.send(call("s1", "a1", "git commit -m three"));
    let own = wait(&mut plain, "A's own question", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(own["callID"], "a1", "{own}");
    assert!(own["metadata"].get("project").is_none(), "{own}");
    let also = wait(&mut lead, "A's own question for the lead", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(also["callID"], "a1", "{also}");
    plain.send(answer(&own, "reject"));
    let decision = wait(&mut agent_a, "the decision on A", |f| kind(f, "decision"));
    assert_eq!(decision["decision"], "deny", "{decision}");

    // A question B withdraws closes for the lead too.
    agent_b.send(call("s4", "c4", "touch f4"));
    let asked = wait(&mut lead, "B's third question on A", |f| {
        kind(f, "permission_request")
    });
    assert_eq!(asked["callID"], "c4", "{asked}");
    // An approver without the option that connects now is not given it.
    let mut late = a.approver("late");
    let frames = late.quiet(Duration::from_millis(300));
    assert!(
        requests(&frames).is_empty(),
        "the late approver saw: {frames:?}"
    );
    agent_b.send(json!({"type": "cancel", "sessionID": "s4", "callID": "c4"}));
    let closed = wait(&mut lead, "the withdrawn question closed", |f| {
        kind(f, "permission_resolved") && f["permissionID"] == asked["permissionID"]
    });
    assert!(closed["reason"].is_string(), "{closed}");
    // The plain approver never saw a question of /p2.
    let frames = plain.quiet(Duration::from_millis(300));
    assert!(
        requests(&frames).is_empty(),
        "the plain approver saw: {frames:?}"
    );
}

/// Without a store there is no other project to follow: the `hello` is
/// refused, saying so, and the connection stays what it was.
#[test]
fn fleet_all_projects_needs_a_store() {
    let dir = std::env::temp_dir().join(format!("tgf-{}-nostore", std::process::id()));
    let root = project_dir("inbox_nostore");
    let broker = crate::support::Listening::start(&dir, &root, &["--mode", "ask"]);
    let stream = std::os::unix::net::UnixStream::connect(&broker.socket).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut peer = Peer::from_stream(stream);
    assert_eq!(peer.recv()["type"], "ready");
    peer.send(json!({"type": "hello", "role": "approver", "client": "lead", "projects": "all"}));
    let refused = peer.recv();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "invalid_frame", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("shares no store"), "{message}");
    // Still an agent: a call of its own comes back to it as its question.
    peer.send(call("s", "c", "touch x"));
    let asked = wait(&mut peer, "the question", |f| kind(f, "permission_request"));
    assert_eq!(asked["callID"], "c");
}
