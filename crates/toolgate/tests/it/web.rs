//! The web approval page through the real binary (`toolgate web`), over
//! HTTP from a plain TCP client, against a real PostgreSQL (support::pg):
//! logins (approver, admin and observer in; agent and wrong tokens out),
//! the cross-site checks (CSRF token, Origin), questions put in the store
//! by the `toolgate::fleet` API showing up in the event stream and leaving
//! it once answered, answers written in the store (the first wins, the
//! second is told who answered), and agent text escaped in everything the
//! server sends. The page in a real browser is `web_browser.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolgate::fleet::questions::{BrokerId, NewQuestion, QuestionId, QuestionState};
use toolgate::fleet::tokens::{NewToken, Role, Secret};
use toolgate::fleet::{runtime, Store};

use crate::support::pg;

/// A `toolgate web` process, killed when dropped.
pub struct Page {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Page {
    /// Start `toolgate web --http 127.0.0.1:0 --store URL` and wait for
    /// the address it says.
    pub fn start(url: &str) -> Page {
        Page::spawn(&["web", "--http", "127.0.0.1:0", "--store", url])
    }

    /// Start toolgate with `args` and wait for the page's address on stderr.
    pub fn spawn(args: &[&str]) -> Page {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("toolgate: the approval page is at ")
            .and_then(|rest| rest.split_once("://"))
            .and_then(|(_, rest)| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stderr.read_to_string(&mut rest);
        });
        Page { child, addr }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (names lowercase) and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; the whole response.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    exchange(&mut stream, addr, method, path, headers, body)
}

/// One request on `stream` (`host` in its `Host` header); the response
/// read to the end of the stream.
pub fn exchange(
    stream: &mut (impl Read + Write),
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 16384];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(count) => raw.extend_from_slice(&buffer[..count]),
            // A TLS peer that closes without close_notify.
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => panic!("reading the response: {err}"),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP response: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `application/x-www-form-urlencoded` text of `fields`.
pub fn form(fields: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        let mut out = String::new();
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
                out.push(byte as char);
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    };
    fields
        .iter()
        .map(|(key, value)| format!("{}={}", encode(key), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A migrated store for one test, its URL, and a broker registered in it.
pub fn store(name: &str) -> Option<(String, BrokerId)> {
    let (database, cluster) = pg::database(name)?;
    let url = cluster.url(&database);
    let broker = BrokerId::random();
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store
            .register_broker(broker, "laptop-7", 4242, Duration::from_secs(600))
            .await
            .unwrap();
    });
    Some((url, broker))
}

/// Make a token in the store; its text.
pub fn token(url: &str, name: &str, role: Role) -> String {
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(url).await.unwrap();
        let secret = Secret::generate().unwrap();
        let new = NewToken::new(name, role, None, None).unwrap();
        store.create_token(&new, &secret).await.unwrap();
        secret.expose().to_string()
    })
}

/// A `permission_request` as a broker puts it in the store.
pub fn request(n: usize, title: &str, command: &str) -> Value {
    json!({
        "type": "permission_request", "timestamp": 0, "sessionID": "main/agent/a1",
        "parentID": "main", "permissionID": format!("per_{n}"), "callID": format!("c{n}"),
        "tool": "bash", "permission": "bash", "toolName": "Bash",
        "pattern": ["rm *"], "patterns": [command], "always": ["rm *"],
        "alwaysOptions": [[command], ["rm *"]], "title": title,
        "metadata": {"input": {"command": command}, "command": command,
                     "reason": "ask mode asks before commands that are not read-only"}
    })
}

/// Put a question in the store; its id.
pub fn ask(url: &str, broker: BrokerId, request: Value) -> QuestionId {
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(url).await.unwrap();
        let question = NewQuestion {
            id: QuestionId::random(),
            broker,
            project: "/work/app".to_string(),
            session_id: "main/agent/a1".to_string(),
            request,
            offers: None,
        };
        store.ask(&question).await.unwrap().id
    })
}

/// The question as the store holds it.
pub fn stored(url: &str, id: QuestionId) -> toolgate::fleet::questions::Question {
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(url).await.unwrap();
        store.question(id).await.unwrap().unwrap()
    })
}

/// Log in with `token`: the cookie (`name=value`) and the page's CSRF token.
pub fn login(page: &Page, token: &str) -> (String, String) {
    let origin = page.origin();
    let reply = http(
        &page.addr,
        "POST",
        "/login",
        &[("Origin", &origin)],
        &form(&[("token", token)]),
    );
    assert_eq!(reply.status, 303, "{reply:?}");
    let cookie = reply.header("set-cookie").unwrap();
    let pair = cookie.split(';').next().unwrap().to_string();
    let app = http(&page.addr, "GET", "/", &[("Cookie", &pair)], "");
    assert_eq!(app.status, 200);
    let csrf = app
        .body
        .split("name=\"toolgate-csrf\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    (pair, csrf)
}

/// An open event stream.
pub struct Events {
    stream: TcpStream,
    /// Everything read so far.
    pub text: String,
}

impl Events {
    pub fn open(page: &Page, cookie: &str) -> Events {
        let mut stream = TcpStream::connect(&page.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n",
            page.addr
        );
        stream.write_all(request.as_bytes()).unwrap();
        Events {
            stream,
            text: String::new(),
        }
    }

    /// Read until the last `questions` event satisfies `done`; that
    /// event's data.
    pub fn until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buffer = [0u8; 65536];
        loop {
            if let Some(last) = self.last() {
                if done(&last) {
                    return last;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the event stream never showed {what}: {}",
                self.text
            );
            match self.stream.read(&mut buffer) {
                Ok(0) => panic!("the event stream ended: {}", self.text),
                Ok(count) => self
                    .text
                    .push_str(&String::from_utf8_lossy(&buffer[..count])),
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(err) => panic!("reading the event stream: {err}"),
            }
        }
    }

    /// The data of the last complete `questions` event.
    fn last(&self) -> Option<Value> {
        let complete = &self.text[..self.text.rfind("\n\n")?];
        let at = complete.rfind("event: questions\ndata: ")?;
        let data = complete[at..].lines().nth(1)?.strip_prefix("data: ")?;
        serde_json::from_str(data).ok()
    }
}

fn ids(snapshot: &Value) -> Vec<String> {
    snapshot["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn logins_take_approver_admin_and_observer_tokens_and_refuse_the_others() {
    let Some((url, _)) = store("web_logins") else {
        return;
    };
    let approver = token(&url, "alice", Role::Approver);
    let admin = token(&url, "root", Role::Admin);
    let observer = token(&url, "watcher", Role::Observer);
    let agent = token(&url, "agent-1", Role::Agent);
    let page = Page::start(&url);
    let origin = page.origin();

    let front = http(&page.addr, "GET", "/", &[], "");
    assert_eq!(front.status, 200);
    assert!(front.body.contains("name=\"token\""), "{}", front.body);
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
    ] {
        assert_eq!(front.header(name), Some(value), "{name}");
    }
    let csp = front.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    // No inline script anywhere: the script is a file of its own.
    assert!(!front.body.contains("<script>"));

    let post = |token: &str, origin: &str| {
        http(
            &page.addr,
            "POST",
            "/login",
            &[("Origin", origin)],
            &form(&[("token", token)]),
        )
    };
    for (token, role) in [
        (&approver, "approver"),
        (&admin, "admin"),
        (&observer, "observer"),
    ] {
        let reply = post(token, &origin);
        assert_eq!(reply.status, 303, "{role}: {reply:?}");
        let cookie = reply.header("set-cookie").unwrap();
        for piece in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(piece), "{cookie}");
        }
        assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
        let pair = cookie.split(';').next().unwrap();
        let app = http(&page.addr, "GET", "/", &[("Cookie", pair)], "");
        assert!(
            app.body.contains(&format!("content=\"{role}\"")),
            "{}",
            app.body
        );
    }

    let refused = post(&agent, &origin);
    assert_eq!(refused.status, 403);
    assert!(
        refused.body.contains("an agent token cannot log in"),
        "{}",
        refused.body
    );
    assert!(refused.header("set-cookie").is_none());
    let wrong = format!("{}x", &approver[..approver.len() - 1]);
    for bad in [wrong.as_str(), "tg_nonsense", ""] {
        let reply = post(bad, &origin);
        assert_eq!(reply.status, 403, "{bad:?}");
        assert!(reply.body.contains("token refused"), "{}", reply.body);
        assert!(reply.header("set-cookie").is_none());
    }
    // A login posted from another site is refused, whatever the token.
    let foreign = post(&approver, "http://evil.example");
    assert_eq!(foreign.status, 403);
    assert!(foreign.header("set-cookie").is_none());
    let no_origin = http(
        &page.addr,
        "POST",
        "/login",
        &[],
        &form(&[("token", &approver)]),
    );
    assert_eq!(no_origin.status, 403);

    // No login, no events and no answers.
    assert_eq!(http(&page.addr, "GET", "/events", &[], "").status, 401);
    let forged = http(
        &page.addr,
        "GET",
        "/events",
        &[("Cookie", "toolgate=forged")],
        "",
    );
    assert_eq!(forged.status, 401);

    // Logging out ends the login.
    let (cookie, csrf) = login(&page, &approver);
    let without = http(
        &page.addr,
        "POST",
        "/logout",
        &[("Origin", &origin), ("Cookie", &cookie)],
        "",
    );
    assert_eq!(without.status, 403, "logout without the CSRF token");
    let out = http(
        &page.addr,
        "POST",
        "/logout",
        &[("Origin", &origin), ("Cookie", &cookie)],
        &form(&[("csrf", &csrf)]),
    );
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(
        http(&page.addr, "GET", "/events", &[("Cookie", &cookie)], "").status,
        401
    );
}

#[test]
fn a_question_in_the_store_is_streamed_answered_once_and_leaves_every_stream() {
    let Some((url, broker)) = store("web_answers") else {
        return;
    };
    let alice = token(&url, "alice", Role::Approver);
    let bob = token(&url, "bob", Role::Approver);
    let watcher = token(&url, "watcher", Role::Observer);
    let page = Page::start(&url);
    let origin = page.origin();
    let (alice_cookie, alice_csrf) = login(&page, &alice);
    let (bob_cookie, bob_csrf) = login(&page, &bob);
    let (watch_cookie, watch_csrf) = login(&page, &watcher);

    let mut alice_events = Events::open(&page, &alice_cookie);
    let mut bob_events = Events::open(&page, &bob_cookie);
    let first = alice_events.until("the empty list", |s| s["trouble"].is_null());
    assert_eq!(ids(&first), Vec::<String>::new());

    let evil = "rm -rf build <script>alert(1)</script>";
    let id = ask(
        &url,
        broker,
        request(1, "<img src=x onerror=alert(2)>", evil),
    );
    let shown = alice_events.until("the question", |s| ids(s) == [id.to_string()]);
    bob_events.until("the question", |s| ids(s) == [id.to_string()]);
    let question = &shown["questions"][0];
    assert_eq!(question["host"], "laptop-7");
    assert_eq!(question["session"], "main/agent/a1");
    assert_eq!(question["parent"], "main");
    assert_eq!(question["tool"], "bash");
    assert_eq!(question["title"], "<img src=x onerror=alert(2)>");
    assert_eq!(question["options"], json!([[evil], ["rm *"]]));
    let lines = question["lines"].to_string();
    assert!(lines.contains("not read-only"), "{lines}");
    // Agent text never reaches the wire as markup: the JSON escapes it.
    assert!(
        !alice_events.text.contains("<script>"),
        "{}",
        alice_events.text
    );
    assert!(!alice_events.text.contains("<img"), "{}", alice_events.text);
    assert!(alice_events.text.contains("\\u003cscript\\u003e"));

    let answer = |cookie: &str, csrf: Option<&str>, origin: &str, fields: &[(&str, &str)]| {
        let mut headers = vec![("Origin", origin), ("Cookie", cookie)];
        if let Some(csrf) = csrf {
            headers.push(("X-CSRF-Token", csrf));
        }
        http(&page.addr, "POST", "/answer", &headers, &form(fields))
    };
    let id_text = id.to_string();
    let once = [("id", id_text.as_str()), ("choice", "once")];
    // Without the CSRF token, with a wrong one, from another origin, with
    // no login, or as an observer: refused, and the question stays open.
    assert_eq!(answer(&alice_cookie, None, &origin, &once).status, 403);
    assert_eq!(
        answer(&alice_cookie, Some(&bob_csrf), &origin, &once).status,
        403
    );
    let foreign = answer(
        &alice_cookie,
        Some(&alice_csrf),
        "http://evil.example",
        &once,
    );
    assert_eq!(foreign.status, 403);
    assert!(
        foreign.body.contains("did not come from this page"),
        "{}",
        foreign.body
    );
    assert_eq!(
        answer("toolgate=none", Some(&alice_csrf), &origin, &once).status,
        401
    );
    let watching = answer(&watch_cookie, Some(&watch_csrf), &origin, &once);
    assert_eq!(watching.status, 403);
    assert!(
        watching.body.contains("may watch but not answer"),
        "{}",
        watching.body
    );
    let bad = answer(
        &alice_cookie,
        Some(&alice_csrf),
        &origin,
        &[("id", &id_text), ("choice", "always"), ("level", "7")],
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(stored(&url, id).state, QuestionState::Open);

    // Alice answers `always` with the narrow option for 30 minutes.
    let answered = answer(
        &alice_cookie,
        Some(&alice_csrf),
        &origin,
        &[
            ("id", &id_text),
            ("choice", "always"),
            ("level", "0"),
            ("lifetime", "1800"),
        ],
    );
    assert_eq!(answered.status, 200, "{answered:?}");
    let question = stored(&url, id);
    assert_eq!(question.state, QuestionState::Answered);
    assert_eq!(
        question.answered_by.as_deref(),
        Some("token alice (approver) on the approval page")
    );
    assert_eq!(
        question.answer,
        Some(
            json!({"type": "permission_response", "permissionID": "per_1",
                    "response": "always", "patterns": [evil], "expiresIn": 1800})
        )
    );
    // Both streams drop it.
    alice_events.until("the question gone", |s| ids(s).is_empty());
    bob_events.until("the question gone", |s| ids(s).is_empty());

    // Bob, late: told who answered; the store keeps Alice's answer.
    let late = answer(&bob_cookie, Some(&bob_csrf), &origin, &once);
    assert_eq!(late.status, 409);
    let said: Value = serde_json::from_str(&late.body).unwrap();
    assert_eq!(
        said["message"],
        "already answered by token alice (approver) on the approval page"
    );
    assert_eq!(stored(&url, id).answer, question.answer);

    // A reject with a message, through the form field rather than the header.
    let second = ask(&url, broker, request(2, "two", "rm x"));
    bob_events.until("the second question", |s| ids(s) == [second.to_string()]);
    let second_text = second.to_string();
    let rejected = answer(
        &bob_cookie,
        None,
        &origin,
        &[
            ("id", &second_text),
            ("choice", "reject"),
            ("message", "not now <b>"),
            ("csrf", &bob_csrf),
        ],
    );
    assert_eq!(rejected.status, 200, "{rejected:?}");
    assert_eq!(
        stored(&url, second).answer,
        Some(
            json!({"type": "permission_response", "permissionID": "per_2",
                    "response": "reject", "message": "not now <b>"})
        )
    );
    bob_events.until("the second question gone", |s| ids(s).is_empty());

    // A question cancelled by its broker leaves the streams too.
    let third = ask(&url, broker, request(3, "three", "rm y"));
    alice_events.until("the third question", |s| ids(s) == [third.to_string()]);
    runtime().unwrap().block_on(async {
        let mut store = Store::connect(&url).await.unwrap();
        store.cancel_question(third, "withdrawn").await.unwrap();
    });
    alice_events.until("the third question gone", |s| ids(s).is_empty());
    let third_text = third.to_string();
    let gone = answer(
        &alice_cookie,
        Some(&alice_csrf),
        &origin,
        &[("id", &third_text), ("choice", "once")],
    );
    assert_eq!(gone.status, 409);
    assert!(
        gone.body.contains("already cancelled (withdrawn)"),
        "{}",
        gone.body
    );

    // A stream opened now gets the whole list at once.
    let fourth = ask(&url, broker, request(4, "four", "rm z"));
    let mut late_events = Events::open(&page, &alice_cookie);
    late_events.until("the list on connecting", |s| ids(s) == [fourth.to_string()]);
}

#[test]
fn agent_and_token_text_is_escaped_in_every_page() {
    let Some((url, broker)) = store("web_escaping") else {
        return;
    };
    // A token's name is the admin's, but it is escaped all the same.
    let named = token(&url, "<script>alert(3)</script>", Role::Approver);
    let page = Page::start(&url);
    let (cookie, _) = login(&page, &named);
    let app = http(&page.addr, "GET", "/", &[("Cookie", &cookie)], "");
    assert!(!app.body.contains("<script>alert"), "{}", app.body);
    assert!(
        app.body.contains("&lt;script&gt;alert(3)&lt;/script&gt;"),
        "{}",
        app.body
    );

    let id = ask(
        &url,
        broker,
        json!({"type": "permission_request", "timestamp": 0, "sessionID": "<s>",
               "permissionID": "per_9", "callID": "c9", "tool": "edit", "permission": "edit",
               "toolName": "Edit", "pattern": ["*"], "patterns": ["a.html"], "always": ["*"],
               "alwaysOptions": [["a.html"], ["*"]], "title": "a.html",
               "metadata": {"input": {"file_path": "a.html", "old_string": "<p>old</p>",
                                      "new_string": "<script>steal()</script>"},
                            "reason": "<i>why</i>"}}),
    );
    let mut events = Events::open(&page, &cookie);
    let shown = events.until("the edit", |s| ids(s) == [id.to_string()]);
    let lines = shown["questions"][0]["lines"].to_string();
    assert!(
        lines.contains("-<p>old</p>") && lines.contains("+<script>steal()</script>"),
        "{lines}"
    );
    for raw in ["<script>", "<p>", "<i>", "<s>"] {
        assert!(!events.text.contains(raw), "{raw} in {}", events.text);
    }
    // The page's script and style carry no agent text, and the script
    // never writes HTML.
    let script = http(&page.addr, "GET", "/app.js", &[], "");
    assert_eq!(script.status, 200);
    assert!(script
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert!(!script.body.contains("innerHTML") && !script.body.contains("insertAdjacentHTML"));
}

#[test]
fn serve_http_runs_the_page_beside_a_broker() {
    let Some((url, broker)) = store("web_serve") else {
        return;
    };
    let alice = token(&url, "alice", Role::Approver);
    let page = Page::spawn(&["serve", "--http", "127.0.0.1:0", "--store", &url]);
    let (cookie, _) = login(&page, &alice);
    let id = ask(&url, broker, request(1, "from serve", "rm a"));
    let mut events = Events::open(&page, &cookie);
    events.until("the question", |s| ids(s) == [id.to_string()]);
}

#[test]
fn the_page_refuses_flags_it_cannot_use() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .env_remove("TOOLGATE_STORE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["web", "--http", "127.0.0.1:0", "--store", ""]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--http needs --store"), "{stderr}");
    let (code, stderr) = run(&["web", "--store", "postgres://x@127.0.0.1:1/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("web needs --http"), "{stderr}");
    let (code, stderr) = run(&["serve", "--http", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    // serve's page is served with the broker's certificate flags.
    let (code, stderr) = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
        "--tls-cert",
        "/nonexistent.pem",
        "--tls-key",
        "/nonexistent.key",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read the certificate chain /nonexistent.pem"),
        "{stderr}"
    );
    let (code, stderr) = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
        "--tls-cert",
        "/nonexistent.pem",
    ]);
    assert_eq!(code, Some(2), "--tls-cert without --tls-key: {stderr}");
    assert!(stderr.contains("go together"), "{stderr}");
    // A client CA is for TLS listeners only.
    let (code, stderr) = run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
        "--tls-client-ca",
        "/nonexistent.pem",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--listen tls:"), "{stderr}");
    let (code, stderr) = run(&[
        "web",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
        "--tls-cert",
        "/nonexistent.pem",
        "--tls-key",
        "/nonexistent.key",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read the certificate chain /nonexistent.pem"),
        "{stderr}"
    );
    let (code, stderr) = run(&[
        "web",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
        "--tls-cert",
        "a",
    ]);
    assert_eq!(code, Some(2), "--tls-cert without --tls-key: {stderr}");
    // Nothing listens on port 1: unreachable.
    let (code, stderr) = run(&[
        "web",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://x@127.0.0.1:1/x",
    ]);
    assert_eq!(code, Some(3), "{stderr}");
}

#[test]
fn over_https_the_cookie_is_secure_and_plain_http_gets_nothing() {
    let Some((url, _)) = store("web_https") else {
        return;
    };
    let alice = token(&url, "alice", Role::Approver);
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = crate::support::state_dir("web_https");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let page = Page::spawn(&[
        "web",
        "--http",
        "127.0.0.1:0",
        "--store",
        &url,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let port = page.addr.rsplit_once(':').unwrap().1.to_string();
    let host = format!("localhost:{port}");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let config = std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let https = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        let tcp = TcpStream::connect(&page.addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let connection = rustls::ClientConnection::new(config.clone(), name).unwrap();
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        exchange(&mut stream, &host, method, path, headers, body)
    };
    let front = https("GET", "/", &[], "");
    assert_eq!(front.status, 200);
    assert!(front.body.contains("name=\"token\""));
    let origin = format!("https://{host}");
    let reply = https(
        "POST",
        "/login",
        &[("Origin", &origin)],
        &form(&[("token", &alice)]),
    );
    assert_eq!(reply.status, 303, "{reply:?}");
    let cookie = reply.header("set-cookie").unwrap();
    assert!(cookie.starts_with("__Host-toolgate="), "{cookie}");
    for piece in ["; Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(piece), "{cookie}");
    }
    // An http:// origin is another origin.
    let downgraded = https(
        "POST",
        "/login",
        &[("Origin", &format!("http://{host}"))],
        &form(&[("token", &alice)]),
    );
    assert_eq!(downgraded.status, 403);
    // Plain HTTP on the TLS port: no HTTP answer at all.
    let mut plain = TcpStream::connect(&page.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("HTTP/1.1 200"),
        "{answer:?}"
    );
}
