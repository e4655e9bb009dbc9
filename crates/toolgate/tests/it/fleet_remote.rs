//! Remote connections (`serve --listen tls:…` with bearer tokens) through
//! the real binary, against a real PostgreSQL (support::pg) holding the
//! tokens, with certificates made at test time (rcgen): a valid token's
//! calls decided; an approver on TLS answering an agent on the Unix
//! socket; every kind of refused token, plaintext, a wrong CA, mutual TLS,
//! a token revoked mid-connection; `toolgate hook --remote` and `toolgate
//! approve --remote` end to end. "Nothing decided" is checked in the
//! broker's audit log, where every decision is written.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{json, Value};

use crate::support::{self, pg, PATIENCE};

/// PEM files made for one test: a CA and the broker's certificate for
/// `localhost` and 127.0.0.1; another CA that issued nothing the broker
/// has; a CA for clients and a client certificate it issued; a client
/// certificate of a stranger CA.
struct Certs {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    other_ca: PathBuf,
    client_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert, Issuer::new(params, key))
}

fn leaf(
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'static, KeyPair>,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "toolgate test");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_path_buf()
}

impl Certs {
    fn make(dir: &Path) -> Certs {
        let (ca_cert, issuer) = ca("toolgate test CA");
        let (cert, key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        let (other_ca, _) = ca("another CA");
        let (client_ca, client_issuer) = ca("toolgate client CA");
        let (client_cert, client_key) = leaf(
            &["agent"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &client_issuer,
        );
        let (_, stranger_issuer) = ca("a stranger's CA");
        let (stranger_cert, stranger_key) = leaf(
            &["stranger"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &stranger_issuer,
        );
        Certs {
            ca: write(&dir.join("ca.pem"), &ca_cert.pem()),
            cert: write(&dir.join("cert.pem"), &cert),
            key: write(&dir.join("key.pem"), &key),
            other_ca: write(&dir.join("other-ca.pem"), &other_ca.pem()),
            client_ca: write(&dir.join("client-ca.pem"), &client_ca.pem()),
            client_cert: write(&dir.join("client.pem"), &client_cert),
            client_key: write(&dir.join("client-key.pem"), &client_key),
            stranger_cert: write(&dir.join("stranger.pem"), &stranger_cert),
            stranger_key: write(&dir.join("stranger-key.pem"), &stranger_key),
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A migrated store for one test.
#[track_caller]
fn store(name: &str) -> Option<String> {
    let (database, cluster) = pg::database(name)?;
    let url = cluster.url(&database);
    let out = support::toolgate_process(
        Path::new("/"),
        &["store", "migrate", "--store", &url],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Some(url)
}

/// `toolgate tokens create --role ROLE --name NAME ARGS`: the token.
fn token(url: &str, role: &str, name: &str, args: &[&str]) -> String {
    let mut argv = vec![
        "tokens", "create", "--store", url, "--role", role, "--name", name,
    ];
    argv.extend_from_slice(args);
    let out = support::toolgate_process(Path::new("/"), &argv, &[], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).lines().last().unwrap().to_string()
}

/// `toolgate tokens revoke NAME`.
fn revoke(url: &str, name: &str) {
    let out = support::toolgate_process(
        Path::new("/"),
        &["tokens", "revoke", name, "--store", url],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A broker listening on TLS (a port of the system's choosing) and on a
/// Unix socket, in ask mode, with an audit log; killed on drop.
struct Broker {
    child: Child,
    port: u16,
    stderr: Arc<Mutex<String>>,
    dir: PathBuf,
    root: PathBuf,
    socket: PathBuf,
    audit: PathBuf,
    certs: Certs,
}

impl Broker {
    /// With `mtls`, clients must present a certificate of the client CA.
    #[track_caller]
    fn start(name: &str, url: &str, mtls: bool) -> Broker {
        Broker::start_in(name, url, mtls, None)
    }

    /// [`Broker::start`] for the project `root` (another broker's, to
    /// share its questions through the store), else a project of its own.
    #[track_caller]
    fn start_in(name: &str, url: &str, mtls: bool, root: Option<&Path>) -> Broker {
        let dir = support::project_dir(name);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = root.map_or_else(|| dir.join("project"), Path::to_path_buf);
        std::fs::create_dir_all(root.join("src")).unwrap();
        let certs = Certs::make(&dir);
        let socket = dir.join("run/broker.sock");
        let audit = dir.join("audit.jsonl");
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--listen", "tls:127.0.0.1:0", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--tls-cert")
            .arg(&certs.cert)
            .arg("--tls-key")
            .arg(&certs.key)
            .args(["--store", url, "--mode", "ask", "--project-root"])
            .arg(&root)
            .arg("--audit")
            .arg(&audit)
            .args(match mtls {
                true => vec![
                    std::ffi::OsString::from("--tls-client-ca"),
                    certs.client_ca.clone().into(),
                ],
                false => Vec::new(),
            })
            .current_dir(&root)
            .env_remove("TOOLGATE_MODE")
            .env_remove("TOOLGATE_PERMISSION")
            .env_remove("TOOLGATE_STATE_DIR")
            .env_remove("TOOLGATE_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let started = Instant::now();
        let port = loop {
            let said = stderr.lock().unwrap().clone();
            let port = said
                .lines()
                .find_map(|line| line.strip_prefix("toolgate: listening on tls:127.0.0.1:"))
                .map(|port| port.trim().parse::<u16>().unwrap());
            if let (Some(port), true) = (
                port,
                std::os::unix::net::UnixStream::connect(&socket).is_ok(),
            ) {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the broker exited ({status}): {said}");
            }
            assert!(started.elapsed() < PATIENCE, "no broker: {said}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Broker {
            child,
            port,
            stderr,
            dir,
            root,
            socket,
            audit,
            certs,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The audit log's records.
    fn audited(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Whether the audit log names call `call`.
    fn decided(&self, call: &str) -> bool {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .contains(&format!("\"{call}\""))
    }

    /// A token file (0600) holding `token`.
    fn token_file(&self, name: &str, token: &str) -> PathBuf {
        write(
            &self.dir.join(format!("{name}.token")),
            &format!("{token}\n"),
        )
    }

    /// A TLS connection trusting the test CA.
    fn tls(&self) -> Tls {
        Tls::connect(self.port, &self.certs.ca, None).unwrap()
    }

    /// A TLS connection that said `hello` with `token` as `role` and was
    /// answered `ready`.
    fn admitted(&self, token: &str, role: &str) -> Tls {
        let mut tls = self.tls();
        // The greeting, once the token is accepted; then the answer.
        let greeting = tls.hello(token, role);
        assert_eq!(greeting["type"], "ready", "{greeting}");
        assert_eq!(greeting.get("role"), None, "{greeting}");
        let ready = tls.recv().unwrap();
        assert_eq!(ready["type"], "ready", "{ready}");
        assert_eq!(ready["role"], role, "{ready}");
        tls
    }

    /// An agent on the Unix socket.
    fn unix_agent(&self) -> support::Peer {
        support::Peer::connect(
            &self.socket,
            json!({"type":"hello","role":"agent","client":"local"}),
        )
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TLS client speaking JSON lines, as a test drives it.
struct Tls {
    reader: BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>,
}

impl Tls {
    /// Connect to 127.0.0.1:`port` as `localhost`, trusting `ca`, with a
    /// client certificate if `identity` names one; the handshake done.
    fn connect(port: u16, ca: &Path, identity: Option<(&Path, &Path)>) -> std::io::Result<Tls> {
        Tls::connect_as("localhost", port, ca, identity)
    }

    /// [`Tls::connect`], expecting the certificate to be for `name`.
    fn connect_as(
        name: &str,
        port: u16,
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> std::io::Result<Tls> {
        let config = toolgate::transport::tls::client_config(Some(ca), identity).unwrap();
        let mut tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(PATIENCE))?;
        let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(config, name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        Ok(Tls {
            reader: BufReader::new(rustls::StreamOwned::new(conn, tcp)),
        })
    }

    /// Send one frame (a broker that already closed the connection makes
    /// this fail, which the next read shows).
    fn send(&mut self, frame: &Value) {
        let stream = self.reader.get_mut();
        let _ = stream
            .write_all(format!("{frame}\n").as_bytes())
            .and_then(|()| stream.flush());
    }

    /// The next frame; `None` once the broker closed the connection.
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    /// Frames until one of `kind`: that frame.
    fn until(&mut self, kind: &str) -> Value {
        loop {
            let frame = self
                .recv()
                .unwrap_or_else(|| panic!("closed before a {kind}"));
            if frame["type"] == kind {
                return frame;
            }
        }
    }

    /// What arrives within `wait`, up to the end of the connection.
    fn quiet(&mut self, wait: Duration) -> Vec<Value> {
        self.reader
            .get_ref()
            .sock
            .set_read_timeout(Some(wait))
            .unwrap();
        let mut frames = Vec::new();
        while let Some(frame) = self.recv() {
            frames.push(frame);
        }
        self.reader
            .get_ref()
            .sock
            .set_read_timeout(Some(PATIENCE))
            .unwrap();
        frames
    }

    /// `hello` with `token` as `role`: the broker's first frame (its
    /// greeting, or the refusal).
    fn hello(&mut self, token: &str, role: &str) -> Value {
        self.send(&json!({"type":"hello","role":role,"client":"test","token":token}));
        self.recv().expect("an answer to hello")
    }
}

fn call(id: &str, tool: &str, input: Value) -> Value {
    json!({"type":"tool_call","sessionID":"s","callID":id,"tool":tool,"input":input})
}

/// A valid agent token's calls are decided; an approver token on TLS
/// answers a question raised by an agent on the Unix socket; an agent token
/// cannot answer, list others' questions, claim the approver role or shut
/// the broker down, and never hears the approvers' questions.
#[test]
fn tokens_give_roles_and_the_unix_socket_is_unchanged() {
    let Some(url) = store("roles") else {
        return;
    };
    let broker = Broker::start("roles", &url, false);
    let agent_token = token(&url, "agent", "ci", &[]);
    let approver_token = token(&url, "approver", "alice", &[]);
    let mut agent = broker.admitted(&agent_token, "agent");
    // A read is decided by the mode, as on any transport.
    agent.send(&call("t1", "Read", json!({"file_path":"src/a.rs"})));
    let decision = agent.until("decision");
    assert_eq!(decision["callID"], "t1");
    assert_eq!(decision["decision"], "allow", "{decision}");
    let mut approver = broker.admitted(&approver_token, "approver");
    // An agent on the socket, as before: no token, its user is trusted.
    let mut local = broker.unix_agent();
    local.send(call("u1", "Bash", json!({"command":"touch built"})));
    let question = approver.until("permission_request");
    assert_eq!(question["callID"], "u1");
    let permission = question["permissionID"].as_str().unwrap().to_string();
    // The agent token may not answer it, and was never asked.
    agent.send(&json!({"type":"permission_response","permissionID":permission,"response":"once"}));
    let refused = agent.until("error");
    assert_eq!(refused["code"], "forbidden");
    assert_eq!(
        refused["message"],
        "the token `ci` is an agent's: an agent never answers a question"
    );
    assert_eq!(refused["permissionID"], permission.as_str());
    assert!(!broker.decided("u1"), "{:?}", broker.audited());
    for (frame, why) in [
        (
            json!({"type":"list_pending"}),
            "the token `ci` is an agent's: an agent cannot list the sessions, questions or grants of others",
        ),
        (
            json!({"type":"hello","role":"approver"}),
            "the token `ci` is an agent's: it cannot connect as approver",
        ),
        (
            json!({"type":"shutdown"}),
            "the token `ci` is an agent's: only an admin token may shut the broker down",
        ),
    ] {
        agent.send(&frame);
        let error = agent.until("error");
        assert_eq!(error["message"], why, "{frame}");
    }
    // The approver answers: the socket's agent is allowed.
    approver
        .send(&json!({"type":"permission_response","permissionID":permission,"response":"once"}));
    let decision = local.until("decision").pop().unwrap();
    assert_eq!(decision["callID"], "u1");
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["source"], "user");
    // The agent token's own call that asks goes to the approver too.
    agent.send(&call("t2", "Bash", json!({"command":"rm -rf build"})));
    let question = approver.until("permission_request");
    assert_eq!(question["callID"], "t2");
    approver.send(&json!({"type":"permission_response","permissionID":question["permissionID"],"response":"reject","message":"not here"}));
    let decision = agent.until("decision");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["message"], "not here");
    // The agent connection heard no question meant for approvers.
    let heard = agent.quiet(Duration::from_millis(300));
    assert!(
        heard
            .iter()
            .all(|frame| frame["type"] != "permission_request"),
        "{heard:?}"
    );
    // The broker still runs; the audit log has exactly the three calls.
    let calls: Vec<String> = broker
        .audited()
        .iter()
        .filter_map(|record| record["callID"].as_str().map(str::to_string))
        .collect();
    for id in ["t1", "u1", "t2"] {
        assert!(calls.iter().any(|c| c == id), "{calls:?}");
    }
}

/// Every way a token can be refused: one `error` frame naming why (never
/// the token), the connection closed, and nothing decided: a call sent
/// right behind the `hello` appears nowhere.
#[test]
fn refused_tokens_decide_nothing() {
    let Some(url) = store("refused") else {
        return;
    };
    let broker = Broker::start("refused", &url, false);
    let expired = token(&url, "agent", "old", &["--expires", "1"]);
    let revoked = token(&url, "agent", "gone", &[]);
    revoke(&url, "gone");
    let elsewhere = token(&url, "agent", "other-project", &["--project", "/elsewhere"]);
    let mine = token(
        &url,
        "agent",
        "this-project",
        &["--project", &format!("{}/", broker.root.display())],
    );
    let agent = token(&url, "agent", "agent", &[]);
    let observer = token(&url, "observer", "watcher", &[]);
    let unknown = format!("tg_{}", "A".repeat(43));
    std::thread::sleep(Duration::from_millis(1100));
    let hello = |token: Option<&str>, role: &str| {
        let mut hello = json!({"type":"hello","role":role,"client":"test"});
        if let Some(token) = token {
            hello["token"] = json!(token);
        }
        hello
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "none",
            hello(None, "agent"),
            "no token: the first frame on a remote connection must be a hello with a token",
        ),
        (
            "malformed",
            hello(Some("hunter2"), "agent"),
            "token refused: not a toolgate token (expected `tg_` and 43 base64url characters)",
        ),
        ("wrong", hello(Some(&unknown), "agent"), "token refused: unknown token"),
        (
            "expired",
            hello(Some(&expired), "agent"),
            "token refused: the token `old` has expired",
        ),
        (
            "revoked",
            hello(Some(&revoked), "agent"),
            "token refused: the token `gone` was revoked",
        ),
        (
            "project",
            hello(Some(&elsewhere), "agent"),
            "token refused: the token `other-project` is for the project /elsewhere, not for this broker's",
        ),
        (
            "role",
            hello(Some(&agent), "approver"),
            "the token `agent` is an agent's: it cannot connect as approver",
        ),
        (
            "observer",
            hello(Some(&observer), "agent"),
            "the token `watcher` is an observer's: it cannot connect as agent",
        ),
        (
            "not-hello",
            call("first", "Read", json!({"file_path":"a"})),
            "the first frame on a remote connection must be a hello with a token, not another frame",
        ),
    ];
    for (name, first, why) in &cases {
        let mut tls = broker.tls();
        tls.send(first);
        // A call right behind it, which must never be decided.
        tls.send(&call(
            &format!("c-{name}"),
            "Read",
            json!({"file_path":"a"}),
        ));
        let frames = tls.quiet(PATIENCE);
        assert_eq!(frames.len(), 1, "{name}: {frames:?}");
        let error = &frames[0];
        assert_eq!(error["type"], "error", "{name}: {error}");
        assert_eq!(error["code"], "forbidden", "{name}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with(why), "{name}: {message}");
        for secret in [&expired, &revoked, &elsewhere, &agent, &observer] {
            assert!(!message.contains(secret.as_str()), "{name}: {message}");
        }
    }
    // A token of this project (a trailing slash is the same path) works.
    let mut tls = broker.admitted(&mine, "agent");
    tls.send(&call("ok", "Read", json!({"file_path":"src/a.rs"})));
    assert_eq!(tls.until("decision")["decision"], "allow");
    for (name, _, _) in &cases {
        assert!(!broker.decided(&format!("c-{name}")), "{name} decided");
    }
    assert!(!broker.decided("first"));
    assert!(broker.decided("ok"));
    let said = broker.stderr();
    assert!(
        said.contains("refused a remote connection from 127.0.0.1:"),
        "{said}"
    );
    for secret in [&expired, &revoked, &elsewhere, &agent, &observer, &mine] {
        assert!(!said.contains(secret.as_str()), "a token on stderr: {said}");
    }
}

/// A broker whose store cannot be reached at start does not start (it
/// joins the fleet first: exit 3); one whose store goes away refuses every
/// token, saying it could not be checked (and why on its own stderr).
#[test]
fn an_unreachable_store_refuses_tokens() {
    // A port nothing listens on: serve --store stops at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://toolgate@127.0.0.1:{port}/none?connect_timeout=2");
    let dir = support::project_dir("unreachable_at_start");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--store", &url, "--listen"])
        .arg(format!("unix:{}", dir.join("broker.sock").display()))
        .env_remove("TOOLGATE_STORE")
        .env_remove("TOOLGATE_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach the store"),
        "{out:?}"
    );
    // A store that goes away after the start, on a cluster of its own.
    if crate::support::pg::cluster().is_none() {
        return;
    }
    let cluster = crate::support::pg::Cluster::start().unwrap();
    cluster.psql("postgres", "CREATE DATABASE unreachable");
    let url = cluster.url("unreachable");
    let broker = Broker::start("unreachable", &url, false);
    cluster.stop();
    let mut tls = broker.tls();
    tls.send(&json!({"type":"hello","token":format!("tg_{}", "B".repeat(43))}));
    tls.send(&call("c1", "Read", json!({"file_path":"a"})));
    let frames = tls.quiet(PATIENCE);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(
        frames[0]["message"],
        "token refused: the token could not be checked (the broker cannot reach its store); try again later"
    );
    assert!(!broker.decided("c1"));
    let said = broker.stderr();
    assert!(
        said.contains("remote connections are refused until the store answers"),
        "{said}"
    );
}

/// A token revoked while its connection is open: the connection gets one
/// `error` naming why and is closed within the bound, and its open call
/// is denied (never allowed).
#[test]
fn a_token_revoked_mid_connection_ends_it() {
    let Some(url) = store("revoked_mid") else {
        return;
    };
    let broker = Broker::start("revoked-mid", &url, false);
    let agent_token = token(&url, "agent", "ci", &[]);
    let mut agent = broker.admitted(&agent_token, "agent");
    agent.send(&call("r1", "Read", json!({"file_path":"src/a.rs"})));
    assert_eq!(agent.until("decision")["decision"], "allow");
    // A question is open for it on a local approver.
    let mut approver = support::Peer::connect(
        &broker.socket,
        json!({"type":"hello","role":"approver","client":"local"}),
    );
    agent.send(&call("r2", "Bash", json!({"command":"touch x"})));
    let question = approver.until("permission_request").pop().unwrap();
    assert_eq!(question["callID"], "r2");
    let revoked_at = Instant::now();
    revoke(&url, "ci");
    let frames = agent.quiet(PATIENCE);
    let took = revoked_at.elapsed();
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(
        frames[0]["message"],
        "the token `ci` was revoked; closing the connection"
    );
    assert!(
        took < Duration::from_secs(8),
        "closed {took:?} after the revocation"
    );
    // The question closes for the approver; the call was denied.
    let resolved = approver.until("permission_resolved").pop().unwrap();
    assert_eq!(resolved["permissionID"], question["permissionID"]);
    let record = broker
        .audited()
        .into_iter()
        .find(|record| record["callID"] == "r2")
        .unwrap();
    assert_eq!(record["decision"], "deny", "{record}");
    // The token opens nothing any more.
    let mut again = broker.tls();
    assert_eq!(
        again.hello(&agent_token, "agent")["message"],
        "token refused: the token `ci` was revoked"
    );
}

/// Plaintext on the TLS port gets no frame and decides nothing; a client
/// that trusts another CA refuses the broker; with --tls-client-ca a
/// client without a certificate, or with one of a stranger CA, is refused
/// before its token is read, and one with a certificate the CA issued is
/// served.
#[test]
fn plaintext_wrong_ca_and_mutual_tls() {
    let Some(url) = store("mtls") else {
        return;
    };
    let broker = Broker::start("mtls", &url, true);
    let certs = &broker.certs;
    let agent_token = token(&url, "agent", "ci", &[]);
    // Plaintext JSON lines: no frame comes back, nothing is decided.
    let mut plain = TcpStream::connect(("127.0.0.1", broker.port)).unwrap();
    plain.set_read_timeout(Some(PATIENCE)).unwrap();
    let hello = json!({"type":"hello","token":agent_token});
    let _ = plain.write_all(
        format!(
            "{hello}\n{}\n",
            call("p1", "Read", json!({"file_path":"a"}))
        )
        .as_bytes(),
    );
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !got.contains(&b'{'),
        "a frame on plaintext: {:?}",
        text(&got)
    );
    assert!(!broker.decided("p1"));
    // A client that trusts another CA does not finish the handshake.
    let wrong = Tls::connect(broker.port, &broker.certs.other_ca, None);
    let err = wrong.err().expect("the handshake must fail").to_string();
    assert!(
        err.contains("UnknownIssuer") || err.contains("unknown issuer"),
        "{err}"
    );
    // A certificate that is not for the name dialled is refused too.
    let elsewhere = Tls::connect_as("broker.elsewhere", broker.port, &broker.certs.ca, None);
    let err = elsewhere
        .err()
        .expect("the handshake must fail")
        .to_string();
    assert!(err.contains("certificate not valid for name"), "{err}");
    // By its IP address SAN it is trusted.
    assert!(Tls::connect_as(
        "127.0.0.1",
        broker.port,
        &broker.certs.ca,
        Some((&certs.client_cert, &certs.client_key))
    )
    .is_ok());
    // No client certificate: the broker ends the session before any frame.
    let mut bare = Tls::connect(broker.port, &broker.certs.ca, None).unwrap();
    bare.send(&hello);
    bare.send(&call("m1", "Read", json!({"file_path":"a"})));
    assert_eq!(bare.quiet(PATIENCE), Vec::<Value>::new());
    // A certificate of a stranger CA: the same.
    let stranger = Tls::connect(
        broker.port,
        &broker.certs.ca,
        Some((&certs.stranger_cert, &certs.stranger_key)),
    );
    if let Ok(mut stranger) = stranger {
        stranger.send(&hello);
        stranger.send(&call("m2", "Read", json!({"file_path":"a"})));
        assert_eq!(stranger.quiet(PATIENCE), Vec::<Value>::new());
    }
    // The client CA's certificate and a token: served.
    let mut good = Tls::connect(
        broker.port,
        &broker.certs.ca,
        Some((&certs.client_cert, &certs.client_key)),
    )
    .unwrap();
    assert_eq!(good.hello(&agent_token, "agent")["type"], "ready");
    good.send(&call("m3", "Read", json!({"file_path":"src/a.rs"})));
    assert_eq!(good.until("decision")["decision"], "allow");
    // A certificate alone is not enough: the token is still required.
    let mut no_token = Tls::connect(
        broker.port,
        &broker.certs.ca,
        Some((&certs.client_cert, &certs.client_key)),
    )
    .unwrap();
    let refused = no_token.hello("", "agent");
    assert_eq!(refused["type"], "error", "{refused}");
    for id in ["p1", "m1", "m2"] {
        assert!(!broker.decided(id), "{id}");
    }
    let said = broker.stderr();
    assert!(said.contains("the TLS handshake failed"), "{said}");
}

/// Claude Code's hook input.
fn claude(call: &str, tool: &str, input: Value) -> Value {
    json!({"session_id":"s","transcript_path":"/dev/null","permission_mode":"default",
           "hook_event_name":"PreToolUse","tool_name":tool,"tool_input":input,"tool_use_id":call})
}

/// `toolgate hook claude ARGS` with `input`: the answer's decision and
/// reason.
fn hook(root: &Path, args: &[&str], input: &Value) -> (String, String) {
    let out = support::hook_process(root, "claude", args, &[], input.to_string().as_bytes());
    let answer = support::hook_answer(&out);
    let inner = &answer["hookSpecificOutput"];
    (
        inner["permissionDecision"].as_str().unwrap().to_string(),
        inner["permissionDecisionReason"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// `toolgate hook --remote` and `toolgate approve --remote`: a question
/// the hook's call raises is answered in the approver's terminal; without
/// an approver the agent is told to ask; a token file others can read, a
/// wrong CA, a revoked token and a broker that is not there are denials.
#[test]
fn hook_and_approve_over_tls() {
    let Some(url) = store("hook_approve") else {
        return;
    };
    let broker = Broker::start("hook-approve", &url, false);
    let agent_file = broker.token_file("agent", &token(&url, "agent", "hook", &[]));
    let approver_file = broker.token_file("approver", &token(&url, "approver", "alice", &[]));
    let remote = format!("tls://localhost:{}", broker.port);
    let ca = broker.certs.ca.to_str().unwrap().to_string();
    let args = [
        "--remote",
        remote.as_str(),
        "--token-file",
        agent_file.to_str().unwrap(),
        "--ca",
        ca.as_str(),
        "--wait",
        "30",
    ];
    let file = broker.root.join("src/a.rs").to_string_lossy().into_owned();
    // A read: allowed by the broker's mode.
    let (decision, _) = hook(
        &broker.root,
        &args,
        &claude("h1", "Read", json!({"file_path":file})),
    );
    assert_eq!(decision, "allow");
    // No approver connected: a broker on a store (a fleet) keeps the
    // question open for an approver on any broker or the web page; the
    // hook's wait ends first, and it denies saying so.
    let edit = json!({"file_path":file,"old_string":"a","new_string":"b"});
    let short: Vec<&str> = args
        .iter()
        .map(|arg| if *arg == "30" { "2" } else { arg })
        .collect();
    let (decision, reason) = hook(&broker.root, &short, &claude("h2", "Edit", edit.clone()));
    assert_eq!(decision, "deny", "{reason}");
    assert!(reason.contains("no decision within 2 s"), "{reason}");
    // `toolgate approve --remote` in a terminal answers the next one.
    let command = format!(
        "{} approve --remote {remote} --token-file {} --ca {ca}; echo EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_toolgate"),
        approver_file.display()
    );
    let Some(tmux) = support::tmux::Tmux::start("remote-approve", &command) else {
        return;
    };
    tmux.wait_for(&format!("toolgate approve — 0 pending — {remote}"));
    tmux.wait_gone("(connecting…)");
    let root = broker.root.clone();
    let hooked = {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            hook(&root, &args, &claude("h3", "Edit", edit))
        })
    };
    tmux.wait_for("[claude-hook]  edit (Edit)");
    tmux.keys(&["o"]);
    let (decision, reason) = hooked.join().unwrap();
    assert_eq!(decision, "allow", "{reason}");
    // Refusals are denials that say why.
    let exposed = broker.dir.join("exposed.token");
    std::fs::copy(&agent_file, &exposed).unwrap();
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    let read = claude("h4", "Read", json!({"file_path":file}));
    let with = |token_file: &Path, ca: &str, remote: &str| {
        hook(
            &broker.root,
            &[
                "--remote",
                remote,
                "--token-file",
                token_file.to_str().unwrap(),
                "--ca",
                ca,
            ],
            &read,
        )
    };
    let (decision, reason) = with(&exposed, &ca, &remote);
    assert_eq!(decision, "deny");
    assert!(
        reason.contains("can be read or changed by other users (mode 644)"),
        "{reason}"
    );
    assert!(reason.contains("chmod 600"), "{reason}");
    let (decision, reason) = with(
        &agent_file,
        broker.certs.other_ca.to_str().unwrap(),
        &remote,
    );
    assert_eq!(decision, "deny");
    assert!(reason.contains("the TLS handshake failed"), "{reason}");
    let (decision, reason) = with(
        &agent_file,
        &ca,
        &format!("tls://127.0.0.2:{}", broker.port),
    );
    assert_eq!(decision, "deny");
    assert!(reason.contains("tls://127.0.0.2"), "{reason}");
    revoke(&url, "hook");
    let (decision, reason) = with(&agent_file, &ca, &remote);
    assert_eq!(decision, "deny");
    assert!(
        reason.contains(
            "the broker refused the connection: token refused: the token `hook` was revoked"
        ),
        "{reason}"
    );
    // None of those denials was the broker's: nothing was decided.
    assert!(!broker.decided("h4"));
    // The approver's token revoked: its terminal says the broker closed it.
    revoke(&url, "alice");
    let screen = tmux.wait_for("EXIT=1");
    assert!(screen.contains("was revoked"), "{screen}");
}

/// `toolgate mcp --remote`: the broker over TLS decides each `approve`
/// call; a question no approver hears is denied, naming how to attach one.
#[test]
fn mcp_over_tls() {
    let Some(url) = store("mcp") else {
        return;
    };
    let broker = Broker::start("mcp", &url, false);
    let token_file = broker.token_file("mcp", &token(&url, "agent", "mcp", &[]));
    let remote = format!("tls://localhost:{}", broker.port);
    let initialize = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}});
    let approve = |id: u64, tool: &str, input: Value| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"approve",
            "arguments":{"tool_name":tool,"input":input,"tool_use_id":format!("toolu_{id}")}}})
    };
    let file = broker.root.join("src/a.rs").to_string_lossy().into_owned();
    let input = [
        initialize,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        approve(1, "Read", json!({"file_path":file})),
        approve(2, "Bash", json!({"command":"rm -rf build"})),
    ]
    .iter()
    .map(|line| format!("{line}\n"))
    .collect::<String>();
    let out = support::toolgate_process(
        &broker.root,
        &[
            "mcp",
            "--remote",
            &remote,
            "--token-file",
            token_file.to_str().unwrap(),
            "--ca",
            broker.certs.ca.to_str().unwrap(),
        ],
        &[],
        input.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let replies: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let behavior = |id: u64| -> Value {
        let reply = replies.iter().find(|reply| reply["id"] == id).unwrap();
        serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    assert_eq!(behavior(1)["behavior"], "allow", "{replies:?}");
    // No approver connected: the fleet keeps the question open for any
    // broker's approver or the page; the client's input ends first, and the
    // call is withdrawn (denied).
    let denied = behavior(2);
    assert_eq!(denied["behavior"], "deny", "{denied}");
    let message = denied["message"].as_str().unwrap();
    assert!(message.contains("withdrawn"), "{message}");
    assert!(broker.decided("toolu_1"));
}

/// An approver with a token on broker C answers a question asked on broker
/// A (the same store, the same project): the store names the token as who
/// answered and who made the grants; A's audit log names it in the
/// decision's `answeredBy`; an observer on A hears the answer
/// (`permission_answered`, with who gave it) before the decision.
#[test]
fn an_answer_given_elsewhere_is_signed_by_its_token() {
    let Some((database, cluster)) = pg::database("signed") else {
        return;
    };
    let url = cluster.url(&database);
    let out = support::toolgate_process(
        Path::new("/"),
        &["store", "migrate", "--store", &url],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a = Broker::start("signed-a", &url, false);
    let c = Broker::start_in("signed-c", &url, false, Some(&a.root));
    let alice_token = token(&url, "approver", "alice", &[]);
    let mut alice = c.admitted(&alice_token, "approver");
    let mut observer = support::Peer::connect(
        &a.socket,
        json!({"type":"hello","role":"observer","client":"watch"}),
    );
    let mut agent = a.unix_agent();
    agent.send(call("s1", "Bash", json!({"command":"touch signed"})));
    let question = alice.until("permission_request");
    assert_eq!(question["callID"], "s1", "{question}");
    alice.send(&json!({"type":"permission_response",
                       "permissionID": question["permissionID"],
                       "response":"always"}));
    let decision = agent.until("decision").pop().unwrap();
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["source"], "user", "{decision}");
    // The store: who answered, who made the grant.
    let answered_by = cluster.psql(&database, "SELECT answered_by FROM toolgate_questions");
    let answered_by = answered_by.trim();
    assert!(
        answered_by.starts_with("token alice (approver) via test on "),
        "{answered_by}"
    );
    let made_by = cluster.psql(&database, "SELECT DISTINCT made_by FROM toolgate_grants");
    assert_eq!(made_by.trim(), answered_by);
    // A's audit log names the approver in the decision's record.
    let record = a
        .audited()
        .into_iter()
        .find(|record| record["callID"] == "s1" && record["decision"].is_string())
        .unwrap();
    assert_eq!(record["answeredBy"], answered_by, "{record}");
    // The observer on A heard the answer, then the decision.
    let frames = observer.until("decision");
    let heard = frames
        .iter()
        .find(|frame| frame["type"] == "permission_answered")
        .unwrap_or_else(|| panic!("no permission_answered: {frames:?}"));
    assert_eq!(heard["permissionID"], question["permissionID"], "{heard}");
    assert_eq!(heard["response"], "always", "{heard}");
    assert_eq!(heard["by"], answered_by, "{heard}");
    assert_eq!(heard["callID"], "s1", "{heard}");
}

/// `toolgate hook --remote` waiting on a question when its token is
/// revoked: the broker says why before it closes the connection, and the
/// hook denies with those words (not a bare "connection closed", not its
/// `--wait` running out).
#[test]
fn a_hook_whose_token_is_revoked_mid_call_says_so() {
    let Some(url) = store("hook_revoked") else {
        return;
    };
    let broker = Broker::start("hook-revoked", &url, false);
    let agent_file = broker.token_file("agent", &token(&url, "agent", "mid", &[]));
    let remote = format!("tls://localhost:{}", broker.port);
    let ca = broker.certs.ca.to_str().unwrap().to_string();
    let file = broker.root.join("src/a.rs").to_string_lossy().into_owned();
    let edit = json!({"file_path":file,"old_string":"a","new_string":"b"});
    let root = broker.root.clone();
    let args: Vec<String> = [
        "--remote",
        remote.as_str(),
        "--token-file",
        agent_file.to_str().unwrap(),
        "--ca",
        ca.as_str(),
        "--wait",
        "60",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let started = Instant::now();
    let hooked = std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        hook(&root, &args, &claude("m1", "Edit", edit))
    });
    // Its question is open (the fleet keeps it for an approver anywhere).
    let mut watcher = support::Peer::connect(
        &broker.socket,
        json!({"type":"hello","role":"observer","client":"watch"}),
    );
    loop {
        let pending = watcher.ask(json!({"type":"list_pending"}), "pending");
        if pending["questions"]
            .as_array()
            .is_some_and(|list| !list.is_empty())
        {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "no question: {pending}");
        std::thread::sleep(Duration::from_millis(50));
    }
    revoke(&url, "mid");
    let (decision, reason) = hooked.join().unwrap();
    assert_eq!(decision, "deny", "{reason}");
    assert!(
        reason.contains("the token `mid` was revoked; closing the connection"),
        "{reason}"
    );
    assert!(!reason.contains("no decision within"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// An admin token on broker C, over TLS: it revokes a grant made by an
/// answer to a question asked on broker A (the store names the admin as
/// who revoked it, and A asks again), ends a session running on A (its
/// open call denied there) and shuts C down; an approver token may not
/// revoke.
#[test]
fn an_admin_token_revokes_ends_and_shuts_down_across_brokers() {
    let Some((database, cluster)) = pg::database("admin") else {
        return;
    };
    let url = cluster.url(&database);
    let out = support::toolgate_process(
        Path::new("/"),
        &["store", "migrate", "--store", &url],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a = Broker::start("admin-a", &url, false);
    let mut c = Broker::start_in("admin-c", &url, false, Some(&a.root));
    let mut alice = c.admitted(&token(&url, "approver", "alice", &[]), "approver");
    let mut root = c.admitted(&token(&url, "admin", "root", &[]), "agent");
    let mut agent = a.unix_agent();
    agent.send(call("t1", "Bash", json!({"command":"touch admin"})));
    let question = alice.until("permission_request");
    alice.send(&json!({"type":"permission_response",
                       "permissionID": question["permissionID"],
                       "response":"always"}));
    assert_eq!(agent.until("decision").pop().unwrap()["decision"], "allow");
    // The approver may not revoke.
    alice.send(&json!({"type":"revoke_grant","grantID":"grant_x"}));
    let refused = alice.until("error");
    assert_eq!(refused["code"], "forbidden", "{refused}");
    // C holds the grant made by the answer (from the store); root revokes it.
    let started = Instant::now();
    let grant = loop {
        root.send(&json!({"type":"list_grants"}));
        let grants = root.until("grants");
        if let Some(grant) = grants["grants"].as_array().and_then(|list| list.first()) {
            break grant["grantID"].as_str().unwrap().to_string();
        }
        assert!(started.elapsed() < PATIENCE, "no grant on C: {grants}");
        std::thread::sleep(Duration::from_millis(50));
    };
    root.send(&json!({"type":"revoke_grant","grantID":grant}));
    let after = root.until("grants");
    assert_eq!(after["grants"], json!([]), "{after}");
    let revoked_by = cluster.psql(
        &database,
        &format!("SELECT revoked_by FROM toolgate_grants WHERE id = '{grant}'"),
    );
    assert!(
        revoked_by.starts_with("token root (admin) via test on "),
        "{revoked_by}"
    );
    // A dropped it: the same call asks again.
    let started = Instant::now();
    loop {
        let grants = agent.ask(json!({"type":"list_grants"}), "grants");
        if grants["grants"] == json!([]) {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "A keeps the grant: {grants}");
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.send(call("t2", "Bash", json!({"command":"touch admin"})));
    let again = alice.until("permission_request");
    assert_eq!(again["callID"], "t2", "{again}");
    // root ends the session on C: A ends it too, denying the open call.
    root.send(&json!({"type":"session_end","sessionID":"s"}));
    root.until("session_ended");
    let decision = agent.until("decision").pop().unwrap();
    assert_eq!(decision["callID"], "t2", "{decision}");
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("the session ended on another broker"),
        "{decision}"
    );
    // root shuts C down.
    root.send(&json!({"type":"shutdown"}));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = c.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "C did not stop: {}",
            c.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}: {}", c.stderr());
}

/// One inbox across projects over TLS: brokers A and B serve two projects
/// on one store. A lead's approver token (no project) on A that asks for
/// every project (`"projects": "all"`) sees B's question, named by its
/// project, and answers it; a token limited to A's project is refused
/// when it asks for every project (at its first `hello` and at a later
/// one) and, as a plain approver, sees only A's project's questions.
/// Then `toolgate approve --remote --all-projects` in a terminal answers
/// B's next question, and refuses to start with the limited token.
#[test]
fn one_inbox_across_projects_over_tls() {
    let Some(url) = store("inbox_tls") else {
        return;
    };
    let a = Broker::start("inbox-a", &url, false);
    let b = Broker::start("inbox-b", &url, false);
    let lead_token = token(&url, "approver", "lead", &[]);
    let a_root = a.root.to_str().unwrap().to_string();
    let limited_token = token(&url, "approver", "p1", &["--project", &a_root]);
    // Asking for every project with a limited token: refused, closed.
    let mut refused = a.tls();
    refused.send(&json!({"type":"hello","role":"approver","client":"test",
                         "token":limited_token,"projects":"all"}));
    let error = refused.recv().expect("a refusal");
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["code"], "forbidden", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("the token `p1` is limited to the project")
            && message.contains("cannot follow every project's questions"),
        "{message}"
    );
    assert_eq!(refused.recv(), None, "the refused connection is closed");
    // The lead follows every project.
    let mut lead = a.tls();
    lead.send(&json!({"type":"hello","role":"approver","client":"lead",
                      "token":lead_token,"projects":"all"}));
    assert_eq!(lead.recv().unwrap()["type"], "ready");
    let ready = lead.recv().unwrap();
    assert_eq!(ready["projects"], "all", "{ready}");
    // The limited token as a plain approver, and asking later: refused.
    let mut limited = a.admitted(&limited_token, "approver");
    limited.send(&json!({"type":"hello","role":"approver","projects":"all"}));
    let error = limited.until("error");
    assert_eq!(error["code"], "forbidden", "{error}");
    // B's agent asks: the lead sees it, the limited approver does not.
    let mut agent_b = b.unix_agent();
    agent_b.send(call("b1", "Bash", json!({"command":"touch b1"})));
    let asked = lead.until("permission_request");
    assert_eq!(asked["callID"], "b1", "{asked}");
    assert_eq!(
        asked["metadata"]["project"],
        b.root.to_str().unwrap(),
        "{asked}"
    );
    lead.send(&json!({"type":"permission_response",
                      "permissionID": asked["permissionID"], "response":"once"}));
    let decision = agent_b.until("decision").pop().unwrap();
    assert_eq!(decision["callID"], "b1", "{decision}");
    assert_eq!(decision["decision"], "allow", "{decision}");
    // B's audit log names the lead's token.
    let audited = b.audited();
    let record = audited
        .iter()
        .find(|r| r["callID"] == "b1" && r["decision"] == "allow")
        .unwrap_or_else(|| panic!("{audited:?}"));
    let by = record["answeredBy"].as_str().unwrap_or_default();
    assert!(
        by.starts_with("token lead (approver) via lead on "),
        "{record}"
    );
    // A's own question reaches both.
    let mut agent_a = a.unix_agent();
    agent_a.send(call("a1", "Bash", json!({"command":"touch a1"})));
    let own = limited.until("permission_request");
    assert_eq!(own["callID"], "a1", "{own}");
    let also = lead.until("permission_request");
    assert_eq!(also["callID"], "a1", "{also}");
    limited.send(&json!({"type":"permission_response",
                         "permissionID": own["permissionID"], "response":"reject"}));
    assert_eq!(agent_a.until("decision").pop().unwrap()["decision"], "deny");
    let seen = limited.quiet(Duration::from_millis(300));
    assert!(
        seen.iter().all(|f| f["type"] != "permission_request"),
        "the limited approver saw another project's question: {seen:?}"
    );

    // The terminal approver, for every project.
    let lead_file = a.token_file("lead", &lead_token);
    let limited_file = a.token_file("p1", &limited_token);
    let remote = format!("tls://localhost:{}", a.port);
    let ca = a.certs.ca.to_str().unwrap().to_string();
    let command = format!(
        "{bin} approve --all-projects --remote {remote} --token-file {} --ca {ca}; echo EXIT=$?; \
         {bin} approve --all-projects --remote {remote} --token-file {} --ca {ca}; echo LIMITED=$?; sleep 600",
        lead_file.display(),
        limited_file.display(),
        bin = env!("CARGO_BIN_EXE_toolgate"),
    );
    let Some(tmux) = support::tmux::Tmux::start("inbox-approve", &command) else {
        return;
    };
    tmux.wait_for(&format!("toolgate approve — 0 pending — {remote}"));
    tmux.wait_gone("(connecting…)");
    agent_b.send(call("b2", "Bash", json!({"command":"touch b2"})));
    let project = b.root.to_str().unwrap();
    let screen = tmux.wait_for("touch b2");
    assert!(screen.contains(project), "{screen}");
    tmux.keys(&["o"]);
    let decision = agent_b.until("decision").pop().unwrap();
    assert_eq!(decision["callID"], "b2", "{decision}");
    assert_eq!(decision["decision"], "allow", "{decision}");
    tmux.keys(&["q"]);
    let screen = tmux.wait_for("LIMITED=1");
    assert!(screen.contains("EXIT=0"), "{screen}");
    // The refusal's words, however the terminal wrapped them.
    assert!(
        screen
            .replace('\n', "")
            .contains("cannot follow every project's questions"),
        "{screen}"
    );
}

/// `psql` on the test's store: its database and cluster, from its URL.
fn sql(url: &str, query: &str) -> String {
    let cluster = pg::cluster().unwrap();
    let database = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    cluster.psql(database, query)
}

/// The frame an admin's connection gets for `frame`: its reply or an error.
fn administer(admin: &mut Tls, frame: Value) -> Value {
    admin.send(&frame);
    loop {
        let reply = admin.recv().expect("an answer to a token frame");
        if ["token_created", "tokens", "token_revoked", "error"]
            .contains(&reply["type"].as_str().unwrap_or(""))
        {
            return reply;
        }
    }
}

/// An admin token over TLS makes an approver token (the reply carries its
/// text once, committed in the store as a hash), which connects to another
/// broker on the store and answers a question; `list_tokens` shows it
/// (never a hash or a token's text); `revoke_token` ends its open
/// connection on the other broker, and a second revocation says it was
/// revoked already. The audit log names who did it, never the token.
#[test]
fn an_admin_token_makes_lists_and_revokes_tokens() {
    let Some(url) = store("admin_tokens") else {
        return;
    };
    let a = Broker::start("admin-tokens-a", &url, false);
    let b = Broker::start_in("admin-tokens-b", &url, false, Some(&a.root));
    let root_token = token(&url, "admin", "root", &[]);
    let mut root = a.admitted(&root_token, "agent");
    let created = administer(
        &mut root,
        json!({"type":"create_token","name":"bob","role":"approver","expiresIn":3600}),
    );
    assert_eq!(created["type"], "token_created", "{created}");
    let bob_token = created["token"].as_str().unwrap().to_string();
    assert!(
        bob_token.starts_with("tg_") && bob_token.len() == 46,
        "{created}"
    );
    let info = &created["info"];
    assert_eq!(info["name"], "bob", "{created}");
    assert_eq!(info["role"], "approver", "{created}");
    assert_eq!(info["project"], Value::Null, "{created}");
    assert_eq!(info["revokedAt"], Value::Null, "{created}");
    let expires = info["expiresAt"].as_u64().unwrap() - info["createdAt"].as_u64().unwrap();
    assert!((3_599_000..=3_601_000).contains(&expires), "{created}");
    // Committed before the reply, as its hash only.
    assert_eq!(
        sql(
            &url,
            &format!(
                "SELECT count(*) FROM toolgate_tokens WHERE name = 'bob' AND role = 'approver' \
                 AND hash = sha256(convert_to('{bob_token}', 'UTF8')) AND revoked_at IS NULL"
            )
        ),
        "1\n"
    );
    // bob connects to B and answers a question there.
    let mut bob = b.admitted(&bob_token, "approver");
    let mut agent = b.unix_agent();
    agent.send(call("t1", "Bash", json!({"command":"touch bob"})));
    let question = bob.until("permission_request");
    bob.send(&json!({"type":"permission_response",
                     "permissionID": question["permissionID"],
                     "response":"once"}));
    assert_eq!(agent.until("decision").pop().unwrap()["decision"], "allow");
    // The list shows both, without hashes or tokens.
    let listed = administer(&mut root, json!({"type":"list_tokens"}));
    assert_eq!(listed["type"], "tokens", "{listed}");
    let names: Vec<&str> = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["root", "bob"], "{listed}");
    let said = listed.to_string();
    assert!(!said.contains(&bob_token) && !said.contains(&root_token[3..]));
    assert!(!said.contains("hash"), "{said}");
    // A name taken, and a bad name, change nothing.
    let taken = administer(
        &mut root,
        json!({"type":"create_token","name":"bob","role":"agent"}),
    );
    assert_eq!(taken["code"], "name_taken", "{taken}");
    let bad = administer(
        &mut root,
        json!({"type":"create_token","name":" bob","role":"agent"}),
    );
    assert_eq!(bad["code"], "invalid_frame", "{bad}");
    assert_eq!(sql(&url, "SELECT count(*) FROM toolgate_tokens"), "2\n");
    // Revoked through A: bob's connection on B ends.
    let revoked_at = Instant::now();
    let revoked = administer(&mut root, json!({"type":"revoke_token","name":"bob"}));
    assert_eq!(revoked["type"], "token_revoked", "{revoked}");
    assert_eq!(revoked["already"], false, "{revoked}");
    assert_eq!(revoked["info"]["name"], "bob", "{revoked}");
    assert_ne!(revoked["info"]["revokedAt"], Value::Null, "{revoked}");
    let frames = bob.quiet(PATIENCE);
    assert!(revoked_at.elapsed() < Duration::from_secs(8), "{frames:?}");
    let last = frames.last().expect("an error frame before the close");
    assert_eq!(
        last["message"], "the token `bob` was revoked; closing the connection",
        "{frames:?}"
    );
    let mut again = b.tls();
    assert_eq!(
        again.hello(&bob_token, "approver")["message"],
        "token refused: the token `bob` was revoked"
    );
    // Again: already revoked; by id too. An unknown name is an error.
    let twice = administer(&mut root, json!({"type":"revoke_token","name":"bob"}));
    assert_eq!(twice["type"], "token_revoked", "{twice}");
    assert_eq!(twice["already"], true, "{twice}");
    let by_id = administer(
        &mut root,
        json!({"type":"revoke_token","name": revoked["info"]["id"]}),
    );
    assert_eq!(by_id["already"], true, "{by_id}");
    let unknown = administer(&mut root, json!({"type":"revoke_token","name":"nobody"}));
    assert_eq!(unknown["code"], "unknown_token", "{unknown}");
    // Sent together, done in order: the revocation finds the token made.
    root.send(&json!({"type":"create_token","name":"carol","role":"observer"}));
    root.send(&json!({"type":"revoke_token","name":"carol"}));
    assert_eq!(root.until("token_created")["info"]["name"], "carol");
    let carol = root.until("token_revoked");
    assert_eq!(carol["already"], false, "{carol}");
    // The audit log: who made and revoked it, never the token.
    let audit = std::fs::read_to_string(&a.audit).unwrap();
    assert!(!audit.contains(&bob_token[3..]), "{audit}");
    let records = a.audited();
    let made = records
        .iter()
        .find(|record| record["event"] == "token_created")
        .unwrap_or_else(|| panic!("no token_created: {audit}"));
    assert_eq!(made["name"], "bob", "{made}");
    assert_eq!(made["role"], "approver", "{made}");
    assert!(
        made["by"]
            .as_str()
            .unwrap()
            .starts_with("token root (admin) via test"),
        "{made}"
    );
    let ended: Vec<&Value> = records
        .iter()
        .filter(|record| record["event"] == "token_revoked")
        .collect();
    assert_eq!(ended.len(), 4, "{audit}");
    assert_eq!(ended[0]["already"], false, "{audit}");
    assert_eq!(ended[1]["already"], true, "{audit}");
}

/// Agent, observer and approver tokens sending the token frames are
/// refused (`forbidden`), and nothing is made or revoked; on the broker's
/// Unix socket the frames are refused too.
#[test]
fn token_frames_are_forbidden_to_other_tokens() {
    let Some(url) = store("token_frames_forbidden") else {
        return;
    };
    let broker = Broker::start("token-frames-forbidden", &url, false);
    let before = sql(
        &url,
        "SELECT count(*) FROM toolgate_tokens WHERE revoked_at IS NULL",
    );
    assert_eq!(before, "0\n");
    for role in ["agent", "observer", "approver"] {
        let token = token(&url, role, &format!("the {role}"), &[]);
        let mut conn = broker.admitted(&token, role);
        for frame in [
            json!({"type":"create_token","name":format!("{role}'s"),"role":"admin"}),
            json!({"type":"list_tokens"}),
            json!({"type":"revoke_token","name":"the agent"}),
        ] {
            let reply = administer(&mut conn, frame.clone());
            assert_eq!(reply["type"], "error", "{role} {frame}: {reply}");
            assert_eq!(reply["code"], "forbidden", "{role} {frame}: {reply}");
            assert!(
                reply["message"]
                    .as_str()
                    .unwrap()
                    .ends_with("only an admin token may make, list or revoke tokens"),
                "{reply}"
            );
        }
    }
    let mut local = broker.unix_agent();
    let reply = local.ask(json!({"type":"list_tokens"}), "error");
    assert_eq!(reply["code"], "forbidden", "{reply}");
    let reply = local.ask(
        json!({"type":"create_token","name":"local","role":"admin"}),
        "error",
    );
    assert_eq!(reply["code"], "forbidden", "{reply}");
    // Nothing made, nothing revoked.
    assert_eq!(
        sql(
            &url,
            "SELECT string_agg(name, ',' ORDER BY name) FROM toolgate_tokens WHERE revoked_at IS NULL"
        ),
        "the agent,the approver,the observer\n"
    );
    assert_eq!(sql(&url, "SELECT count(*) FROM toolgate_tokens"), "3\n");
}

/// An admin token limited to a project, with an expiry, makes tokens only
/// for its project and ending no later than it: never one for every
/// project or another project, never one that outlives it; it lists and
/// revokes its project's tokens only.
#[test]
fn a_limited_admin_cannot_make_more_than_it_holds() {
    let Some(url) = store("limited_admin") else {
        return;
    };
    let broker = Broker::start("limited-admin", &url, false);
    let project = broker.root.display().to_string();
    token(&url, "admin", "root", &[]);
    let lead_token = token(
        &url,
        "admin",
        "lead",
        &["--project", &project, "--expires", "3600"],
    );
    let mut lead = broker.admitted(&lead_token, "agent");
    let refused = [
        (
            json!({"type":"create_token","name":"x1","role":"agent","expiresIn":60}),
            "is limited to the project",
        ),
        (
            json!({"type":"create_token","name":"x2","role":"agent","project":"/elsewhere","expiresIn":60}),
            "it cannot make a token for the project /elsewhere",
        ),
        (
            json!({"type":"create_token","name":"x3","role":"agent","project":project}),
            "it cannot make a token that never does",
        ),
        (
            json!({"type":"create_token","name":"x4","role":"admin","project":project,"expiresIn":7200}),
            "it cannot make a token that outlives it",
        ),
        (
            json!({"type":"revoke_token","name":"root"}),
            "it can revoke only that project's tokens",
        ),
    ];
    for (frame, says) in refused {
        let reply = administer(&mut lead, frame.clone());
        assert_eq!(reply["code"], "forbidden", "{frame}: {reply}");
        assert!(
            reply["message"].as_str().unwrap().contains(says),
            "{frame}: {reply}"
        );
    }
    assert_eq!(
        sql(
            &url,
            "SELECT count(*) FROM toolgate_tokens WHERE revoked_at IS NULL"
        ),
        "2\n"
    );
    // Within what it holds: made.
    let made = administer(
        &mut lead,
        json!({"type":"create_token","name":"ci","role":"agent","project":format!("{project}/"),"expiresIn":600}),
    );
    assert_eq!(made["type"], "token_created", "{made}");
    let ci = made["token"].as_str().unwrap().to_string();
    broker.admitted(&ci, "agent");
    // It sees its project's tokens only.
    let listed = administer(&mut lead, json!({"type":"list_tokens"}));
    let names: Vec<&str> = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lead", "ci"], "{listed}");
    let revoked = administer(&mut lead, json!({"type":"revoke_token","name":"ci"}));
    assert_eq!(revoked["already"], false, "{revoked}");
    assert_eq!(
        sql(
            &url,
            "SELECT count(*) FROM toolgate_tokens WHERE revoked_at IS NULL"
        ),
        "2\n"
    );
}

/// `toolgate tokens create|list|revoke --remote` with an admin's token
/// file: the token on the last line of stdout, and it works; the list and
/// revocations as the `--store` form prints them, with its exit codes.
#[test]
fn tokens_over_remote_print_as_with_the_store() {
    let Some(url) = store("tokens_remote_cli") else {
        return;
    };
    let broker = Broker::start("tokens-remote-cli", &url, false);
    let root = broker.token_file("root", &token(&url, "admin", "root", &[]));
    let approver = broker.token_file("alice", &token(&url, "approver", "alice", &[]));
    let remote = format!("tls://localhost:{}", broker.port);
    let ca = broker.certs.ca.display().to_string();
    let run = |file: &Path, args: &[&str]| {
        let mut argv = vec!["tokens"];
        argv.extend_from_slice(args);
        let file = file.display().to_string();
        argv.extend(["--remote", &remote, "--token-file", &file, "--ca", &ca]);
        support::toolgate_process(Path::new("/"), &argv, &[], b"")
    };
    let out = run(&root, &["create", "--role", "agent", "--name", "ci"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .next()
            .unwrap()
            .starts_with("created token `ci` (agent; every project; expires never; id "),
        "{stdout}"
    );
    let ci = stdout.lines().last().unwrap().to_string();
    let mut agent = broker.admitted(&ci, "agent");
    agent.send(&call("r1", "Read", json!({"file_path":"src/a.rs"})));
    assert_eq!(agent.until("decision")["decision"], "allow");
    // The list, as JSON lines.
    let out = run(&root, &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let names: Vec<String> = text(&out.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["root", "alice", "ci"]);
    // A bad name is refused before anything is sent (exit 2); an approver
    // is forbidden (exit 1).
    let out = run(&root, &["create", "--role", "agent", "--name", ""]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = run(
        &approver,
        &["create", "--role", "agent", "--name", "sneaky"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("only an admin token may make, list or revoke tokens"),
        "{}",
        text(&out.stderr)
    );
    // Revoked: the agent's connection ends; again: said so; unknown: 1.
    let out = run(&root, &["revoke", "ci"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("revoked token `ci` (id "));
    let frames = agent.quiet(PATIENCE);
    assert_eq!(
        frames.last().unwrap()["message"],
        "the token `ci` was revoked; closing the connection"
    );
    let out = run(&root, &["revoke", "ci"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("was revoked already, at "),
        "{}",
        text(&out.stdout)
    );
    let out = run(&root, &["revoke", "nobody"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        sql(
            &url,
            "SELECT count(*) FROM toolgate_tokens WHERE name = 'sneaky'"
        ),
        "0\n"
    );
}

/// A token frame while the store cannot be reached: `store_unavailable`,
/// nothing made (checked once the store is back).
#[test]
fn a_token_frame_without_the_store_changes_nothing() {
    if pg::cluster().is_none() {
        return;
    }
    let cluster = pg::Cluster::start().unwrap();
    cluster.psql("postgres", "CREATE DATABASE admin_away");
    let url = cluster.url("admin_away");
    let out = support::toolgate_process(
        Path::new("/"),
        &["store", "migrate", "--store", &url],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let broker = Broker::start("admin-away", &url, false);
    let mut root = broker.admitted(&token(&url, "admin", "root", &[]), "agent");
    cluster.stop();
    let reply = administer(
        &mut root,
        json!({"type":"create_token","name":"ghost","role":"admin"}),
    );
    assert_eq!(reply["code"], "store_unavailable", "{reply}");
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .starts_with("the store cannot be reached: nothing was changed"),
        "{reply}"
    );
    cluster.start_again().unwrap();
    assert_eq!(
        cluster.psql(
            "admin_away",
            "SELECT string_agg(name, ',') FROM toolgate_tokens"
        ),
        "root\n"
    );
    assert!(!std::fs::read_to_string(&broker.audit)
        .unwrap_or_default()
        .contains("token_created"));
}
