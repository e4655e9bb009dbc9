//! The web approval page (feature `fleet`): the open questions of every
//! broker sharing a store, live in a browser, answered with an approver
//! token. `toolgate web --http HOST:PORT --store URL` serves it alone;
//! see docs/web.md.
//!
//! - [`auth`]: logins (a cookie, a CSRF token), the `Origin` check, forms;
//! - [`feed`]: one task following the store's questions, publishing the
//!   list every page shows;
//! - [`tls`]: the server configuration of `--tls-cert` and `--tls-key`;
//! - this file: the HTTP/1.1 server (hyper), its routes and headers.
//!
//! Routes: `GET /` (the log-in form, or the questions once logged in),
//! `POST /login`, `POST /logout`, `GET /events` (server-sent events: the
//! whole list on connecting and after each change), `POST /answer`,
//! `GET /app.js`, `GET /style.css`. The HTML, CSS and script are in the
//! binary (`include_str!`): the page loads nothing from elsewhere.

pub mod auth;
pub mod feed;
pub mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Mutex, MutexGuard};

use crate::fleet::questions::{QuestionId, QuestionState, Settled};
use crate::fleet::tokens::{Role, TokenRefused};
use crate::fleet::{Store, StoreError};
use auth::{Login, Logins};
use feed::Snapshot;

const LOGIN_HTML: &str = include_str!("assets/login.html");
const APP_HTML: &str = include_str!("assets/app.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The largest request body read (a form).
pub const MAX_BODY: usize = 64 * 1024;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an idle event stream gets a comment line, so proxies and
/// phones keep it open.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// The headers every response carries: no framing, no sniffing, a policy
/// that allows only this server's own script and style, and no referrer
/// sent elsewhere.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// What the page server failed at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// The address could not be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime could not be started.
    #[error("cannot start the page's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Accepting connections failed for good.
    #[error("the page's listener failed: {0}")]
    Accept(#[source] std::io::Error),
}

/// How the page is served.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store's URL.
    pub store: String,
    /// HTTPS with this configuration (cookies are then `Secure` and origins
    /// `https://`); `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Config {
    /// Whether the page is served over HTTPS.
    pub fn secure(&self) -> bool {
        self.tls.is_some()
    }
}

/// How long a client may take over the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The page's state, shared by every connection.
struct App {
    config: Config,
    logins: Logins,
    /// The connection answers and logins use (the feed has its own).
    store: Mutex<Option<Store>>,
    feed: watch::Receiver<Arc<Snapshot>>,
}

/// Bind `addr` (`HOST:PORT`; port 0 takes a free one).
pub async fn bind(addr: &str) -> Result<TcpListener, WebError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| WebError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serve the page on `listener` until the listener fails. Starts the
/// feed's task; must run on a tokio runtime.
pub async fn serve(listener: TcpListener, config: Config) -> Result<(), WebError> {
    let (publish, feed) = watch::channel(Arc::new(feed::empty()));
    tokio::spawn(feed::run(config.store.clone(), publish));
    let app = Arc::new(App {
        config,
        logins: Logins::default(),
        store: Mutex::new(None),
        feed,
    });
    let mut failures = 0u32;
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(accepted) => {
                failures = 0;
                accepted
            }
            Err(err) => {
                // Out of descriptors, say: wait and go on; many in a row: give up.
                failures += 1;
                if failures > 100 {
                    return Err(WebError::Accept(err));
                }
                tracing::warn!("the approval page could not accept a connection: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            match app.config.tls.clone() {
                None => connection(app, stream).await,
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => connection(app, stream).await,
                        Ok(Err(err)) => tracing::debug!("a TLS handshake failed: {err}"),
                        Err(_) => tracing::debug!("a TLS handshake took too long"),
                    }
                }
            }
        });
    }
}

/// Serve one connection (plain or TLS) until it closes.
async fn connection<S>(app: Arc<App>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    {
        {
            let service = hyper::service::service_fn(move |request| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(app.handle(request).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(err) = served {
                tracing::debug!("an approval page connection ended: {err}");
            }
        }
    }
}

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// A response with the security headers, `Cache-Control: no-store`
/// unless `cache` says otherwise.
fn reply(status: StatusCode, kind: &str, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(kind) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A JSON answer to the page's script: `{"message": …}` and more.
fn json_reply(status: StatusCode, value: &Value) -> Reply {
    reply(
        status,
        "application/json; charset=utf-8",
        feed::escaped_json(value),
    )
}

fn message(status: StatusCode, text: &str) -> Reply {
    json_reply(status, &json!({"ok": status.is_success(), "message": text}))
}

fn see_other(location: &'static str, cookie: Option<String>) -> Reply {
    let mut response = reply(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(location));
    if let Some(cookie) = cookie.and_then(|cookie| HeaderValue::from_str(&cookie).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `text` with `&`, `<`, `>`, `"` and `'` written as entities.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            ch => out.push(ch),
        }
    }
    out
}

fn login_page(status: StatusCode, error: &str) -> Reply {
    reply(
        status,
        "text/html; charset=utf-8",
        LOGIN_HTML.replace("{{error}}", &html_escape(error)),
    )
}

fn app_page(login: &Login) -> Reply {
    let page = APP_HTML
        .replace("{{csrf}}", &html_escape(&login.csrf))
        .replace("{{role}}", html_escape(login.role.as_str()).as_str())
        .replace(
            "{{name}}",
            &html_escape(&crate::display::shown(&login.name)),
        );
    reply(StatusCode::OK, "text/html; charset=utf-8", page)
}

fn header_text(request: &Request<Incoming>, name: header::HeaderName) -> Option<&str> {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
}

impl App {
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Reply {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        match (method, path.as_str()) {
            (Method::GET, "/") => match self.login_of(&request) {
                Some((_, login)) => app_page(&login),
                None => login_page(StatusCode::OK, ""),
            },
            (Method::GET, "/app.js") => {
                reply(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS)
            }
            (Method::GET, "/style.css") => {
                reply(StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS)
            }
            (Method::GET, "/events") => match self.login_of(&request) {
                Some((id, login)) => self.events(id, login),
                None => message(StatusCode::UNAUTHORIZED, "log in first"),
            },
            (Method::POST, "/login") => self.login(request).await,
            (Method::POST, "/logout") => self.logout(request).await,
            (Method::POST, "/answer") => self.answer(request).await,
            (_, "/" | "/app.js" | "/style.css" | "/events" | "/login" | "/logout" | "/answer") => {
                let mut response = message(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
                let allow = if matches!(path.as_str(), "/login" | "/logout" | "/answer") {
                    "POST"
                } else {
                    "GET"
                };
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
                response
            }
            _ => message(StatusCode::NOT_FOUND, "no such page"),
        }
    }

    /// The login the request's cookie names, with its cookie id.
    fn login_of(&self, request: &Request<Incoming>) -> Option<(String, Login)> {
        let cookies = header_text(request, header::COOKIE)?;
        let id = auth::cookie(cookies, auth::cookie_name(self.config.secure()))?;
        let login = self.logins.get(id)?;
        Some((id.to_string(), login))
    }

    /// Whether a request that changes something comes from the page.
    fn sent_by_page(&self, request: &Request<Incoming>) -> bool {
        auth::same_origin(
            self.config.secure(),
            header_text(request, header::HOST),
            header_text(request, header::ORIGIN),
            header_text(request, header::REFERER),
        )
    }

    /// The store connection for requests, connecting (again) if needed.
    async fn store(&self) -> Result<MutexGuard<'_, Option<Store>>, StoreError> {
        let mut guard = self.store.lock().await;
        if guard.as_ref().is_none_or(Store::is_closed) {
            *guard = None;
            *guard = Some(Store::connect(&self.config.store).await?);
        }
        Ok(guard)
    }

    async fn login(&self, request: Request<Incoming>) -> Reply {
        if !self.sent_by_page(&request) {
            return login_page(
                StatusCode::FORBIDDEN,
                "refused: the request did not come from this page",
            );
        }
        let Some(fields) = read_form(request).await else {
            return login_page(StatusCode::BAD_REQUEST, "the form could not be read");
        };
        let token = fields.get("token").map_or("", |token| token.trim());
        let verified = match self.store().await {
            Ok(mut guard) => match guard.as_mut() {
                Some(store) => store.verify(token).await,
                None => {
                    return login_page(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the store cannot be reached",
                    )
                }
            },
            Err(err) => Err(TokenRefused::Unverifiable(err)),
        };
        let identity = match verified {
            Ok(identity) => identity,
            Err(TokenRefused::Unverifiable(err)) => {
                tracing::warn!("the approval page could not check a token: {err}");
                return login_page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the token could not be checked: the store cannot be reached",
                );
            }
            Err(refused) => {
                return login_page(StatusCode::FORBIDDEN, &format!("token refused: {refused}"))
            }
        };
        if identity.role == Role::Agent {
            return login_page(
                StatusCode::FORBIDDEN,
                "an agent token cannot log in here: use an approver's (or an observer's, to watch)",
            );
        }
        match self.logins.add(&identity, token) {
            Ok((id, login)) => {
                let life = login.until.saturating_duration_since(Instant::now());
                see_other("/", Some(auth::set_cookie(self.config.secure(), &id, life)))
            }
            Err(err) => {
                tracing::warn!("the approval page could not make a login: {err}");
                login_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no random number for the login",
                )
            }
        }
    }

    async fn logout(&self, request: Request<Incoming>) -> Reply {
        if !self.sent_by_page(&request) {
            return message(
                StatusCode::FORBIDDEN,
                "refused: the request did not come from this page",
            );
        }
        let Some((id, login)) = self.login_of(&request) else {
            return see_other("/", Some(auth::clear_cookie(self.config.secure())));
        };
        let header = header_text(&request, header::HeaderName::from_static("x-csrf-token"))
            .map(str::to_string);
        let fields = read_form(request).await.unwrap_or_default();
        let given = header
            .or_else(|| fields.get("csrf").cloned())
            .unwrap_or_default();
        if !auth::same_secret(&given, &login.csrf) {
            return message(
                StatusCode::FORBIDDEN,
                "refused: the form's CSRF token is missing or wrong",
            );
        }
        self.logins.remove(&id);
        see_other("/", Some(auth::clear_cookie(self.config.secure())))
    }

    /// `GET /events`: the list now, then again after each change; a
    /// comment line every [`KEEPALIVE`]; `logout` when the login ends.
    fn events(self: &Arc<Self>, id: String, login: Login) -> Reply {
        let (send, receive) = mpsc::channel::<Bytes>(4);
        let mut feed = self.feed.clone();
        let app = self.clone();
        tokio::spawn(async move {
            let first = feed.borrow_and_update().clone();
            let opening = format!("retry: 2000\n\n{}", event("questions", &first.json));
            if send.send(Bytes::from(opening)).await.is_err() {
                return;
            }
            let end = tokio::time::Instant::from_std(login.until);
            loop {
                let chunk = tokio::select! {
                    changed = feed.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let snapshot = feed.borrow_and_update().clone();
                        event("questions", &snapshot.json)
                    }
                    () = tokio::time::sleep(KEEPALIVE) => {
                        if app.logins.get(&id).is_none() {
                            let _ = send.send(Bytes::from(event("logout", "{}"))).await;
                            return;
                        }
                        ": keepalive\n\n".to_string()
                    }
                    () = tokio::time::sleep_until(end) => {
                        let _ = send.send(Bytes::from(event("logout", "{}"))).await;
                        return;
                    }
                };
                if send.send(Bytes::from(chunk)).await.is_err() {
                    return;
                }
            }
        });
        let mut response = Response::new(EventBody { receive }.boxed());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        for (name, value) in SECURITY_HEADERS {
            headers.insert(name, HeaderValue::from_static(value));
        }
        response
    }

    /// `POST /answer`: `id`, `choice` (`once`, `always`, `reject`), and
    /// `level` (the `alwaysOptions` entry), `lifetime` (seconds), `message`.
    async fn answer(&self, request: Request<Incoming>) -> Reply {
        let Some((_, login)) = self.login_of(&request) else {
            return message(StatusCode::UNAUTHORIZED, "log in first");
        };
        if !self.sent_by_page(&request) {
            return message(
                StatusCode::FORBIDDEN,
                "refused: the request did not come from this page",
            );
        }
        let header = header_text(&request, header::HeaderName::from_static("x-csrf-token"))
            .map(str::to_string);
        let Some(fields) = read_form(request).await else {
            return message(StatusCode::BAD_REQUEST, "the form could not be read");
        };
        let given = header
            .or_else(|| fields.get("csrf").cloned())
            .unwrap_or_default();
        if !auth::same_secret(&given, &login.csrf) {
            return message(
                StatusCode::FORBIDDEN,
                "refused: the form's CSRF token is missing or wrong",
            );
        }
        if !login.answers() {
            return message(
                StatusCode::FORBIDDEN,
                &format!("a {} token may watch but not answer", login.role.as_str()),
            );
        }
        let Some(id) = fields
            .get("id")
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .map(QuestionId::from_uuid)
        else {
            return message(StatusCode::BAD_REQUEST, "no question id");
        };
        let mut guard = match self.store().await {
            Ok(guard) => guard,
            Err(err) => return unavailable(&err),
        };
        let Some(store) = guard.as_mut() else {
            return message(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store cannot be reached",
            );
        };
        // The token again: a revoked or expired one stops answering now.
        match store.verify(&login.token).await {
            Ok(_) => {}
            Err(TokenRefused::Unverifiable(err)) => return unavailable(&err),
            Err(refused) => {
                return message(StatusCode::FORBIDDEN, &format!("token refused: {refused}"))
            }
        }
        let question = match store.question(id).await {
            Ok(Some(question)) => question,
            Ok(None) => return message(StatusCode::NOT_FOUND, "no such question"),
            Err(err) => return unavailable(&err),
        };
        if question.state != QuestionState::Open {
            return settled(&question);
        }
        let response = match response(&question.request, &fields) {
            Ok(response) => response,
            Err(why) => return message(StatusCode::BAD_REQUEST, &why),
        };
        // What an `always` grants, from the question's offers, written in
        // the answer's transaction (as a broker's answer is).
        // Signed as a remote connection's answers are: by the token.
        let by = format!("token {} ({}) on the approval page", login.name, login.role);
        let grants = match crate::fleet::link::answer_grants(&question, &response, &by) {
            Ok(grants) => grants,
            Err(why) => return message(StatusCode::BAD_REQUEST, &crate::display::shown(&why)),
        };
        match store.answer(id, &response, &by, &grants).await {
            Ok(Settled::First(_)) => message(StatusCode::OK, "answered"),
            Ok(Settled::Already(question)) => settled(&question),
            Ok(Settled::Unknown) => message(StatusCode::NOT_FOUND, "no such question"),
            Err(err) => unavailable(&err),
        }
    }
}

fn unavailable(err: &StoreError) -> Reply {
    tracing::warn!("the approval page could not use the store: {err}");
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store cannot be reached",
    )
}

/// The answer to a question settled already: who answered, or why it was
/// cancelled.
fn settled(question: &crate::fleet::questions::Question) -> Reply {
    let text = match (question.state, &question.answered_by, &question.cancelled) {
        (QuestionState::Answered, Some(by), _) => {
            format!("already answered by {}", crate::display::shown(by))
        }
        (QuestionState::Answered, None, _) => "already answered".to_string(),
        (_, _, Some(why)) => format!("already cancelled ({})", crate::display::shown(why)),
        _ => "already settled".to_string(),
    };
    message(StatusCode::CONFLICT, &text)
}

/// The `permission_response` a form makes for `request`, or why it cannot.
fn response(
    request: &Value,
    fields: &std::collections::HashMap<String, String>,
) -> Result<Value, String> {
    let permission_id = request
        .get("permissionID")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut answer = json!({"type": "permission_response", "permissionID": permission_id});
    let choice = fields.get("choice").map_or("", String::as_str);
    match choice {
        "once" => answer["response"] = json!("once"),
        "reject" => {
            answer["response"] = json!("reject");
            if let Some(text) = fields.get("message").filter(|text| !text.trim().is_empty()) {
                answer["message"] = json!(text);
            }
        }
        "always" => {
            answer["response"] = json!("always");
            let options = request
                .get("alwaysOptions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let plan = request.get("kind").and_then(Value::as_str) == Some("plan");
            if let Some(level) = fields.get("level").filter(|level| !level.is_empty()) {
                let level: usize = level
                    .parse()
                    .map_err(|_| format!("`level` is not a number: {level}"))?;
                if level >= options.len() {
                    return Err(format!("the question offers no `always` option {level}"));
                }
                // The widest is what a plain `always` grants.
                if level + 1 < options.len() {
                    answer["patterns"] = options[level].clone();
                }
            }
            if let Some(lifetime) = fields.get("lifetime").filter(|text| !text.is_empty()) {
                let seconds: u64 = lifetime
                    .parse()
                    .ok()
                    .filter(|s| (1..=toolgate_protocol::MAX_EXPIRES_IN).contains(s))
                    .ok_or_else(|| {
                        format!(
                            "`lifetime` must be whole seconds from 1 to {}",
                            toolgate_protocol::MAX_EXPIRES_IN
                        )
                    })?;
                if plan {
                    return Err("a plan approval's `always` has no lifetime".to_string());
                }
                answer["expiresIn"] = json!(seconds);
            }
        }
        other => {
            return Err(format!(
                "`choice` must be once, always or reject, not `{}`",
                crate::display::shown(other)
            ))
        }
    }
    Ok(answer)
}

/// The fields of a form body (at most [`MAX_BODY`] bytes), or `None`.
async fn read_form(
    request: Request<Incoming>,
) -> Option<std::collections::HashMap<String, String>> {
    let body = Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .ok()?
        .to_bytes();
    Some(auth::form(&body))
}

/// One server-sent event whose data is one line.
fn event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A response body fed by a channel: an event stream.
struct EventBody {
    receive: mpsc::Receiver<Bytes>,
}

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.receive
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// Serve the page on `addr` with its own runtime, until it fails: what
/// `toolgate web` runs. `bound` is told the address listened on.
pub fn run(addr: &str, config: Config, bound: impl FnOnce(SocketAddr)) -> Result<(), WebError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(WebError::Runtime)?;
    runtime.block_on(async move {
        let listener = bind(addr).await?;
        let local = listener.local_addr().map_err(|source| WebError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        bound(local);
        serve(listener, config).await
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn forms_make_permission_responses() {
        let request = json!({"permissionID": "per_1", "alwaysOptions": [["a"], ["b", "c"], ["*"]]});
        let plan = json!({"permissionID": "per_2", "kind": "plan", "alwaysOptions": []});
        let base = |extra: Value| {
            let mut answer = json!({"type": "permission_response"});
            for (key, value) in extra.as_object().unwrap() {
                answer[key] = value.clone();
            }
            answer
        };
        // (request, form, the answer or the start of the refusal)
        let table: Vec<(&Value, &str, Result<Value, &str>)> = vec![
            (
                &request,
                "choice=once",
                Ok(base(json!({"permissionID": "per_1", "response": "once"}))),
            ),
            (
                &request,
                "choice=reject&message=no+%3Cb%3E",
                Ok(base(
                    json!({"permissionID": "per_1", "response": "reject", "message": "no <b>"}),
                )),
            ),
            (
                &request,
                "choice=reject&message=+",
                Ok(base(json!({"permissionID": "per_1", "response": "reject"}))),
            ),
            (
                &request,
                "choice=always&level=2",
                Ok(base(json!({"permissionID": "per_1", "response": "always"}))),
            ),
            (
                &request,
                "choice=always&level=1&lifetime=1800",
                Ok(base(json!({"permissionID": "per_1", "response": "always",
                               "patterns": ["b", "c"], "expiresIn": 1800}))),
            ),
            (
                &request,
                "choice=always&level=3",
                Err("the question offers no `always` option 3"),
            ),
            (
                &request,
                "choice=always&level=x",
                Err("`level` is not a number"),
            ),
            (
                &request,
                "choice=always&lifetime=0",
                Err("`lifetime` must be whole seconds"),
            ),
            (
                &request,
                "choice=always&lifetime=315360001",
                Err("`lifetime` must be whole seconds"),
            ),
            (
                &request,
                "choice=maybe",
                Err("`choice` must be once, always or reject"),
            ),
            (&request, "", Err("`choice` must be once, always or reject")),
            (
                &plan,
                "choice=always",
                Ok(base(json!({"permissionID": "per_2", "response": "always"}))),
            ),
            (
                &plan,
                "choice=always&lifetime=60",
                Err("a plan approval's `always` has no lifetime"),
            ),
        ];
        for (request, body, expected) in table {
            let got = response(request, &auth::form(body.as_bytes()));
            match (got, expected) {
                (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{body}"),
                (Err(got), Err(start)) => assert!(got.starts_with(start), "{body}: {got}"),
                (got, expected) => panic!("{body}: {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            html_escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
