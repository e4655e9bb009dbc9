//! What `toolgate replay --summary`, `--check` and `--compare` report,
//! gathered from the frames a replay writes. Every text from a recording
//! is shown as [`crate::display::shown`] escapes it.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use toolgate_protocol::ServerFrame;

use super::record::{CallKey, Recording};
use crate::display::shown;

/// A call as the recording made it: its tool and what it touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallInfo {
    /// The tool, as the agent named it.
    pub tool: String,
    /// The command, path, URL or pattern; empty when the input has none.
    pub subject: String,
}

/// The calls of a recording, by session and call id.
pub fn calls(recording: &Recording) -> HashMap<CallKey, CallInfo> {
    let mut calls = HashMap::new();
    for (index, frame) in recording.frames.iter().enumerate() {
        if frame.get("type").and_then(Value::as_str) != Some("tool_call") {
            continue;
        }
        // A recorded line was kept whole: its tool and input are read here.
        let parsed: Value;
        let frame = match recording.raw_line(index) {
            Some(line) => {
                parsed = serde_json::from_str(line).unwrap_or(Value::Null);
                &parsed
            }
            None => frame,
        };
        let text = |field: &str| frame.get(field).and_then(Value::as_str);
        let (Some(call), tool) = (text("callID"), text("tool").unwrap_or("")) else {
            continue;
        };
        let session = text("sessionID").unwrap_or(toolgate_protocol::DEFAULT_SESSION);
        calls.insert(
            (session.to_string(), call.to_string()),
            CallInfo {
                tool: tool.to_string(),
                subject: subject(frame.get("input")),
            },
        );
    }
    calls
}

/// The subject of a tool's input, for a person: the first field of the
/// usual names that holds text (an argv is joined).
fn subject(input: Option<&Value>) -> String {
    let Some(input) = input else {
        return String::new();
    };
    for field in [
        "command",
        "cmd",
        "file_path",
        "filePath",
        "absolute_path",
        "path",
        "url",
        "pattern",
        "query",
        "subagent_type",
    ] {
        match input.get(field) {
            Some(Value::String(text)) => return text.clone(),
            Some(Value::Array(words)) => {
                return words
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            _ => {}
        }
    }
    String::new()
}

/// The policy's first answer to a call, before anyone answered a question:
/// `allow`, `deny`, or `ask`, with what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct First {
    /// `allow`, `ask` or `deny`.
    pub answer: &'static str,
    /// The decision's source (`mode`, `rule`, ...); for `ask`, `ask`.
    pub source: &'static str,
    /// The reason given.
    pub reason: String,
    /// The rule that decided, `permission: pattern` (origin), when one did.
    pub rule: Option<String>,
}

/// The final decision of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Last {
    /// `allow` or `deny`.
    pub verdict: &'static str,
    /// Its source.
    pub source: &'static str,
    /// Its reason.
    pub reason: String,
}

/// The answers a replay gave, gathered from its frames.
#[derive(Debug, Default)]
pub struct Answers {
    /// The first answer of each call.
    pub first: HashMap<CallKey, First>,
    /// The decision of each call.
    pub last: HashMap<CallKey, Last>,
}

impl Answers {
    /// Take in one frame the replay wrote.
    pub fn see(&mut self, frame: &ServerFrame) {
        match frame {
            ServerFrame::PermissionRequest(request) => {
                let key = (request.session_id.clone(), request.call_id.clone());
                let reason = request
                    .metadata
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                self.first.entry(key).or_insert(First {
                    answer: "ask",
                    source: "ask",
                    reason,
                    rule: None,
                });
            }
            ServerFrame::Decision(decision) => {
                let key = (decision.session_id.clone(), decision.call_id.clone());
                self.first.entry(key.clone()).or_insert_with(|| First {
                    answer: decision.decision.as_str(),
                    source: decision.source.as_str(),
                    reason: decision.reason.clone(),
                    rule: decision.rule.as_ref().map(|rule| {
                        format!(
                            "`{}: {}` {} ({})",
                            rule.permission, rule.pattern, rule.action, rule.origin
                        )
                    }),
                });
                self.last.insert(
                    key,
                    Last {
                        verdict: decision.decision.as_str(),
                        source: decision.source.as_str(),
                        reason: decision.reason.clone(),
                    },
                );
            }
            _ => {}
        }
    }
}

/// `--summary`: calls by tool, first answer and source, how the questions
/// ended, and the subjects most often asked about or denied.
#[derive(Debug, Default)]
pub struct Summary {
    files: usize,
    calls: usize,
    rows: BTreeMap<(String, &'static str, &'static str), usize>,
    ended: BTreeMap<(&'static str, &'static str), usize>,
    asked: HashMap<String, usize>,
    denied: HashMap<String, usize>,
}

impl Summary {
    /// Count one replayed file.
    pub fn add(&mut self, calls: &HashMap<CallKey, CallInfo>, answers: &Answers) {
        self.files += 1;
        for (key, first) in &answers.first {
            let info = calls.get(key).cloned().unwrap_or_default();
            self.calls += 1;
            *self
                .rows
                .entry((shown(&info.tool).into_owned(), first.answer, first.source))
                .or_default() += 1;
            let what = if info.subject.is_empty() {
                shown(&info.tool).into_owned()
            } else {
                format!("{}: {}", shown(&info.tool), shown(&info.subject))
            };
            if first.answer == "ask" {
                *self.asked.entry(what.clone()).or_default() += 1;
                if let Some(last) = answers.last.get(key) {
                    *self.ended.entry((last.verdict, last.source)).or_default() += 1;
                }
            }
            if answers
                .last
                .get(key)
                .is_some_and(|last| last.verdict == "deny")
            {
                *self.denied.entry(what).or_default() += 1;
            }
        }
    }

    /// The table, for a person.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} call{} in {} file{}\n\n",
            self.calls,
            plural(self.calls),
            self.files,
            plural(self.files)
        );
        let width = self
            .rows
            .keys()
            .map(|(tool, _, _)| tool.chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        out.push_str(&format!(
            "{:width$}  {:8}  {:8}  {:>8}\n",
            "tool", "answer", "source", "calls"
        ));
        for ((tool, answer, source), count) in &self.rows {
            out.push_str(&format!(
                "{tool:width$}  {answer:8}  {source:8}  {count:>8}\n"
            ));
        }
        if !self.ended.is_empty() {
            out.push_str("\nquestions ended:\n");
            for ((verdict, source), count) in &self.ended {
                out.push_str(&format!("{count:>8}  {verdict} ({source})\n"));
            }
        }
        for (title, counts) in [
            ("most often asked", &self.asked),
            ("most often denied", &self.denied),
        ] {
            if counts.is_empty() {
                continue;
            }
            out.push_str(&format!("\n{title}:\n"));
            let mut top: Vec<(&String, &usize)> = counts.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (subject, count) in top.into_iter().take(10) {
                out.push_str(&format!("{count:>8}  {subject}\n"));
            }
        }
        out
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `--check`: each call whose replayed decision differs from the one the
/// recording holds, one line each, in the recording's order.
pub fn differences(
    recording: &Recording,
    calls: &HashMap<CallKey, CallInfo>,
    answers: &Answers,
    name: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for frame in &recording.frames {
        if frame.get("type").and_then(Value::as_str) != Some("tool_call") {
            continue;
        }
        let text = |field: &str| frame.get(field).and_then(Value::as_str);
        let Some(call) = text("callID") else { continue };
        let key = (
            text("sessionID")
                .unwrap_or(toolgate_protocol::DEFAULT_SESSION)
                .to_string(),
            call.to_string(),
        );
        let Some((recorded, why)) = recording.decisions.get(&key) else {
            continue;
        };
        let info = calls.get(&key).cloned().unwrap_or_default();
        match answers.last.get(&key) {
            Some(last) if last.verdict == recorded => {}
            Some(last) => out.push(format!(
                "{}: {} {} {} `{}`: recorded {recorded} ({}), replayed {} ({}: {})",
                shown(name),
                shown(&key.0),
                shown(&key.1),
                shown(&info.tool),
                shown(&info.subject),
                shown(why),
                last.verdict,
                last.source,
                shown(&last.reason)
            )),
            None => out.push(format!(
                "{}: {} {} {} `{}`: recorded {recorded} ({}), replayed no decision",
                shown(name),
                shown(&key.0),
                shown(&key.1),
                shown(&info.tool),
                shown(&info.subject),
                shown(why)
            )),
        }
    }
    out
}

/// `--compare`: the calls whose first answer differs between two policies,
/// grouped by what decided (the rule, else the reason's opening).
#[derive(Debug, Default)]
pub struct Comparison {
    calls: usize,
    groups: BTreeMap<String, Vec<String>>,
}

/// What decided an answer, to group by: its rule, else its reason up to
/// the subject.
fn decider(first: &First) -> String {
    match &first.rule {
        Some(rule) => format!("rule {rule}"),
        None => {
            let reason = first.reason.as_str();
            let cut = [" before ", " allows ", " denies ", ": "]
                .iter()
                .filter_map(|word| reason.find(word).map(|at| at + word.len()))
                .min()
                .unwrap_or(reason.len());
            format!("{} ({})", reason[..cut].trim_end(), first.source)
        }
    }
}

impl Comparison {
    /// Compare one file's answers under policy A and policy B.
    pub fn add(&mut self, calls: &HashMap<CallKey, CallInfo>, a: &Answers, b: &Answers) {
        let mut keys: Vec<&CallKey> = a.first.keys().chain(b.first.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            self.calls += 1;
            let (Some(first_a), Some(first_b)) = (a.first.get(key), b.first.get(key)) else {
                continue;
            };
            if first_a.answer == first_b.answer {
                continue;
            }
            let info = calls.get(key).cloned().unwrap_or_default();
            // Group by what decided under B (the change), else under A.
            let group = if first_b.rule.is_some() || first_a.rule.is_none() {
                decider(first_b)
            } else {
                decider(first_a)
            };
            self.groups
                .entry(shown(&group).into_owned())
                .or_default()
                .push(format!(
                    "{} → {}  {} `{}` ({} {})",
                    first_a.answer,
                    first_b.answer,
                    shown(&info.tool),
                    shown(&info.subject),
                    shown(&key.0),
                    shown(&key.1)
                ));
        }
    }

    /// Whether any call was answered differently.
    pub fn differs(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The report, for a person.
    pub fn render(&self, a: &str, b: &str) -> String {
        let changed: usize = self.groups.values().map(Vec::len).sum();
        let mut out = format!(
            "{changed} of {} call{} answered differently under {} than under {}\n",
            self.calls,
            plural(self.calls),
            shown(b),
            shown(a)
        );
        for (group, lines) in &self.groups {
            out.push_str(&format!(
                "\n{group}: {} call{}\n",
                lines.len(),
                plural(lines.len())
            ));
            for line in lines {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }
}

/// What `--summary` says about the replay itself: the mode it ran in, the
/// project roots it took from the recordings, where the recorded outcomes
/// were read from (`(fields, text)`: the agent's structured permission
/// record, or the result's text), and how the questions were answered.
pub fn replay_notes(
    notes: &super::Notes,
    mode: Option<toolgate_policy::Mode>,
    roots: &[String],
    (fields, text): (usize, usize),
) -> String {
    let mut out = String::from("\nreplayed:\n");
    match mode {
        Some(mode) => out.push_str(&format!(
            "  mode: {mode} for every session (--mode); {} recorded mode{} set aside\n",
            notes.modes_ignored,
            plural(notes.modes_ignored)
        )),
        None => out.push_str("  mode: as recorded\n"),
    }
    for root in roots {
        out.push_str(&format!(
            "  project root: {} (the directory the agent recorded; --project-root to choose another)\n",
            shown(root)
        ));
    }
    if fields + text > 0 {
        out.push_str(&format!(
            "  outcomes read: {fields} from the agent's permission record, {text} from the result's text\n"
        ));
    }
    out.push_str(&format!(
        "  questions answered: {} with a recorded answer, {} with a recorded refusal, {} inferred (the recording says only that the call ran); {} left unanswered (the recording holds no answer: nobody was asked, or nothing says what became of the call)\n",
        notes.recorded, notes.refusals, notes.inferred, notes.unanswered
    ));
    out
}
