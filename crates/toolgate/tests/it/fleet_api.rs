//! The store's typed API (`toolgate::fleet`) for sessions, grants,
//! questions, brokers and notifications, against a real PostgreSQL
//! (support::pg). The broker does not use it yet; these tests hold what the
//! next slices build on: the first answer wins across connections, grants
//! are written once, a lapsed lease cancels, a revocation is seen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::time::{Duration, SystemTime};

use serde_json::json;
use toolgate::fleet::questions::{BrokerId, NewQuestion, QuestionId, QuestionState, Settled};
use toolgate::fleet::sessions::{Closed, GrantScope, NewGrant, SessionRecord, SessionWrite};
use toolgate::fleet::{runtime, Channel, Store, StoreError, Wake};

use crate::support::pg;

/// A migrated store for one test (a database of its own) and its URL.
#[track_caller]
fn store(name: &str) -> Option<(String, &'static pg::Cluster, String)> {
    let (database, cluster) = pg::database(name)?;
    let url = cluster.url(&database);
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
    });
    Some((url, cluster, database))
}

/// A start that names its mode: the whole record.
const START: SessionWrite = SessionWrite::Start { mode_given: true };

fn grant(id: &str, project: &str) -> NewGrant {
    NewGrant {
        id: id.to_string(),
        project: project.to_string(),
        session_id: "main".to_string(),
        scope: GrantScope::Project,
        permission: "bash".to_string(),
        pattern: "git commit *".to_string(),
        literal: 10,
        plan_only: false,
        expires_at: None,
        made_by: Some("alice".to_string()),
        question: None,
    }
}

fn question(broker: BrokerId, n: usize) -> NewQuestion {
    NewQuestion {
        id: QuestionId::random(),
        broker,
        project: "/work/app".to_string(),
        session_id: "main".to_string(),
        request: json!({"type": "permission_request", "permissionID": format!("per_{n}")}),
        offers: None,
    }
}

const LEASE: Duration = Duration::from_secs(30);

#[test]
fn the_first_answer_wins_across_connections_and_grants_are_written_once() {
    let Some((url, cluster, database)) = store("first_answer") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut asker = Store::connect(&url).await.unwrap();
        let one = Store::connect(&url).await.unwrap();
        let two = Store::connect(&url).await.unwrap();
        let broker = BrokerId::random();
        asker
            .register_broker(broker, "host-a", 42, LEASE)
            .await
            .unwrap();
        const QUESTIONS: usize = 100;
        let mut ids = Vec::new();
        for n in 0..QUESTIONS {
            let asked = asker.ask(&question(broker, n)).await.unwrap();
            assert_eq!(asked.state, QuestionState::Open);
            ids.push(asked.id);
        }
        // Two approvers on two connections answer every question at once,
        // each answer with a grant of its own id.
        let race = |mut store: Store, who: &'static str, ids: Vec<QuestionId>| async move {
            let mut won = Vec::new();
            for (n, id) in ids.into_iter().enumerate() {
                let grants = [grant(&format!("grant_{who}_{n}"), "/work/app")];
                match store
                    .answer(id, &json!({"reply": "always", "by": who}), who, &grants)
                    .await
                    .unwrap()
                {
                    Settled::First(question) => {
                        assert_eq!(question.state, QuestionState::Answered);
                        assert_eq!(question.answered_by.as_deref(), Some(who));
                        won.push(id);
                    }
                    Settled::Already(question) => {
                        assert_eq!(question.state, QuestionState::Answered);
                        assert_ne!(question.answered_by.as_deref(), Some(who));
                    }
                    Settled::Unknown => panic!("{id} unknown"),
                }
            }
            (store, won)
        };
        let mut reversed = ids.clone();
        reversed.reverse();
        let ((mut one, won_one), (_, won_two)) =
            tokio::join!(race(one, "alice", ids.clone()), race(two, "bob", reversed));
        assert_eq!(won_one.len() + won_two.len(), QUESTIONS, "one answer each");
        assert!(won_one.iter().all(|id| !won_two.contains(id)));
        // A late answer changes nothing, and says what stands.
        match one
            .answer(ids[0], &json!({"reply": "reject"}), "carol", &[])
            .await
            .unwrap()
        {
            Settled::Already(question) => {
                assert_ne!(question.answered_by.as_deref(), Some("carol"));
                assert_eq!(question.answer.unwrap()["reply"], "always");
            }
            other => panic!("{other:?}"),
        }
        assert!(one.open_questions().await.unwrap().is_empty());
    });
    // One grant per question, naming it.
    assert_eq!(
        cluster.psql(
            &database,
            "SELECT count(*), count(DISTINCT question_id) FROM toolgate_grants"
        ),
        "100|100\n"
    );
    assert_eq!(
        cluster.psql(
            &database,
            "SELECT count(*) FROM toolgate_questions q JOIN toolgate_grants g \
             ON g.question_id = q.id WHERE g.made_by <> q.answered_by"
        ),
        "0\n"
    );
}

#[test]
fn a_lapsed_lease_cancels_and_takes_no_answer() {
    let Some((url, _, _)) = store("lease") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        let short = BrokerId::random();
        let long = BrokerId::random();
        store
            .register_broker(short, "host-a", 1, Duration::from_millis(600))
            .await
            .unwrap();
        store
            .register_broker(long, "host-b", 2, LEASE)
            .await
            .unwrap();
        let dying = store.ask(&question(short, 1)).await.unwrap();
        let answered_late = store.ask(&question(short, 2)).await.unwrap();
        let living = store.ask(&question(long, 3)).await.unwrap();
        assert_eq!(store.brokers().await.unwrap().len(), 2);
        tokio::time::sleep(Duration::from_millis(800)).await;
        // An answer that finds the lease lapsed cancels the question instead.
        match store
            .answer(answered_late.id, &json!({"reply": "once"}), "alice", &[])
            .await
            .unwrap()
        {
            Settled::Already(question) => {
                assert_eq!(question.state, QuestionState::Cancelled);
                assert_eq!(question.cancelled.as_deref(), Some("lease"));
            }
            other => panic!("{other:?}"),
        }
        // The sweep cancels the rest of the dead broker's questions and forgets it.
        assert_eq!(store.expire_leases().await.unwrap(), vec![dying.id]);
        assert!(store.expire_leases().await.unwrap().is_empty());
        let brokers = store.brokers().await.unwrap();
        assert_eq!(brokers.len(), 1);
        assert_eq!(
            (brokers[0].id, brokers[0].host.as_str(), brokers[0].pid),
            (long, "host-b", 2)
        );
        // The dead broker learns it on its next renewal, and can ask nothing.
        assert!(matches!(
            store.renew_lease(short, LEASE).await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(matches!(
            store.ask(&question(short, 4)).await,
            Err(StoreError::LeaseLost { .. })
        ));
        // The living broker's question is untouched; renewing moves its lease.
        let open = store.open_questions().await.unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].id, living.id);
        let until = store.renew_lease(long, LEASE * 2).await.unwrap();
        assert!(until > living.lease_until);
        assert_eq!(
            store
                .question(living.id)
                .await
                .unwrap()
                .unwrap()
                .lease_until,
            until
        );
        // Retiring cancels what it still asks.
        assert_eq!(
            store.retire_broker(long, "stopped").await.unwrap(),
            vec![living.id]
        );
        let gone = store.question(living.id).await.unwrap().unwrap();
        assert_eq!(
            (gone.state, gone.cancelled.as_deref()),
            (QuestionState::Cancelled, Some("stopped"))
        );
        assert!(store.brokers().await.unwrap().is_empty());
        // Cancelling a settled question changes nothing; an unknown id is said.
        assert!(matches!(
            store.cancel_question(living.id, "timeout").await.unwrap(),
            Settled::Already(_)
        ));
        assert_eq!(
            store
                .cancel_question(QuestionId::random(), "timeout")
                .await
                .unwrap(),
            Settled::Unknown
        );
    });
}

#[test]
fn sessions_close_and_reopen_and_changes_are_read_by_revision() {
    let Some((url, _, _)) = store("sessions") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        let main = SessionRecord {
            project: "/work/app".to_string(),
            session_id: "main".to_string(),
            parent_id: None,
            mode: Some("ask".to_string()),
            permissions: None,
            started: true,
            joined: None,
        };
        let worker = SessionRecord {
            session_id: "worker".to_string(),
            parent_id: Some("main".to_string()),
            mode: Some("readonly".to_string()),
            permissions: Some(json!({"allowedTools": ["Read", "Grep"]})),
            ..main.clone()
        };
        let first = store.put_session(&main, START).await.unwrap();
        let put = store.put_session(&worker, START).await.unwrap();
        assert_eq!(put.record, worker);
        assert!(put.revision > first.revision);
        let closed = store
            .close_session("/work/app", "worker", Closed::Ended)
            .await
            .unwrap();
        assert_eq!(closed.closed, Some(Closed::Ended));
        assert_eq!(closed.record, worker, "closing keeps what was stored");
        let at = closed.closed_at.unwrap();
        let again = store
            .close_session("/work/app", "worker", Closed::Refused)
            .await
            .unwrap();
        assert_eq!(again.closed_at, Some(at), "the first close's time stays");
        // A session never stored can be closed (its calls are refused).
        let never = store
            .close_session("/work/app", "ghost", Closed::Refused)
            .await
            .unwrap();
        assert_eq!(
            (never.record.started, never.record.parent_id),
            (false, None)
        );
        // Since the first put: the worker's four changes show as its last, and the ghost.
        let since: Vec<(String, Option<Closed>)> = store
            .sessions_since(first.revision, &[])
            .await
            .unwrap()
            .into_iter()
            .map(|session| (session.record.session_id, session.closed))
            .collect();
        assert_eq!(
            since,
            [
                ("worker".to_string(), Some(Closed::Refused)),
                ("ghost".to_string(), Some(Closed::Refused))
            ]
        );
        // Started again: open.
        let reopened = store.put_session(&worker, START).await.unwrap();
        assert_eq!((reopened.closed, reopened.closed_at), (None, None));
        let all = store.sessions("/work/app").await.unwrap();
        assert_eq!(
            all.iter()
                .map(|s| s.record.session_id.as_str())
                .collect::<Vec<_>>(),
            ["ghost", "main", "worker"]
        );
        assert!(store.sessions("/work/other").await.unwrap().is_empty());
    });
}

#[test]
fn a_mode_change_writes_only_the_mode_and_never_opens_a_closed_session() {
    let Some((url, _, _)) = store("session_writes") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        let started = SessionRecord {
            project: "/work/app".to_string(),
            session_id: "s".to_string(),
            parent_id: Some("main".to_string()),
            mode: Some("ask".to_string()),
            permissions: Some(json!({"allowedTools": ["Read"]})),
            started: true,
            joined: Some(json!([{"sessionID": "t1", "permissions": {"deniedTools": ["bash"]}}])),
        };
        let first = store.put_session(&started, START).await.unwrap();
        assert_eq!(first.record, started);
        // A mode change from a broker that holds stale parts of the session
        // (no parent, no narrowing, not started, nothing met): only the
        // mode changes.
        let stale = SessionRecord {
            parent_id: None,
            mode: Some("plan".to_string()),
            permissions: None,
            started: false,
            joined: None,
            ..started.clone()
        };
        let planned = store.put_session(&stale, SessionWrite::Mode).await.unwrap();
        assert_eq!(
            planned.record,
            SessionRecord {
                mode: Some("plan".to_string()),
                ..started.clone()
            }
        );
        assert!(planned.revision > first.revision);
        // A start that names no mode keeps the mode of the open session.
        let unnamed = SessionRecord {
            mode: Some("auto".to_string()),
            ..started.clone()
        };
        let kept = store
            .put_session(&unnamed, SessionWrite::Start { mode_given: false })
            .await
            .unwrap();
        assert_eq!(kept.record.mode.as_deref(), Some("plan"));
        // Closed elsewhere: a mode change leaves it closed and unchanged,
        // and says so.
        let closed = store
            .close_session("/work/app", "s", Closed::Ended)
            .await
            .unwrap();
        let refused = store
            .put_session(&unnamed, SessionWrite::Mode)
            .await
            .unwrap();
        assert_eq!(refused.closed, Some(Closed::Ended));
        assert_eq!(refused.revision, closed.revision, "nothing was written");
        assert_eq!(refused.record.mode.as_deref(), Some("plan"));
        // Only a start opens it again; on a closed session a start's own
        // mode is used even when it named none.
        let again = store
            .put_session(&unnamed, SessionWrite::Start { mode_given: false })
            .await
            .unwrap();
        assert_eq!(again.closed, None);
        assert_eq!(again.record, unnamed);
        // A mode change to a session the store does not hold writes it whole.
        let fresh = SessionRecord {
            session_id: "implicit".to_string(),
            parent_id: None,
            mode: Some("readonly".to_string()),
            permissions: None,
            started: false,
            ..started.clone()
        };
        let written = store.put_session(&fresh, SessionWrite::Mode).await.unwrap();
        assert_eq!((written.record, written.closed), (fresh, None));
    });
}

#[test]
fn racing_mode_changes_end_on_the_last_revision() {
    let Some((url, _, _)) = store("session_race") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let record = |mode: &str| SessionRecord {
            project: "/work/app".to_string(),
            session_id: "s".to_string(),
            parent_id: None,
            mode: Some(mode.to_string()),
            permissions: None,
            started: true,
            joined: None,
        };
        let mut store = Store::connect(&url).await.unwrap();
        store.put_session(&record("ask"), START).await.unwrap();
        // Two connections change the mode at once, many times: each write's
        // revision orders it, so the row holds the mode of the highest
        // revision returned.
        let race = |mode: &'static str| {
            let url = url.clone();
            let record = record(mode);
            tokio::spawn(async move {
                let mut store = Store::connect(&url).await.unwrap();
                let mut written = Vec::new();
                for _ in 0..50 {
                    let held = store
                        .put_session(&record, SessionWrite::Mode)
                        .await
                        .unwrap();
                    written.push((held.revision, mode));
                }
                written
            })
        };
        let (plan, auto) = (race("plan"), race("auto"));
        let mut written = plan.await.unwrap();
        written.extend(auto.await.unwrap());
        let revisions: std::collections::HashSet<i64> =
            written.iter().map(|(revision, _)| *revision).collect();
        assert_eq!(revisions.len(), 100, "each write has its own revision");
        let last = written.iter().max().unwrap();
        let row = store.sessions("/work/app").await.unwrap().remove(0);
        assert_eq!(
            (row.revision, row.record.mode.as_deref()),
            (last.0, Some(last.1))
        );
    });
}

#[test]
fn grants_are_written_once_revoked_once_and_end() {
    let Some((url, _, _)) = store("grants") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        let made = store
            .add_grant(&grant("grant_1", "/work/app"))
            .await
            .unwrap();
        // The same id again (a retried write) keeps the first.
        let mut retry = grant("grant_1", "/work/app");
        retry.pattern = "rm -rf *".to_string();
        let kept = store.add_grant(&retry).await.unwrap();
        assert_eq!(kept, made);
        assert_eq!(kept.grant.pattern, "git commit *");
        let mut ended = grant("grant_2", "/work/app");
        ended.expires_at = Some(SystemTime::now() - Duration::from_secs(5));
        store.add_grant(&ended).await.unwrap();
        let mut session = grant("grant_3", "/work/app");
        session.scope = GrantScope::Session;
        session.plan_only = true;
        session.expires_at = Some(SystemTime::now() + Duration::from_secs(3_600));
        let session = store.add_grant(&session).await.unwrap();
        assert_eq!(session.grant.scope, GrantScope::Session);
        assert!(session.grant.plan_only);
        store
            .add_grant(&grant("grant_4", "/work/other"))
            .await
            .unwrap();
        let live: Vec<String> = store
            .live_grants("/work/app")
            .await
            .unwrap()
            .into_iter()
            .map(|grant| grant.grant.id)
            .collect();
        assert_eq!(
            live,
            ["grant_1", "grant_3"],
            "an ended grant is not in force"
        );

        let mark = store
            .grants_since(0, &[])
            .await
            .unwrap()
            .last()
            .unwrap()
            .revision;
        let revoked = store
            .revoke_grant("grant_1", "admin")
            .await
            .unwrap()
            .unwrap();
        assert!(revoked.revoked_at.is_some());
        assert_eq!(revoked.revoked_by.as_deref(), Some("admin"));
        let again = store
            .revoke_grant("grant_1", "someone else")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            again.revoked_by.as_deref(),
            Some("admin"),
            "the first revocation stays"
        );
        assert_eq!(again.revoked_at, revoked.revoked_at);
        assert_eq!(store.revoke_grant("grant_9", "admin").await.unwrap(), None);
        // A broker that saw `mark` reads the revocation, once.
        let news = store.grants_since(mark, &[]).await.unwrap();
        assert_eq!(news.len(), 1);
        assert_eq!(news[0].grant.id, "grant_1");
        assert!(news[0].revoked_at.is_some());
        let live: Vec<String> = store
            .live_grants("/work/app")
            .await
            .unwrap()
            .into_iter()
            .map(|grant| grant.grant.id)
            .collect();
        assert_eq!(live, ["grant_3"]);
    });
}

#[test]
fn notifications_wake_and_a_lost_connection_says_so() {
    let Some((url, cluster, database)) = store("notify") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let listener = Store::connect(&url).await.unwrap();
        listener.listen(&Channel::ALL).await.unwrap();
        let wakeups = listener.wakeups();
        let mut writer = Store::connect(&url).await.unwrap();
        let wait = |what: &'static str| {
            let wakeups = wakeups.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(10), wakeups.wait())
                    .await
                    .unwrap_or_else(|_| panic!("no wake-up for {what}"))
            }
        };
        writer
            .add_grant(&grant("grant_1", "/work/app"))
            .await
            .unwrap();
        let Wake::Changed(raised) = wait("a grant").await else {
            panic!("closed")
        };
        assert!(raised.has(Channel::Grants));
        assert!(!raised.has(Channel::Questions));
        // A burst is one wake-up (or a few), never a queue to drain.
        for n in 0..50 {
            writer
                .add_grant(&grant(&format!("grant_b{n}"), "/work/app"))
                .await
                .unwrap();
        }
        writer.revoke_grant("grant_1", "admin").await.unwrap();
        let Wake::Changed(raised) = wait("a burst").await else {
            panic!("closed")
        };
        assert!(raised.has(Channel::Grants));
        // Questions, sessions, tokens: each its channel.
        let broker = BrokerId::random();
        writer.register_broker(broker, "h", 1, LEASE).await.unwrap();
        writer.ask(&question(broker, 1)).await.unwrap();
        let mut seen = toolgate::fleet::Raised::default();
        while !seen.has(Channel::Questions) {
            if let Wake::Changed(raised) = wait("a question").await {
                seen = raised;
            }
        }
        // The listener's connection is cut: the waiter is told, and stays told.
        cluster.psql(
            &database,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query LIKE 'LISTEN%'",
        );
        loop {
            match wait("the end of the connection").await {
                Wake::Closed => break,
                Wake::Changed(_) => continue,
            }
        }
        assert_eq!(wait("again").await, Wake::Closed);
        assert!(listener.is_closed());
    });
}

#[test]
fn a_connection_plans_without_parallel_workers_or_jit() {
    // A broker's statements read a few rows by an index: a parallel plan's
    // workers (or JIT) cost more to start than the statement, so a
    // connection turns them off, whatever the database's defaults say.
    let Some((url, cluster, database)) = store("plans") else {
        return;
    };
    cluster.psql(
        &database,
        &format!(
            "ALTER DATABASE \"{database}\" SET max_parallel_workers_per_gather = 4; \
             ALTER DATABASE \"{database}\" SET jit = on"
        ),
    );
    assert_eq!(
        cluster
            .psql(&database, "SHOW max_parallel_workers_per_gather")
            .trim(),
        "4",
        "the database's default took"
    );
    runtime().unwrap().block_on(async {
        let store = Store::connect(&url).await.unwrap();
        assert_eq!(
            store
                .setting("max_parallel_workers_per_gather")
                .await
                .unwrap(),
            "0"
        );
        assert_eq!(store.setting("jit").await.unwrap(), "off");
    });
}

#[test]
fn a_store_that_stops_is_a_lost_connection_and_keeps_what_was_committed() {
    // A cluster of its own: stopping the process's one would stop every test's.
    if pg::cluster().is_none() {
        return;
    }
    let cluster = pg::Cluster::start().unwrap();
    cluster.psql("postgres", "CREATE DATABASE restart");
    let url = cluster.url("restart");
    let runtime = runtime().unwrap();
    let mut store = runtime.block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store.listen(&Channel::ALL).await.unwrap();
        store
            .add_grant(&grant("grant_1", "/work/app"))
            .await
            .unwrap();
        store
    });
    // As a crash would: no shutdown checkpoint.
    cluster.stop();
    runtime.block_on(async {
        // Its own grant's notification may come first; then the end.
        let wakeups = store.wakeups();
        let closed = async { while wakeups.wait().await != Wake::Closed {} };
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .unwrap();
        let err = store.live_grants("/work/app").await.unwrap_err();
        assert!(err.is_unreachable(), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("lost the connection to the store: "),
            "{err}"
        );
        let err = Store::connect(&url).await.unwrap_err();
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    });
    cluster.start_again().unwrap();
    runtime.block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        store.check_schema().await.unwrap();
        let live = store.live_grants("/work/app").await.unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].grant.id, "grant_1");
    });
    drop(store);
    drop(cluster);
}

#[test]
fn an_answer_writes_the_grants_its_question_offers() {
    let Some((url, _cluster, _database)) = store("offers") else {
        return;
    };
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        let broker = BrokerId::random();
        store
            .register_broker(broker, "host-a", 42, LEASE)
            .await
            .unwrap();
        let grant = |pattern: &str, literal: usize| {
            json!({"permission": "bash", "pattern": pattern, "literal": literal, "planOnly": false})
        };
        let mut asked = question(broker, 1);
        asked.offers = Some(json!({
            "grants": [grant("git commit *", 10)],
            "options": [
                {"patterns": ["git commit -m x"], "grants": [grant("git commit -m x", 15)]},
                {"patterns": ["git commit *"], "grants": [grant("git commit *", 10)]}
            ],
            "none": null
        }));
        let asked = store.ask(&asked).await.unwrap();
        // Asking again (a retry) changes nothing.
        assert_eq!(store.ask(&question_again(&asked)).await.unwrap().id, asked.id);
        let answer = json!({"type": "permission_response", "permissionID": "per_1",
                            "response": "always", "patterns": ["git commit -m x"],
                            "scope": "project"});
        let grants = toolgate::fleet::link::answer_grants(&asked, &answer, "alice").unwrap();
        assert_eq!(grants.len(), 1);
        assert_eq!(grants[0].pattern, "git commit -m x");
        assert_eq!(grants[0].literal, 15);
        assert_eq!(grants[0].scope, GrantScope::Project);
        assert_eq!(grants[0].question, Some(asked.id));
        let settled = store.answer(asked.id, &answer, "alice", &grants).await.unwrap();
        assert!(matches!(settled, Settled::First(_)), "{settled:?}");
        let live = store.live_grants("/work/app").await.unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].grant.made_by.as_deref(), Some("alice"));
        // Patterns that are none of the options grant nothing.
        let wrong = json!({"type": "permission_response", "permissionID": "per_1",
                           "response": "always", "patterns": ["rm *"]});
        assert!(toolgate::fleet::link::answer_grants(&asked, &wrong, "bob").is_err());
        // `once` grants nothing.
        let once = json!({"type": "permission_response", "permissionID": "per_1", "response": "once"});
        assert!(toolgate::fleet::link::answer_grants(&asked, &once, "bob").unwrap().is_empty());
    });
}

/// `asked` as a broker would ask it again after a lost connection.
fn question_again(asked: &toolgate::fleet::questions::Question) -> NewQuestion {
    NewQuestion {
        id: asked.id,
        broker: asked.broker,
        project: asked.project.clone(),
        session_id: asked.session_id.clone(),
        request: asked.request.clone(),
        offers: asked.offers.clone(),
    }
}
