//! `toolgate approve`: a terminal approver attached to a broker's socket.
//!
//! It connects, says `hello` (role approver, client `approve`; with
//! `--all-projects`, `"projects": "all"`: every project's questions on the
//! broker's shared store, each naming its project and host), and lists
//! every `permission_request` it receives; the selected one is shown in
//! detail ([`super::view`]). Keys: `o` once, `a` always (with the
//! `alwaysOptions` entry chosen by ←/→ or tab), `t` the same for a while
//! only (`expiresIn`: 30 minutes, or what `T` chose: 5 minutes, 30
//! minutes, 2 hours, 8 hours, a day), `r` reject then an optional
//! message (Enter sends, Esc goes back), `j`/`k` or the arrows move, PgUp/PgDn
//! scroll the detail, `q` quits. A `permission_resolved` removes its question
//! (the reason is shown for a few seconds). When the connection ends the
//! approver says so and exits 1.
//!
//! The terminal is driven with crossterm (raw mode, keys, colours); the
//! state and the keys are plain data ([`App`]), so they are tested without
//! a terminal.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::style::{Attribute, Color, Print, ResetColor, SetAttribute, SetForegroundColor};
use crossterm::{cursor, queue, terminal};
use toolgate_protocol::{ClientFrame, PermissionRequest, Role, ServerFrame};

use super::view::{self, Choice, Line, Tone};
use crate::display::shown;
use crate::transport::client::Endpoint;

/// How long a notice (a question resolved elsewhere, an error) stays shown.
const NOTICE_FOR: Duration = Duration::from_secs(6);

/// One pending question.
#[derive(Debug, Clone)]
pub struct Question {
    /// The request as received.
    pub request: PermissionRequest,
    /// The `alwaysOptions` entry an `always` would grant.
    pub level: usize,
}

/// What the keys are doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Keys choose.
    Keys,
    /// A reject's message is being typed for this permission.
    Message {
        /// The question rejected.
        permission_id: String,
        /// What was typed so far.
        text: String,
    },
}

/// The approver's state.
#[derive(Debug)]
pub struct App {
    /// Pending questions, oldest first.
    pub questions: Vec<Question>,
    /// The selected question's index.
    pub selected: usize,
    /// How far the detail pane is scrolled.
    pub scroll: usize,
    /// What the keys are doing.
    pub input: Input,
    /// Recent notices, newest last.
    pub notices: Vec<(Instant, String)>,
    /// The broker's project root (from `ready`): a write's relative path is read there.
    pub project_root: Option<PathBuf>,
    /// `q` was pressed.
    pub quit: bool,
    /// The broker answered `hello`: questions come here.
    pub approver: bool,
    /// The lifetime `t` gives, an index in [`LIFETIMES`] (`T` moves it).
    pub lifetime: usize,
}

/// The lifetimes `T` goes through, in seconds; `t` starts at 30 minutes.
pub const LIFETIMES: [u64; 5] = [5 * 60, 30 * 60, 2 * 3_600, 8 * 3_600, 86_400];

impl Default for App {
    fn default() -> Self {
        App::new()
    }
}

impl App {
    /// No questions yet.
    pub fn new() -> App {
        App {
            questions: Vec::new(),
            selected: 0,
            scroll: 0,
            input: Input::Keys,
            notices: Vec::new(),
            project_root: None,
            quit: false,
            approver: false,
            lifetime: 1,
        }
    }

    /// The lifetime `t` gives now, in seconds.
    pub fn lifetime(&self) -> u64 {
        LIFETIMES
            .get(self.lifetime)
            .copied()
            .unwrap_or(view::DEFAULT_LIFETIME)
    }

    fn notice(&mut self, text: String) {
        self.notices.push((Instant::now(), text));
        if self.notices.len() > 3 {
            self.notices.remove(0);
        }
    }

    /// Take in a frame from the broker.
    pub fn receive(&mut self, frame: ServerFrame) {
        match frame {
            ServerFrame::Ready(ready) => {
                if ready.role == Some(toolgate_protocol::Role::Approver) {
                    self.approver = true;
                }
                self.project_root = Some(PathBuf::from(ready.project_root));
            }
            ServerFrame::PermissionRequest(request) => {
                if self
                    .questions
                    .iter()
                    .any(|q| q.request.permission_id == request.permission_id)
                {
                    return;
                }
                let level = view::default_level(&request);
                self.questions.push(Question {
                    request: *request,
                    level,
                });
            }
            ServerFrame::PermissionResolved(resolved) => {
                if let Some(index) = self
                    .questions
                    .iter()
                    .position(|q| q.request.permission_id == resolved.permission_id)
                {
                    let question = self.questions.remove(index);
                    self.notice(format!(
                        "closed: {} ({})",
                        shown(&question.request.title),
                        shown(&resolved.reason)
                    ));
                    self.after_removal(index, &resolved.permission_id);
                }
            }
            ServerFrame::Error(error) => {
                self.notice(format!("broker error: {}", shown(&error.message)));
            }
            _ => {}
        }
    }

    fn after_removal(&mut self, index: usize, permission_id: &str) {
        if index < self.selected || self.selected >= self.questions.len() {
            self.selected = self.selected.saturating_sub(1);
        }
        if index == self.selected {
            self.scroll = 0;
        }
        if let Input::Message {
            permission_id: typing,
            ..
        } = &self.input
        {
            if typing == permission_id {
                self.input = Input::Keys;
            }
        }
    }

    /// Take in a key; what it answers is returned, to be sent.
    pub fn key(&mut self, key: KeyEvent) -> Option<ClientFrame> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if let Input::Message {
            permission_id,
            text,
        } = &mut self.input
        {
            match key.code {
                KeyCode::Enter => {
                    let message = Some(std::mem::take(text));
                    let permission_id = permission_id.clone();
                    self.input = Input::Keys;
                    return self.answer(&permission_id, Choice::Reject { message });
                }
                KeyCode::Esc => self.input = Input::Keys,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    self.input = Input::Keys;
                }
                KeyCode::Char(ch) if !ch.is_control() => text.push(ch),
                _ => {}
            }
            return None;
        }
        let count = self.questions.len();
        match key.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => self.quit = true,
            KeyCode::Char('j') | KeyCode::Down if self.selected + 1 < count => {
                self.selected += 1;
                self.scroll = 0;
            }
            KeyCode::Char('k') | KeyCode::Up if self.selected > 0 => {
                self.selected -= 1;
                self.scroll = 0;
            }
            KeyCode::PageDown | KeyCode::Char(' ') => self.scroll += 10,
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Left | KeyCode::Char('h') | KeyCode::BackTab => {
                if let Some(q) = self.questions.get_mut(self.selected) {
                    q.level = q.level.saturating_sub(1);
                }
            }
            KeyCode::Right | KeyCode::Char('l') => {
                if let Some(q) = self.questions.get_mut(self.selected) {
                    q.level = (q.level + 1).min(view::default_level(&q.request));
                }
            }
            KeyCode::Tab => {
                if let Some(q) = self.questions.get_mut(self.selected) {
                    let last = view::default_level(&q.request);
                    q.level = if q.level >= last { 0 } else { q.level + 1 };
                }
            }
            KeyCode::Char('o') => {
                let id = self.selected_id()?;
                return self.answer(&id, Choice::Once);
            }
            KeyCode::Char('a') => {
                let question = self.questions.get(self.selected)?;
                let (id, level) = (question.request.permission_id.clone(), question.level);
                return self.answer(
                    &id,
                    Choice::Always {
                        level,
                        lifetime: None,
                    },
                );
            }
            KeyCode::Char('t') => {
                let question = self.questions.get(self.selected)?;
                // A plan approval's `always` changes the mode: nothing to time.
                if question.request.always_options.is_empty() {
                    return None;
                }
                let (id, level) = (question.request.permission_id.clone(), question.level);
                let lifetime = Some(self.lifetime());
                return self.answer(&id, Choice::Always { level, lifetime });
            }
            KeyCode::Char('T') => self.lifetime = (self.lifetime + 1) % LIFETIMES.len(),
            KeyCode::Char('r') => {
                let permission_id = self.selected_id()?;
                self.input = Input::Message {
                    permission_id,
                    text: String::new(),
                };
            }
            _ => {}
        }
        None
    }

    fn selected_id(&self) -> Option<String> {
        self.questions
            .get(self.selected)
            .map(|q| q.request.permission_id.clone())
    }

    /// Answer a question: it leaves the list and the frame is returned.
    fn answer(&mut self, permission_id: &str, choice: Choice) -> Option<ClientFrame> {
        let index = self
            .questions
            .iter()
            .position(|q| q.request.permission_id == permission_id)?;
        let question = self.questions.remove(index);
        self.after_removal(index, permission_id);
        let response = view::answer(&question.request, &choice);
        let what = match &choice {
            Choice::Once => "once".to_string(),
            Choice::Always { .. } => {
                let what = match &response.patterns {
                    Some(patterns) => format!("always ({})", patterns.join(", ")),
                    None => format!("always ({})", question.request.always.join(", ")),
                };
                match response.expires_in {
                    Some(seconds) => format!("{what} for {}", view::lifetime_label(seconds)),
                    None => what,
                }
            }
            Choice::Reject { .. } => "reject".to_string(),
        };
        self.notice(format!(
            "answered {}: {}",
            shown(&what),
            shown(&question.request.title)
        ));
        Some(ClientFrame::PermissionResponse(response))
    }

    /// The screen as lines of (tone, text), `width` columns by `height` rows.
    pub fn screen(&self, width: usize, height: usize, socket: &str) -> Vec<(Tone, String)> {
        let mut rows: Vec<(Tone, String)> = Vec::new();
        rows.push((
            Tone::Heading,
            format!(
                "toolgate approve — {} pending — {}{}",
                self.questions.len(),
                shown(socket),
                if self.approver {
                    ""
                } else {
                    " (connecting…)"
                }
            ),
        ));
        let list_rows = self.questions.len().clamp(1, (height / 3).max(1));
        let first = self.selected.saturating_sub(list_rows.saturating_sub(1));
        for index in first..first + list_rows {
            match self.questions.get(index) {
                Some(q) => {
                    let mark = if index == self.selected { '▶' } else { ' ' };
                    let tone = if index == self.selected {
                        Tone::Plain
                    } else {
                        Tone::Dim
                    };
                    rows.push((
                        tone,
                        format!("{mark} {}. {}", index + 1, view::summary(&q.request)),
                    ));
                }
                None if index == 0 => rows.push((Tone::Dim, "  no pending questions".into())),
                None => rows.push((Tone::Plain, String::new())),
            }
        }
        rows.push((Tone::Dim, "─".repeat(width)));
        let footer = self.footer();
        let notices: Vec<&String> = self
            .notices
            .iter()
            .filter(|(at, _)| at.elapsed() < NOTICE_FOR)
            .map(|(_, text)| text)
            .collect();
        let detail_rows = height.saturating_sub(rows.len() + 1 + notices.len());
        if let Some(q) = self.questions.get(self.selected) {
            // Another project's question: its files are on its broker's
            // host, not under this broker's root.
            let lines: Vec<Line> = if view::project_of(&q.request).is_some() {
                view::detail(&q.request, q.level, None, &view::elsewhere)
            } else {
                let root = self.project_root.as_deref();
                view::detail(&q.request, q.level, root, &view::read_file)
            };
            let scroll = self.scroll.min(lines.len().saturating_sub(1));
            for line in lines.into_iter().skip(scroll).take(detail_rows) {
                rows.push((line.tone, line.text));
            }
        }
        while rows.len() < height.saturating_sub(1 + notices.len()) {
            rows.push((Tone::Plain, String::new()));
        }
        for text in notices {
            rows.push((Tone::Warn, text.clone()));
        }
        rows.push((Tone::Heading, footer));
        rows.truncate(height);
        rows.into_iter()
            .map(|(tone, text)| (tone, cut(&text, width)))
            .collect()
    }

    fn footer(&self) -> String {
        match &self.input {
            Input::Message { text, .. } => {
                format!(
                    "reject with message (Enter sends, Esc back): {}▏",
                    shown(text)
                )
            }
            Input::Keys => format!(
                "o once · a always (←/→ tab: which) · t always for {} (T: how long) · r reject · j/k ↑/↓ move · PgUp/PgDn scroll · q quit",
                view::lifetime_label(self.lifetime())
            ),
        }
    }
}

/// At most `width` characters of `text`.
fn cut(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

/// What the socket reader thread reports.
enum FromBroker {
    Frame(Box<ServerFrame>),
    Closed(String),
}

/// Run `toolgate approve` on the broker at `endpoint` (`all_projects`: ask
/// for every project's questions): 0 after `q`, 1 when the connection is
/// lost or cannot be made, or the broker refuses its `hello`.
pub fn run(endpoint: &Endpoint, all_projects: bool) -> i32 {
    let label = endpoint.label();
    let stream = match crate::transport::client::open(
        endpoint,
        Instant::now() + crate::transport::client::CONNECT_WAIT,
    ) {
        Ok(stream) => stream,
        Err(crate::transport::client::ClientError::NoBroker(_, error)) => {
            crate::say!(
                "toolgate approve: no toolgate broker listens on {label} ({error}); start it with `toolgate serve --listen unix:{label}`"
            );
            return 1;
        }
        Err(error) => {
            crate::say!("toolgate approve: {error}");
            return 1;
        }
    };
    let mut writer = match stream.try_clone() {
        Ok(writer) => writer,
        Err(error) => {
            crate::say!("toolgate approve: cannot use the socket: {error}");
            return 1;
        }
    };
    let (sender, frames) = mpsc::channel();
    std::thread::spawn(move || {
        let reader = BufReader::new(stream);
        // What the broker said last when it refused something: the reason
        // a connection it closes was closed (a remote token refused).
        let mut refusal = None;
        for line in reader.split(b'\n') {
            match line {
                Ok(line) => match serde_json::from_slice::<ServerFrame>(&line) {
                    Ok(frame) => {
                        if let ServerFrame::Error(error) = &frame {
                            refusal = Some(error.message.clone());
                        }
                        if sender.send(FromBroker::Frame(Box::new(frame))).is_err() {
                            return;
                        }
                    }
                    Err(error) => tracing::warn!("unreadable frame from the broker: {error}"),
                },
                Err(error) => {
                    let _ = sender.send(FromBroker::Closed(error.to_string()));
                    return;
                }
            }
        }
        let why = match refusal {
            Some(message) => format!("the broker closed it after saying: {}", shown(&message)),
            None => "the broker closed it".to_string(),
        };
        let _ = sender.send(FromBroker::Closed(why));
    });
    let mut hello = crate::transport::client::hello(endpoint, Role::Approver, "approve");
    if let (true, serde_json::Value::Object(fields)) = (all_projects, &mut hello) {
        fields.insert("projects".into(), "all".into());
    }
    let written = serde_json::to_vec(&hello)
        .map_err(std::io::Error::other)
        .and_then(|mut line| {
            line.push(b'\n');
            writer.write_all(&line)
        });
    if let Err(error) = written {
        crate::say!("toolgate approve: the connection to {label} was lost: {error}");
        return 1;
    }
    let mut terminal = match Terminal::open() {
        Ok(terminal) => terminal,
        Err(error) => {
            crate::say!("toolgate approve: cannot use the terminal: {error}");
            return 1;
        }
    };
    let outcome = event_loop(&mut terminal, &frames, &mut writer, &label);
    drop(terminal);
    match outcome {
        Ok(()) => 0,
        Err(Ended::Lost(why)) => {
            crate::say!("toolgate approve: the connection to {label} was lost ({why})");
            1
        }
        Err(Ended::Refused(why)) => {
            crate::say!(
                "toolgate approve: the broker at {label} refused to take this approver: {why}"
            );
            1
        }
    }
}

/// Why the event loop ended other than by `q`.
enum Ended {
    /// The connection was lost (why).
    Lost(String),
    /// The broker refused the `hello` (its words).
    Refused(String),
}

impl From<String> for Ended {
    fn from(why: String) -> Ended {
        Ended::Lost(why)
    }
}

fn event_loop(
    terminal: &mut Terminal,
    frames: &Receiver<FromBroker>,
    writer: &mut UnixStream,
    label: &str,
) -> Result<(), Ended> {
    let mut app = App::new();
    let mut dirty = true;
    loop {
        // Everything the broker sent so far.
        loop {
            match frames.try_recv() {
                Ok(FromBroker::Frame(frame)) => {
                    // An error before the broker took the `hello`: the
                    // `hello` was refused (`--all-projects` on a broker
                    // without a store, say).
                    if let (false, ServerFrame::Error(error)) = (app.approver, frame.as_ref()) {
                        return Err(Ended::Refused(shown(&error.message).into_owned()));
                    }
                    app.receive(*frame);
                    dirty = true;
                }
                Ok(FromBroker::Closed(why)) => return Err(Ended::Lost(why)),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(Ended::Lost("reader ended".into()))
                }
            }
        }
        if dirty {
            terminal
                .draw(&app, label)
                .map_err(|e| format!("terminal: {e}"))?;
            dirty = false;
        }
        if event::poll(Duration::from_millis(50)).map_err(|e| format!("terminal: {e}"))? {
            match event::read().map_err(|e| format!("terminal: {e}"))? {
                Event::Key(key) => {
                    if let Some(frame) = app.key(key) {
                        let mut line = serde_json::to_vec(&frame).map_err(|e| e.to_string())?;
                        line.push(b'\n');
                        writer.write_all(&line).map_err(|e| e.to_string())?;
                    }
                    if app.quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        } else if app
            .notices
            .iter()
            .any(|(at, _)| at.elapsed() >= NOTICE_FOR && at.elapsed() < NOTICE_FOR * 2)
        {
            // Let expired notices disappear.
            dirty = true;
            app.notices.retain(|(at, _)| at.elapsed() < NOTICE_FOR);
        }
    }
}

/// The terminal in raw mode on the alternate screen; restored when dropped.
struct Terminal {
    out: std::io::Stdout,
}

impl Terminal {
    fn open() -> std::io::Result<Terminal> {
        terminal::enable_raw_mode()?;
        let mut out = std::io::stdout();
        queue!(out, terminal::EnterAlternateScreen, cursor::Hide)?;
        out.flush()?;
        Ok(Terminal { out })
    }

    fn draw(&mut self, app: &App, label: &str) -> std::io::Result<()> {
        let (width, height) = terminal::size()?;
        let rows = app.screen(usize::from(width), usize::from(height), label);
        queue!(self.out, cursor::MoveTo(0, 0))?;
        for (row, (tone, text)) in rows.iter().enumerate() {
            let row = u16::try_from(row).unwrap_or(u16::MAX);
            queue!(
                self.out,
                cursor::MoveTo(0, row),
                terminal::Clear(terminal::ClearType::CurrentLine)
            )?;
            match tone {
                Tone::Plain => {}
                Tone::Heading => queue!(self.out, SetAttribute(Attribute::Bold))?,
                Tone::Added => queue!(self.out, SetForegroundColor(Color::Green))?,
                Tone::Removed => queue!(self.out, SetForegroundColor(Color::Red))?,
                Tone::Dim => queue!(self.out, SetForegroundColor(Color::DarkGrey))?,
                Tone::Warn => queue!(self.out, SetForegroundColor(Color::Yellow))?,
            }
            queue!(
                self.out,
                Print(text),
                ResetColor,
                SetAttribute(Attribute::Reset)
            )?;
        }
        self.out.flush()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = queue!(self.out, cursor::Show, terminal::LeaveAlternateScreen);
        let _ = self.out.flush();
        let _ = terminal::disable_raw_mode();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn request(id: &str, title: &str) -> ServerFrame {
        serde_json::from_value(json!({
            "type":"permission_request","timestamp":0,"sessionID":"s","permissionID":id,
            "callID":"c","tool":"bash","permission":"bash","toolName":"bash","pattern":["rm *"],
            "patterns":[title],"always":["rm *"],"alwaysOptions":[[title],["rm *"]],"title":title,
            "metadata":{"command":title}
        }))
        .unwrap()
    }

    fn press(app: &mut App, keys: &str) -> Vec<serde_json::Value> {
        let mut sent = Vec::new();
        for ch in keys.chars() {
            let code = match ch {
                '\n' => KeyCode::Enter,
                '\u{1b}' => KeyCode::Esc,
                '<' => KeyCode::Left,
                '>' => KeyCode::Right,
                '\t' => KeyCode::Tab,
                ch => KeyCode::Char(ch),
            };
            if let Some(frame) = app.key(KeyEvent::new(code, KeyModifiers::NONE)) {
                sent.push(serde_json::to_value(frame).unwrap());
            }
        }
        sent
    }

    #[test]
    fn keys_answer_in_any_order() {
        // (keys pressed with questions p1 "rm a", p2 "rm b", p3 "rm c" pending, frames sent)
        let table: Vec<(&str, Vec<serde_json::Value>)> = vec![
            (
                "o",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"once"})],
            ),
            (
                "jo",
                vec![json!({"type":"permission_response","permissionID":"p2","response":"once"})],
            ),
            (
                "jjko",
                vec![json!({"type":"permission_response","permissionID":"p2","response":"once"})],
            ),
            (
                "jjjjo",
                vec![json!({"type":"permission_response","permissionID":"p3","response":"once"})],
            ),
            (
                "a",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"always"})],
            ),
            (
                "<a",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"always","patterns":["rm a"]}),
                ],
            ),
            (
                "\t\ta",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"always"})],
            ),
            (
                "<>>a",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"always"})],
            ),
            (
                "t",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"always","expiresIn":1800}),
                ],
            ),
            (
                "<t",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"always","patterns":["rm a"],"expiresIn":1800}),
                ],
            ),
            (
                "TTt",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"always","expiresIn":28800}),
                ],
            ),
            (
                "TTTTjt",
                vec![
                    json!({"type":"permission_response","permissionID":"p2","response":"always","expiresIn":300}),
                ],
            ),
            (
                "jrno\n",
                vec![
                    json!({"type":"permission_response","permissionID":"p2","response":"reject","message":"no"}),
                ],
            ),
            (
                "r\n",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"reject"})],
            ),
            (
                "r\u{1b}o",
                vec![json!({"type":"permission_response","permissionID":"p1","response":"once"})],
            ),
            (
                "roq\n",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"reject","message":"oq"}),
                ],
            ),
            (
                "jojoo",
                vec![
                    json!({"type":"permission_response","permissionID":"p2","response":"once"}),
                    json!({"type":"permission_response","permissionID":"p3","response":"once"}),
                    json!({"type":"permission_response","permissionID":"p1","response":"once"}),
                ],
            ),
            (
                "ooooo",
                vec![
                    json!({"type":"permission_response","permissionID":"p1","response":"once"}),
                    json!({"type":"permission_response","permissionID":"p2","response":"once"}),
                    json!({"type":"permission_response","permissionID":"p3","response":"once"}),
                ],
            ),
        ];
        for (keys, want) in table {
            let mut app = App::new();
            for (id, title) in [("p1", "rm a"), ("p2", "rm b"), ("p3", "rm c")] {
                app.receive(request(id, title));
            }
            app.receive(request("p1", "rm a")); // a repeat is ignored
            assert_eq!(press(&mut app, keys), want, "keys {keys:?}");
        }
    }

    #[test]
    fn resolved_elsewhere_disappears() {
        let mut app = App::new();
        app.receive(request("p1", "rm a"));
        app.receive(request("p2", "rm b"));
        press(&mut app, "jr");
        app.receive(
            serde_json::from_value(json!({"type":"permission_resolved","permissionID":"p2","sessionID":"s","callID":"c","reason":"answered on another connection"}))
                .unwrap(),
        );
        assert_eq!(app.questions.len(), 1);
        assert_eq!(app.input, Input::Keys);
        assert_eq!(app.selected, 0);
        let screen = app.screen(100, 30, "sock");
        let all: String = screen.iter().map(|(_, t)| format!("{t}\n")).collect();
        assert!(
            all.contains("closed: rm b (answered on another connection)"),
            "{all}"
        );
        assert!(all.contains("▶ 1. s  bash  rm a"), "{all}");
        assert_eq!(screen.len(), 30);
        assert!(screen.iter().all(|(_, t)| t.chars().count() <= 100));
        assert_eq!(press(&mut app, "jo").len(), 1);
        let all: String = app
            .screen(100, 30, "sock")
            .iter()
            .map(|(_, t)| format!("{t}\n"))
            .collect();
        assert!(all.contains("no pending questions"), "{all}");
    }
}
