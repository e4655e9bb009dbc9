//! The web approval page in a real headless browser: Debian's `chromium`,
//! driven through its DevTools protocol (a WebSocket, `tungstenite`),
//! against `toolgate web` and a real PostgreSQL (support::pg).
//!
//! Log in through the form on a phone-sized screen; a question put in the
//! store appears; a second tab shows it too; a mouse click on "Allow once"
//! in the first tab writes the answer in the store; the second tab sees the
//! question go. Screenshots are taken before and after (PNG of the
//! screen's size, different from each other) and kept in the target
//! directory; the page's text (Runtime.evaluate) shows the question before
//! and not after, and an agent's `<img onerror>` in the title stays text.
//!
//! Without chromium the test says `skipped: chromium not found` and
//! passes, unless TOOLGATE_REQUIRE_BROWSER is set (CI installs chromium
//! and sets it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use toolgate::fleet::questions::QuestionState;
use toolgate::fleet::tokens::Role;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::web::{ask, request, store, stored, token, Page};

/// The phone-sized screen the page is shown on.
const WIDTH: u32 = 390;
const HEIGHT: u32 = 844;

/// Where chromium is, or `None` (and the test skips) when it is missing.
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLGATE_REQUIRE_BROWSER").is_none(),
            "chromium not found (apt-get install chromium) and TOOLGATE_REQUIRE_BROWSER is set"
        );
        let _ = writeln!(
            std::io::stderr(),
            "skipped: chromium not found (apt-get install chromium)"
        );
    }
    found
}

/// A headless chromium, killed (and its profile removed) when dropped.
struct Browser {
    child: Child,
    profile: PathBuf,
    port: u16,
    cdp: Cdp,
}

impl Browser {
    fn start(program: &Path) -> Browser {
        let profile = std::env::temp_dir().join(format!(
            "toolgate-web-browser-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(program)
            .args([
                "--headless",
                "--remote-debugging-port=0",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--disable-extensions",
                "--hide-scrollbars",
                "--mute-audio",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Chromium writes its port and the browser's path to DevToolsActivePort.
        let file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break (port.parse::<u16>().unwrap(), path.to_string());
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let cdp = Cdp::connect(&format!("ws://127.0.0.1:{port}{path}"));
        Browser {
            child,
            profile,
            port,
            cdp,
        }
    }

    /// A new tab showing `url`, phone-sized.
    fn tab(&mut self, url: &str) -> Cdp {
        let target = self
            .cdp
            .call("Target.createTarget", json!({"url": "about:blank"}));
        let id = target["targetId"].as_str().unwrap();
        let mut tab = Cdp::connect(&format!("ws://127.0.0.1:{}/devtools/page/{id}", self.port));
        tab.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": true}),
        );
        tab.call("Page.enable", json!({}));
        tab.call("Page.navigate", json!({"url": url}));
        tab
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One DevTools connection (the browser's or a tab's).
struct Cdp {
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Cdp {
    fn connect(url: &str) -> Cdp {
        let (socket, _) = tungstenite::connect(url).unwrap();
        if let MaybeTlsStream::Plain(stream) = socket.get_ref() {
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
        }
        Cdp { socket, next: 0 }
    }

    /// Call `method`; its result (events on the way are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let message = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::text(message.to_string()))
            .unwrap();
        loop {
            let message = self.socket.read().unwrap();
            let Message::Text(text) = message else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str()).unwrap();
            if value["id"] == id {
                if let Some(error) = value.get("error") {
                    panic!("{method} failed: {error}");
                }
                return value["result"].clone();
            }
        }
    }

    /// The value of the JavaScript expression `expression`.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        if let Some(thrown) = result.get("exceptionDetails") {
            panic!("{expression} threw: {thrown}");
        }
        result["result"]["value"].clone()
    }

    /// Wait until `expression` is true (a page still loading, whose body
    /// is not there yet, counts as not yet).
    fn wait(&mut self, what: &str, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let guarded = format!("(() => {{ try {{ return ({expression}) === true; }} catch (e) {{ return false; }} }})()");
        loop {
            if self.eval(&guarded) == json!(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {what}; its text: {}",
                self.eval("document.body ? document.body.innerText : ''")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A screenshot as PNG bytes, checked: a PNG of the screen's size.
    fn screenshot(&mut self, name: &str) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.len() > 1000, "{name}: {} bytes", png.len());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a PNG");
        assert_eq!(&png[12..16], b"IHDR");
        let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!((width, height), (WIDTH, HEIGHT), "{name}");
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("web-{name}.png"));
        std::fs::write(&kept, &png).unwrap();
        let _ = writeln!(std::io::stderr(), "screenshot: {}", kept.display());
        png
    }

    /// A real mouse click in the middle of the element `selector` finds.
    fn click(&mut self, selector: &str) {
        let rect = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        let (x, y) = (rect[0].as_f64().unwrap(), rect[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }
}

#[test]
fn a_click_in_a_browser_answers_and_a_second_tab_sees_the_question_go() {
    let Some(program) = chromium() else {
        return;
    };
    let Some((url, broker)) = store("web_browser") else {
        return;
    };
    let alice = token(&url, "alice", Role::Approver);
    let page = Page::start(&url);
    let home = format!("{}/", page.origin());
    let mut browser = Browser::start(&program);

    // Log in through the form, as a person would.
    let mut first = browser.tab(&home);
    first.wait(
        "the login form",
        "!!document.querySelector('input[name=token]')",
    );
    first.eval(&format!(
        "document.getElementById('token').value = {alice:?}; true"
    ));
    first.click("button[type=submit]");
    first.wait(
        "the empty list",
        "document.getElementById('count') !== null && /0 open questions/.test(document.body.innerText)",
    );
    let empty = first.screenshot("empty");

    let title = "deploy <img src=x onerror=\"window.pwned=1\">";
    let id = ask(&url, broker, request(1, title, "rm -rf build"));
    let shows = format!("document.body.innerText.includes({title:?})");
    first.wait("the question", &shows);
    // The second tab shares the login (the same browser's cookie).
    let mut second = browser.tab(&home);
    second.wait("the question in the second tab", &shows);
    // The agent's markup is text: no image was made, nothing ran.
    assert_eq!(
        first.eval("document.querySelectorAll('#questions img').length"),
        json!(0)
    );
    assert_eq!(first.eval("window.pwned === undefined"), json!(true));
    let text = first.eval("document.body.innerText").to_string();
    for piece in [
        "laptop-7",
        "main/agent/a1",
        "sub-session of main",
        "not read-only",
        "rm -rf build",
    ] {
        assert!(text.contains(piece), "{piece} not in {text}");
    }
    let asked = first.screenshot("question");
    assert_ne!(
        empty, asked,
        "the screenshot did not change when the question came"
    );

    first.click(&format!("section[data-qid='{id}'] button.once"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let question = stored(&url, id);
        if question.state != QuestionState::Open {
            break question;
        }
        assert!(Instant::now() < deadline, "the click wrote no answer");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answered.state, QuestionState::Answered);
    assert_eq!(
        answered.answered_by.as_deref(),
        Some("token alice (approver) on the approval page")
    );
    assert_eq!(
        answered.answer,
        Some(json!({"type": "permission_response", "permissionID": "per_1", "response": "once"}))
    );
    let gone = format!("!document.body.innerText.includes({title:?})");
    second.wait("the question gone from the second tab", &gone);
    first.wait("the question gone from the first tab", &gone);
    second.wait(
        "no open question",
        "/0 open questions/.test(document.body.innerText)",
    );
    let after = second.screenshot("answered");
    assert_ne!(asked, after);
}
