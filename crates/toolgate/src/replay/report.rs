//! What `toolgate replay --summary`, `--check` and `--compare` report,
//! gathered from the frames a replay writes. Every text from a recording
//! is shown as [`crate::display::shown`] escapes it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::Value;
use toolgate_protocol::ServerFrame;

use super::event::Frame;
use super::record::CallKey;
use crate::display::shown;

/// A call as the recording made it: its tool and what it touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallInfo {
    /// The tool, as the agent named it.
    pub tool: String,
    /// The command, path, URL or pattern; empty when the input has none.
    pub subject: String,
}

/// The call a `tool_call` frame makes: its session and id (the session
/// `main` when it names none), tool and subject; `None` without a `callID`.
pub fn call_of(frame: &Frame) -> Option<(CallKey, CallInfo)> {
    // A recorded line was kept whole: its tool and input are read here.
    let parsed: Value;
    let frame = match frame {
        Frame::Line { line, .. } => {
            parsed = serde_json::from_str(line).unwrap_or(Value::Null);
            &parsed
        }
        Frame::Built(value) => value,
    };
    let text = |field: &str| frame.get(field).and_then(Value::as_str);
    let (Some(call), tool) = (text("callID"), text("tool").unwrap_or("")) else {
        return None;
    };
    let session = text("sessionID").unwrap_or(toolgate_protocol::DEFAULT_SESSION);
    Some((
        (session.to_string(), call.to_string()),
        CallInfo {
            tool: tool.to_string(),
            subject: subject(frame.get("input")),
        },
    ))
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

/// What a frame the replay wrote says of its call: the first answer it
/// would be (a question asks, a decision decides), and for a decision, the
/// final one.
fn answer_of(frame: &ServerFrame) -> Option<(CallKey, First, Option<Last>)> {
    match frame {
        ServerFrame::PermissionRequest(request) => {
            let key = (request.session_id.clone(), request.call_id.clone());
            let reason = request
                .metadata
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Some((
                key,
                First {
                    answer: "ask",
                    source: "ask",
                    reason,
                    rule: None,
                },
                None,
            ))
        }
        ServerFrame::Decision(decision) => {
            let key = (decision.session_id.clone(), decision.call_id.clone());
            let first = First {
                answer: decision.decision.as_str(),
                source: decision.source.as_str(),
                reason: decision.reason.clone(),
                rule: decision.rule.as_ref().map(|rule| {
                    format!(
                        "`{}: {}` {} ({})",
                        rule.permission, rule.pattern, rule.action, rule.origin
                    )
                }),
            };
            let last = Last {
                verdict: decision.decision.as_str(),
                source: decision.source.as_str(),
                reason: decision.reason.clone(),
            };
            Some((key, first, Some(last)))
        }
        _ => None,
    }
}

/// How many lines a call decided by the replay waits for its recorded
/// decision (`--check`) before it is let go as having none.
pub const RECORDED_AHEAD: u64 = 4096;

/// A call being reported on: what it was, and what each replay and the
/// recording said of it so far.
#[derive(Debug, Default)]
struct Call {
    info: Option<CallInfo>,
    /// The positions of its `tool_call` frames among all the calls fed
    /// (`--check` lists differences in the recording's order).
    seqs: Vec<u64>,
    first: [Option<First>; 2],
    last: [Option<Last>; 2],
    recorded: Option<(String, String)>,
}

/// The reports gathered as the replays run, call by call: a call is kept
/// until every replay decided it (and, for `--check`, its recorded decision
/// was read, or [`RECORDED_AHEAD`] lines passed), then counted and let go.
#[derive(Debug, Default)]
pub struct Tally {
    /// How many replays run side by side (2 for `--compare`).
    sides: usize,
    check: bool,
    calls: HashMap<CallKey, Call>,
    /// Calls fed so far.
    seq: u64,
    /// Lines read so far.
    lines: u64,
    /// Calls decided without a recorded decision yet, and when.
    waiting: VecDeque<(u64, CallKey)>,
    /// The file (or session) being replayed, for `--check`.
    name: String,
    /// This file's calls answered differently under `--compare`.
    changed: Vec<(CallKey, String, String)>,
    /// `--summary`.
    pub summary: Summary,
    /// `--check`: each difference, with the position of its call.
    pub differences: Vec<(u64, String)>,
    /// `--compare`.
    pub comparison: Comparison,
}

impl Tally {
    /// A tally of `sides` replays side by side, with `--check`'s
    /// differences when `check`.
    pub fn new(sides: usize, check: bool) -> Tally {
        Tally {
            sides: sides.clamp(1, 2),
            check,
            ..Tally::default()
        }
    }

    /// A file (or a Claude Code session's files) begins.
    pub fn begin(&mut self, name: &str) {
        self.name = name.to_string();
        if self.sides == 1 {
            self.summary.files += 1;
        }
    }

    /// One line read.
    pub fn line(&mut self) {
        self.lines += 1;
        while let Some((at, _)) = self.waiting.front() {
            if at + RECORDED_AHEAD > self.lines {
                break;
            }
            if let Some((_, key)) = self.waiting.pop_front() {
                if let Some(call) = self.calls.remove(&key) {
                    self.count(key, call);
                }
            }
        }
    }

    /// A `tool_call` frame fed to the replays.
    pub fn fed(&mut self, frame: &Frame) {
        let Some((key, info)) = call_of(frame) else {
            return;
        };
        let seq = self.seq;
        self.seq += 1;
        let call = self.calls.entry(key).or_default();
        call.info = Some(info);
        if self.check {
            call.seqs.push(seq);
        }
    }

    /// The decision the recording holds for a call, with whether the call
    /// is still to be fed (else one not being reported on is dropped).
    pub fn recorded(&mut self, key: CallKey, verdict: String, reason: String, ahead: bool) {
        if !self.check {
            return;
        }
        if !ahead && !self.calls.contains_key(&key) {
            return;
        }
        self.calls.entry(key.clone()).or_default().recorded = Some((verdict, reason));
        self.settle(key);
    }

    /// A frame replay `side` wrote.
    pub fn see(&mut self, side: usize, frame: &ServerFrame) {
        if side >= self.sides {
            return;
        }
        let Some((key, first, last)) = answer_of(frame) else {
            return;
        };
        let call = self.calls.entry(key.clone()).or_default();
        call.first[side].get_or_insert(first);
        if let Some(last) = last {
            call.last[side] = Some(last);
            self.settle(key);
        }
    }

    /// Count a call that has all it waits for.
    fn settle(&mut self, key: CallKey) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        if call.last[..self.sides].iter().any(Option::is_none) {
            return;
        }
        if self.check && call.recorded.is_none() && !call.seqs.is_empty() {
            self.waiting.push_back((self.lines, key));
            return;
        }
        if let Some(call) = self.calls.remove(&key) {
            self.count(key, call);
        }
    }

    /// The end of a file: every call left is counted.
    pub fn end(&mut self) {
        let mut left: Vec<(CallKey, Call)> = self.calls.drain().collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        self.waiting.clear();
        for (key, call) in left {
            self.count(key, call);
        }
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, group, line) in changed {
            self.comparison.groups.entry(group).or_default().push(line);
        }
    }

    /// The differences `--check` found, in the recordings' order.
    pub fn differences(&mut self) -> Vec<String> {
        let mut differences = std::mem::take(&mut self.differences);
        differences.sort_by_key(|(seq, _)| *seq);
        differences.into_iter().map(|(_, line)| line).collect()
    }

    fn count(&mut self, key: CallKey, call: Call) {
        let info = call.info.clone().unwrap_or_default();
        if self.sides == 2 {
            self.compare(key, &info, &call);
            return;
        }
        if let Some(first) = &call.first[0] {
            self.summary.add(&info, first, call.last[0].as_ref());
        }
        if self.check {
            self.check(&key, &info, &call);
        }
    }

    fn check(&mut self, key: &CallKey, info: &CallInfo, call: &Call) {
        let Some((recorded, why)) = &call.recorded else {
            return;
        };
        for seq in &call.seqs {
            let line = match &call.last[0] {
                Some(last) if last.verdict == recorded => continue,
                Some(last) => format!(
                    "{}: {} {} {} `{}`: recorded {recorded} ({}), replayed {} ({}: {})",
                    shown(&self.name),
                    shown(&key.0),
                    shown(&key.1),
                    shown(&info.tool),
                    shown(&info.subject),
                    shown(why),
                    last.verdict,
                    last.source,
                    shown(&last.reason)
                ),
                None => format!(
                    "{}: {} {} {} `{}`: recorded {recorded} ({}), replayed no decision",
                    shown(&self.name),
                    shown(&key.0),
                    shown(&key.1),
                    shown(&info.tool),
                    shown(&info.subject),
                    shown(why)
                ),
            };
            self.differences.push((*seq, line));
        }
    }

    fn compare(&mut self, key: CallKey, info: &CallInfo, call: &Call) {
        let (first_a, first_b) = (&call.first[0], &call.first[1]);
        if first_a.is_none() && first_b.is_none() {
            return;
        }
        self.comparison.calls += 1;
        let (Some(first_a), Some(first_b)) = (first_a, first_b) else {
            return;
        };
        if first_a.answer == first_b.answer {
            return;
        }
        // Group by what decided under B (the change), else under A.
        let group = if first_b.rule.is_some() || first_a.rule.is_none() {
            decider(first_b)
        } else {
            decider(first_a)
        };
        let line = format!(
            "{} → {}  {} `{}` ({} {})",
            first_a.answer,
            first_b.answer,
            shown(&info.tool),
            shown(&info.subject),
            shown(&key.0),
            shown(&key.1)
        );
        self.changed.push((key, shown(&group).into_owned(), line));
    }
}

/// How many subjects `--summary` counts one by one (for "most often
/// asked" and "most often denied"); the rest are counted together.
pub const SUBJECTS: usize = 10_000;

/// Counts by subject, at most [`SUBJECTS`] of them one by one.
#[derive(Debug, Default)]
struct Subjects {
    counts: HashMap<String, usize>,
    /// Calls about subjects beyond the first [`SUBJECTS`].
    other: usize,
}

impl Subjects {
    fn add(&mut self, what: &str) {
        if let Some(count) = self.counts.get_mut(what) {
            *count += 1;
        } else if self.counts.len() < SUBJECTS {
            self.counts.insert(what.to_string(), 1);
        } else {
            self.other += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.counts.is_empty()
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
    asked: Subjects,
    denied: Subjects,
}

impl Summary {
    /// Count one call: what it was, the policy's first answer, and its
    /// decision.
    fn add(&mut self, info: &CallInfo, first: &First, last: Option<&Last>) {
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
            self.asked.add(&what);
            if let Some(last) = last {
                *self.ended.entry((last.verdict, last.source)).or_default() += 1;
            }
        }
        if last.is_some_and(|last| last.verdict == "deny") {
            self.denied.add(&what);
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
            let mut top: Vec<(&String, &usize)> = counts.counts.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (subject, count) in top.into_iter().take(10) {
                out.push_str(&format!("{count:>8}  {subject}\n"));
            }
            if counts.other > 0 {
                out.push_str(&format!(
                    "{:>8}  (calls about other subjects: only the first {SUBJECTS} are counted one by one)\n",
                    counts.other
                ));
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
