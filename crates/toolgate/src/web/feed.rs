//! The open questions every page shows, kept by one task that follows the
//! store: it `LISTEN`s on `toolgate_questions`, reads what changed since
//! the last revision it saw (`questions_since`) when woken, reads the whole
//! list of open questions again every few seconds (a notification can be
//! missed, a lease can lapse without one) and after a lost connection, and
//! publishes each new list on a `watch` channel every open page follows.
//!
//! Each question is rendered once (per revision) into the JSON the page
//! reads: every text an agent wrote has gone through
//! [`crate::display::shown`], and the JSON text has `<`, `>` and `&`
//! written as `\u003c`, `\u003e` and `\u0026`, so nothing the server sends
//! holds agent text an HTML parser could take for markup. The page puts
//! each text in with `textContent`, never as HTML.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::watch;
use toolgate_protocol::PermissionRequest;

use crate::approver::view::{self, FileRead, Tone};
use crate::clock::epoch_ms;
use crate::display::shown;
use crate::fleet::questions::{BrokerId, Question, QuestionId, QuestionState};
use crate::fleet::{Channel, Store, StoreError, Wake};

/// How often the whole list is read again, whatever the notifications say.
pub const FULL_READ: Duration = Duration::from_secs(5);

/// The longest wait before connecting again after the store was lost.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What every page shows: the open questions as the JSON text of one
/// server-sent event's data (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `{"questions":[…],"trouble":null|"…"}`, escaped for HTML.
    pub json: String,
}

impl Snapshot {
    fn new(questions: &[Value], trouble: Option<&str>) -> Snapshot {
        let value = json!({"questions": questions, "trouble": trouble});
        Snapshot {
            json: escaped_json(&value),
        }
    }
}

/// The feed's first snapshot, before the store was read.
pub fn empty() -> Snapshot {
    Snapshot::new(&[], Some("reading the store…"))
}

/// `value` as JSON text with `<`, `>` and `&` escaped (`\u003c`, …): still
/// the same JSON, and no markup to an HTML parser. (They can only stand
/// inside strings, where the escape means the same character.)
pub fn escaped_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            ch => out.push(ch),
        }
    }
    out
}

/// Follow the store at `url` for ever, publishing on `publish`.
pub async fn run(url: String, publish: watch::Sender<Arc<Snapshot>>) {
    let mut backoff = Duration::from_millis(250);
    let mut rendered = Rendered::default();
    loop {
        let result = follow(&url, &publish, &mut rendered, &mut backoff).await;
        if let Err(err) = result {
            tracing::warn!("the approval page lost the store: {err}");
            let trouble = format!("the store cannot be read: {err}");
            publish.send_replace(Arc::new(Snapshot::new(&[], Some(&trouble))));
        }
        if publish.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The questions rendered so far, by id, with the revision each was
/// rendered at, and the brokers' hosts.
#[derive(Default)]
struct Rendered {
    open: HashMap<QuestionId, (i64, SystemTime, Value)>,
    hosts: HashMap<BrokerId, String>,
}

async fn follow(
    url: &str,
    publish: &watch::Sender<Arc<Snapshot>>,
    rendered: &mut Rendered,
    backoff: &mut Duration,
) -> Result<(), StoreError> {
    let mut store = Store::connect(url).await?;
    store.check_schema().await?;
    store.listen(&[Channel::Questions]).await?;
    let wakeups = store.wakeups();
    let mut revision = full_read(&mut store, rendered).await?;
    *backoff = Duration::from_millis(250);
    publish_list(publish, rendered);
    let mut full = tokio::time::interval(FULL_READ);
    full.tick().await;
    loop {
        tokio::select! {
            wake = wakeups.wait() => match wake {
                Wake::Closed => return Ok(()),
                Wake::Changed(raised) if raised.has(Channel::Questions) => {
                    for question in store.questions_since(revision, &[]).await? {
                        revision = revision.max(question.revision);
                        if question.state == QuestionState::Open {
                            add(&mut store, rendered, &question).await?;
                        } else {
                            rendered.open.remove(&question.id);
                        }
                    }
                }
                Wake::Changed(_) => continue,
            },
            _ = full.tick() => {
                revision = revision.max(full_read(&mut store, rendered).await?);
            }
        }
        if publish.is_closed() {
            return Ok(());
        }
        publish_list(publish, rendered);
    }
}

/// Read every open question again; the highest revision seen.
async fn full_read(store: &mut Store, rendered: &mut Rendered) -> Result<i64, StoreError> {
    let questions = store.open_questions().await?;
    let mut revision = 0;
    let ids: std::collections::HashSet<QuestionId> = questions.iter().map(|q| q.id).collect();
    rendered.open.retain(|id, _| ids.contains(id));
    for question in &questions {
        revision = revision.max(question.revision);
        add(store, rendered, question).await?;
    }
    Ok(revision)
}

/// Render `question` unless it is rendered at its revision already.
async fn add(
    store: &mut Store,
    rendered: &mut Rendered,
    question: &Question,
) -> Result<(), StoreError> {
    if rendered
        .open
        .get(&question.id)
        .is_some_and(|(revision, _, _)| *revision == question.revision)
    {
        return Ok(());
    }
    if !rendered.hosts.contains_key(&question.broker) {
        for broker in store.brokers().await? {
            rendered.hosts.insert(broker.id, broker.host);
        }
    }
    let host = rendered
        .hosts
        .get(&question.broker)
        .map_or("(a broker that left)", String::as_str);
    let value = render(question, host);
    rendered
        .open
        .insert(question.id, (question.revision, question.created_at, value));
    Ok(())
}

fn publish_list(publish: &watch::Sender<Arc<Snapshot>>, rendered: &Rendered) {
    let mut open: Vec<&(i64, SystemTime, Value)> = rendered.open.values().collect();
    open.sort_by_key(|(_, created, _)| *created);
    let questions: Vec<Value> = open
        .into_iter()
        .map(|(_, _, value)| value.clone())
        .collect();
    let snapshot = Snapshot::new(&questions, None);
    publish.send_if_modified(|current| {
        if **current == snapshot {
            false
        } else {
            *current = Arc::new(snapshot);
            true
        }
    });
}

/// The page's JSON for one open question.
pub fn render(question: &Question, host: &str) -> Value {
    let text = |key: &str| {
        question
            .request
            .get(key)
            .and_then(Value::as_str)
            .map(|text| shown(text).into_owned())
    };
    let parsed: Option<PermissionRequest> = serde_json::from_value(question.request.clone()).ok();
    let (lines, options, plan) = match &parsed {
        Some(request) => {
            let mut lines = view::about(request, None, &not_here);
            // The session, client, tool, title and reason lines come first;
            // the page shows them in the question's header instead.
            if let Some(first) = lines.iter().position(|line| line.tone == Tone::Heading) {
                lines.drain(..first);
            }
            let options: Vec<Vec<String>> = request
                .always_options
                .iter()
                .map(|option| option.iter().map(|p| shown(p).into_owned()).collect())
                .collect();
            (lines, options, request.kind.as_deref() == Some("plan"))
        }
        None => {
            let pretty = serde_json::to_string_pretty(&question.request).unwrap_or_default();
            let mut lines = vec![view::Line {
                tone: Tone::Heading,
                text: "The request as the broker stored it".to_string(),
            }];
            lines.extend(crate::display::shown_lines(&pretty).map(|text| view::Line {
                tone: Tone::Plain,
                text,
            }));
            (lines, Vec::new(), false)
        }
    };
    let lines: Vec<Value> = lines
        .into_iter()
        .map(|line| json!([tone(line.tone), line.text]))
        .collect();
    let reason = question
        .request
        .get("metadata")
        .and_then(|metadata| metadata.get("reason"))
        .and_then(Value::as_str)
        .map(|text| shown(text).into_owned());
    json!({
        "id": question.id.to_string(),
        "host": shown(host),
        "project": shown(&question.project),
        "session": shown(&question.session_id),
        "parent": text("parentID"),
        "tool": text("permission").or_else(|| text("tool")),
        "toolName": text("toolName"),
        "client": question
            .request
            .get("metadata")
            .and_then(|metadata| metadata.get("client"))
            .and_then(Value::as_str)
            .map(|text| shown(text).into_owned()),
        "title": text("title"),
        "reason": reason,
        "lines": lines,
        "options": options,
        "plan": plan,
        "asked": epoch_ms(question.created_at),
    })
}

/// The page's server does not read the agent's files (they are on the
/// broker's host): a write is shown as its new content.
fn not_here(_: &Path) -> FileRead {
    FileRead::Unreadable("the file is on the broker's host".to_string())
}

fn tone(tone: Tone) -> &'static str {
    match tone {
        Tone::Plain => "plain",
        Tone::Heading => "heading",
        Tone::Added => "added",
        Tone::Removed => "removed",
        Tone::Dim => "dim",
        Tone::Warn => "warn",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn json_holds_no_markup() {
        let value = json!({"a": "</script><b onmouseover=x>&amp;", "b": "\u{1b}[2J"});
        let text = escaped_json(&value);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
