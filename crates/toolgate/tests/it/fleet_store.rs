//! `toolgate store migrate` through the real binary against a real
//! PostgreSQL (support::pg): an empty database, twice, four at once, a store
//! newer than the binary, and stores that cannot be used.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::{self, pg};

/// `toolgate ARGS` with `env`, nothing on stdin.
fn toolgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    support::toolgate_process(Path::new("/"), args, env, b"")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What `toolgate_schema` holds once migrated.
const SCHEMA_ROWS: &str =
    "1|tokens, brokers, sessions, questions, grants\n2|what an answer to a question grants\n\
     3|a change's transaction id before its revision\n4|what a joined session met\n";

/// What `toolgate_schema` holds: `version|name` lines.
fn schema_rows(cluster: &pg::Cluster, database: &str) -> String {
    cluster.psql(
        database,
        "SELECT version, name FROM toolgate_schema ORDER BY version",
    )
}

#[test]
fn migrate_an_empty_database_then_again() {
    let Some((database, cluster)) = pg::database("empty") else {
        return;
    };
    let url = cluster.url(&database);
    let out = toolgate(&["store", "migrate", "--store", &url], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{url} migrated from schema version 0 to 4\n")
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(schema_rows(cluster, &database), SCHEMA_ROWS);
    let tables = cluster.psql(
        &database,
        "SELECT string_agg(tablename, ' ' ORDER BY tablename) FROM pg_tables \
         WHERE tablename LIKE 'toolgate%'",
    );
    assert_eq!(
        tables,
        "toolgate_brokers toolgate_grants toolgate_questions toolgate_schema \
         toolgate_sessions toolgate_tokens\n"
    );
    // Version 4: what a joined session met, none by default.
    assert_eq!(
        cluster.psql(
            &database,
            "SELECT data_type, is_nullable FROM information_schema.columns \
             WHERE table_name = 'toolgate_sessions' AND column_name = 'joined'",
        ),
        "jsonb|YES\n"
    );
    // Again, through the environment this time: nothing to do, nothing changed.
    let out = toolgate(&["store", "migrate"], &[("TOOLGATE_STORE", &url)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{url} is at schema version 4 already\n")
    );
    assert_eq!(schema_rows(cluster, &database), SCHEMA_ROWS);
}

#[test]
fn four_migrations_at_once_apply_each_step_once() {
    let Some((database, cluster)) = pg::database("concurrent") else {
        return;
    };
    let url = cluster.url(&database);
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["store", "migrate", "--store", &url])
                .env_remove("TOOLGATE_STORE")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    // Each process says which steps it applied (one from where it found
    // the store): together, every step once.
    let mut applied = 0;
    for out in &outputs {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let prefix = format!("{url} migrated from schema version ");
        match stdout.strip_prefix(&prefix) {
            Some(rest) => {
                let versions: Vec<u32> = rest
                    .trim_end()
                    .split(" to ")
                    .map(|v| v.parse().unwrap())
                    .collect();
                assert!(versions[0] < versions[1], "{stdout}");
                applied += versions[1] - versions[0];
            }
            None => assert_eq!(stdout, format!("{url} is at schema version 4 already\n")),
        }
    }
    assert_eq!(applied, 4, "each step applied by exactly one process");
    assert_eq!(schema_rows(cluster, &database), SCHEMA_ROWS);
}

#[test]
fn a_store_newer_than_the_binary_is_refused_and_left_alone() {
    let Some((database, cluster)) = pg::database("newer") else {
        return;
    };
    let url = cluster.url(&database);
    assert_eq!(
        toolgate(&["store", "migrate", "--store", &url], &[])
            .status
            .code(),
        Some(0)
    );
    cluster.psql(
        &database,
        "INSERT INTO toolgate_schema (version, name) VALUES (5, 'from a newer toolgate')",
    );
    let refusal = "toolgate: the store's schema is at version 5, newer than this toolgate \
                   knows (version 4): upgrade toolgate; it will not use or change that store\n";
    for args in [
        &["store", "migrate", "--store", &url][..],
        &["tokens", "list", "--store", &url],
        &[
            "tokens", "create", "--store", &url, "--role", "agent", "--name", "x",
        ],
    ] {
        let out = toolgate(args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stderr), refusal, "{args:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
    assert_eq!(
        schema_rows(cluster, &database),
        format!("{SCHEMA_ROWS}5|from a newer toolgate\n")
    );
    assert_eq!(
        cluster.psql(&database, "SELECT count(*) FROM toolgate_tokens"),
        "0\n"
    );
}

#[test]
fn tokens_need_a_migrated_store() {
    let Some((database, cluster)) = pg::database("unmigrated") else {
        return;
    };
    let url = cluster.url(&database);
    let out = toolgate(&["tokens", "list", "--store", &url], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "toolgate: the store's schema is at version 0 and this toolgate needs version 4: \
         run `toolgate store migrate` first\n"
    );
    // Nothing was created by asking.
    assert_eq!(
        cluster.psql(
            &database,
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'toolgate%'"
        ),
        "0\n"
    );
}

#[test]
fn a_database_that_does_not_exist_is_a_refused_login() {
    let Some(cluster) = pg::cluster() else {
        return;
    };
    let url = cluster.url("no_such_database");
    let out = toolgate(&["store", "migrate", "--store", &url], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "toolgate: the store at {url} refused the connection: \
             database \"no_such_database\" does not exist\n"
        )
    );
}

/// No server needed: what cannot be reached, parsed or found.
#[test]
fn stores_that_cannot_be_used() {
    // A port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!("postgres://postgres@127.0.0.1:{port}/toolgate");
    // (arguments, environment, exit code, stderr)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);
    let cases: &[Case] = &[
        (
            &["store", "migrate", "--store", &unreachable],
            &[],
            3,
            "toolgate: cannot reach the store at {URL}: error connecting to server: \
             Connection refused (os error 111)\n",
        ),
        (
            &["tokens", "list"],
            &[("TOOLGATE_STORE", &unreachable)],
            3,
            "toolgate: cannot reach the store at {URL}: error connecting to server: \
             Connection refused (os error 111)\n",
        ),
        (
            &["store", "migrate"],
            &[],
            2,
            "toolgate: store migrate needs --store URL (or TOOLGATE_STORE)\n",
        ),
        (
            &["tokens", "revoke", "ci"],
            &[("TOOLGATE_STORE", "")],
            2,
            "toolgate: tokens revoke needs --store URL (or TOOLGATE_STORE)\n",
        ),
        (
            &["store", "migrate", "--store", "postgres://[::1/db"],
            &[],
            2,
            "toolgate: the store URL cannot be used (invalid connection string); \
             expected postgres://USER@HOST:PORT/DATABASE\n",
        ),
    ];
    for (args, env, code, stderr) in cases {
        let out = toolgate(args, env);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stderr),
            stderr.replace("{URL}", &unreachable),
            "{args:?}"
        );
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
}

/// TLS to the store (`sslmode`, `sslrootcert` in the URL), against a
/// cluster of the test's own with `ssl = on` and a certificate for
/// `localhost` made by the test: `verify-full` with the CA works (a
/// broker's connections use TLS), `verify-ca` accepts a name the
/// certificate is not for and `verify-full` does not, a wrong CA is exit 3
/// naming why, `require` against a server without TLS is exit 3 (never
/// plaintext), and an unknown `sslmode` is exit 2.
#[test]
fn tls_to_the_store() {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    // The shared cluster (without TLS) first: it also says whether to skip.
    let Some((plain_db, plain)) = pg::database("no_tls") else {
        return;
    };
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("store test CA");
    let (other_pem, _) = ca("another CA");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "store");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let cluster = pg::Cluster::start_with_tls(&cert.pem(), &key.serialize_pem()).unwrap();
    cluster.psql("postgres", "CREATE DATABASE tls");
    let dir = support::project_dir("store-tls");
    // A socket's directory must be the broker's user's alone.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let ca_file = dir.join("ca.pem");
    let other_file = dir.join("other-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    std::fs::write(&other_file, &other_pem).unwrap();
    // `cluster.url` names 127.0.0.1; the certificate is for localhost.
    let by_address = cluster.url("tls");
    let by_name = by_address.replace("127.0.0.1", "localhost");
    let with = |url: &str, mode: &str, ca: &Path| {
        format!("{url}?sslmode={mode}&sslrootcert={}", ca.display())
    };
    let migrate = |url: &str| toolgate(&["store", "migrate", "--store", url], &[]);

    let full = with(&by_name, "verify-full", &ca_file);
    let out = migrate(&full);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The name is not the certificate's: verify-ca takes it, verify-full not.
    let out = migrate(&with(&by_address, "verify-ca", &ca_file));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = migrate(&with(&by_address, "verify-full", &ca_file));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("over TLS as `sslmode=verify-full` requires"),
        "{said}"
    );
    assert!(said.contains("not valid for name"), "{said}");
    // A wrong CA: exit 3, naming it.
    let out = migrate(&with(&by_name, "verify-full", &other_file));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("over TLS as `sslmode=verify-full` requires"),
        "{said}"
    );
    assert!(said.contains(&other_file.display().to_string()), "{said}");
    assert!(said.contains("UnknownIssuer"), "{said}");
    // A server without TLS: `require` never falls back to plaintext.
    let out = migrate(&format!("{}?sslmode=require", plain.url(&plain_db)));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(said.contains("server does not support TLS"), "{said}");
    // An unknown mode, a CA file that is not there: the URL cannot be used.
    let out = migrate(&format!("{by_name}?sslmode=allow"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = migrate(&with(&by_name, "verify-full", &dir.join("missing.pem")));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // A broker on the store over verify-full: its connections are TLS.
    let root = dir.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let socket = dir.join("b.sock");
    let serve = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--mode", "ask", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--project-root")
            .arg(&root)
            .args(["--store", url])
            .env_remove("TOOLGATE_STORE")
            .env_remove("TOOLGATE_STATE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut broker = serve(&full);
    let started = std::time::Instant::now();
    loop {
        let tls = cluster.psql(
            "postgres",
            "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM pg_stat_ssl s \
             JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'toolgate'",
        );
        // Serving (its link joined), each of its connections over TLS.
        let (over_tls, all) = tls.trim().split_once('/').unwrap();
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() && all != "0" && over_tls == all
        {
            break;
        }
        if let Ok(Some(status)) = broker.try_wait() {
            let mut said = String::new();
            std::io::Read::read_to_string(broker.stderr.as_mut().unwrap(), &mut said).unwrap();
            panic!("the broker exited ({status}): {said}");
        }
        assert!(
            started.elapsed() < support::PATIENCE,
            "the broker's connections: {tls}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = broker.kill();
    let _ = broker.wait();
    // With a wrong CA it does not start: exit 3, saying why.
    let out = serve(&with(&by_name, "verify-full", &other_file))
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("over TLS as `sslmode=verify-full` requires"),
        "{said}"
    );
    assert!(said.contains("UnknownIssuer"), "{said}");
}
