//! Where a step's frames go, said where they are made. An [`Outbox`] wraps
//! the transport's output vector for one step and knows the caller (the
//! connection whose input the step handles, if any), the ids of the frame
//! being handled and its line number: a part that answers the caller says
//! [`Outbox::reply`], one that finds an error says [`Outbox::error`] and the
//! frame gets the ids and line there; a question, its resolution and a
//! decision are addressed by the connection table (`Connections::ask`,
//! `Connections::resolved`, `Connections::decision`), and a mode change by
//! [`Outbox::mode_changed`].
//!
//! A `mode_changed` is also news for the connections whose calls in that
//! session the step decides (an approver's answer to a plan approval decides
//! the agent's call): each such owner gets a copy just before the caller's,
//! whether its decision came before the change (found among the step's
//! outputs) or after it (the copy is put in place when the decision is
//! addressed). A step with no mode change pays nothing for this.

use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, ErrorCode, ServerFrame};

use super::{ConnId, Output, To};

/// The outputs of one step, addressed as they are made.
pub(super) struct Outbox<'a> {
    out: &'a mut Vec<Output>,
    caller: Option<ConnId>,
    /// The ids of the frame being handled: its `error` frames carry them
    /// unless they name their own.
    ids: FrameIds,
    /// The number of the line being handled, for `error` frames.
    line: Option<u64>,
    /// Where this step's outputs begin in `out`.
    start: usize,
    /// The step's `mode_changed` frames (rarely any).
    news: Vec<News>,
}

/// A `mode_changed` of this step: the owners told so far sit at
/// `at..at + told`, the caller's copy (if any) right after them.
struct News {
    at: usize,
    told: usize,
    changed: wire::ModeChanged,
}

/// The ids a decoded frame names: every `error` frame it gets carries them
/// (unless the error names its own). A `tool_call`'s one error (a
/// duplicate) names them itself, so its ids are not copied for every call.
#[derive(Default)]
pub(super) struct FrameIds {
    call_id: Option<String>,
    session_id: Option<String>,
    permission_id: Option<String>,
}

impl FrameIds {
    pub(super) fn of(frame: &ClientFrame) -> FrameIds {
        let (call_id, session_id, permission_id) = match frame {
            ClientFrame::ToolCall(_)
            | ClientFrame::RevokeGrant(_)
            | ClientFrame::Shutdown(_)
            | ClientFrame::Hello(_)
            | ClientFrame::CreateToken(_)
            | ClientFrame::ListTokens(_)
            | ClientFrame::RevokeToken(_) => (None, None, None),
            ClientFrame::PermissionResponse(response) => {
                (None, None, Some(&response.permission_id))
            }
            ClientFrame::SetMode(set) => (None, Some(&set.session_id), None),
            ClientFrame::SessionStart(start) => (None, Some(&start.session_id), None),
            ClientFrame::SessionEnd(end)
            | ClientFrame::GetReminder(end)
            | ClientFrame::ListTools(end) => (None, Some(&end.session_id), None),
            ClientFrame::Cancel(cancel) => (Some(&cancel.call_id), Some(&cancel.session_id), None),
            ClientFrame::ListGrants(list) => (None, list.session_id.as_ref(), None),
            ClientFrame::ListSessions(list) | ClientFrame::ListPending(list) => {
                (None, list.session_id.as_ref(), None)
            }
        };
        FrameIds {
            call_id: call_id.cloned(),
            session_id: session_id.cloned(),
            permission_id: permission_id.cloned(),
        }
    }
}

impl<'a> Outbox<'a> {
    /// The outbox of a step answering `caller` (none for a tick, a close, a
    /// stop or a reload), about the line `line`.
    pub(super) fn new(out: &'a mut Vec<Output>, caller: Option<ConnId>, line: Option<u64>) -> Self {
        let start = out.len();
        Outbox {
            out,
            caller,
            ids: FrameIds::default(),
            line,
            start,
            news: Vec::new(),
        }
    }

    /// The connection whose input this step handles.
    pub(super) fn caller(&self) -> Option<ConnId> {
        self.caller
    }

    /// From now on, `error` frames name the ids of `frame` (the frame being
    /// handled) where they name none of their own.
    pub(super) fn about(&mut self, ids: FrameIds) {
        self.ids = ids;
    }

    /// How many outputs there are so far: with [`Outbox::not_saved`], marks
    /// the frames of one change.
    pub(super) fn len(&self) -> usize {
        self.out.len()
    }

    /// Write `frame` to `to`.
    pub(super) fn push(&mut self, to: To, frame: ServerFrame) {
        self.out.push(Output { to, frame });
    }

    /// Answer the caller.
    pub(super) fn reply(&mut self, frame: ServerFrame) {
        match self.caller {
            Some(conn) => self.push(To::Caller(conn), frame),
            None => tracing::warn!("a frame with no connection to go to: {frame:?}"),
        }
    }

    /// An `error` frame for the caller, naming the ids of the frame being
    /// handled and its line.
    pub(super) fn error(&mut self, code: ErrorCode, message: String) {
        self.error_naming(code, message, None, None, None);
    }

    /// An `error` frame for the caller naming these ids (those it does not
    /// name: the frame's being handled) and the line.
    pub(super) fn error_naming(
        &mut self,
        code: ErrorCode,
        message: String,
        call_id: Option<String>,
        session_id: Option<String>,
        permission_id: Option<String>,
    ) {
        let frame = ServerFrame::Error(wire::ErrorFrame {
            code,
            message,
            call_id: call_id.or_else(|| self.ids.call_id.clone()),
            session_id: session_id.or_else(|| self.ids.session_id.clone()),
            permission_id: permission_id.or_else(|| self.ids.permission_id.clone()),
            line: self.line,
            not_saved: None,
        });
        self.reply(frame);
    }

    /// The messages of the `error` frames from `from` on.
    pub(super) fn errors_since(&self, from: usize) -> Vec<String> {
        self.out[from.min(self.out.len())..]
            .iter()
            .filter_map(|output| match &output.frame {
                ServerFrame::Error(error) => Some(error.message.clone()),
                _ => None,
            })
            .collect()
    }

    /// Mark the frames from `from` on that report a change as not saved,
    /// and why.
    pub(super) fn not_saved(&mut self, from: usize, err: &str) {
        let from = from.min(self.out.len());
        for output in &mut self.out[from..] {
            let field = match &mut output.frame {
                ServerFrame::SessionEnded(frame) => &mut frame.not_saved,
                ServerFrame::SessionStarted(frame) => &mut frame.not_saved,
                ServerFrame::ModeChanged(frame) => &mut frame.not_saved,
                ServerFrame::Grants(frame) => &mut frame.not_saved,
                ServerFrame::Error(frame) => &mut frame.not_saved,
                _ => continue,
            };
            field.get_or_insert_with(|| err.to_string());
        }
    }

    /// A session's mode changed: the caller hears it, and so does every
    /// other connection whose call in that session this step decides.
    pub(super) fn mode_changed(&mut self, changed: wire::ModeChanged) {
        let at = self.out.len();
        let mut told = 0;
        // Decisions already addressed in this step.
        for index in self.start..at {
            let owner = match &self.out[index] {
                Output {
                    to: To::Owner(owner),
                    frame: ServerFrame::Decision(decision),
                } if decision.session_id == changed.session_id => *owner,
                _ => continue,
            };
            let copies = &self.out[at..at + told];
            if !copies.iter().any(|copy| copy.to == To::Owner(owner)) {
                self.push(To::Owner(owner), ServerFrame::ModeChanged(changed.clone()));
                told += 1;
            }
        }
        // Decisions to come: see `decided`.
        self.news.push(News {
            at,
            told,
            changed: changed.clone(),
        });
        // A change no connection asked for (a fleet's store applied an
        // answer given on another broker) reaches only the owners above.
        if self.caller.is_some() {
            self.reply(ServerFrame::ModeChanged(changed));
        }
    }

    /// A session's mode changed with no caller to tell (a reload moved the
    /// managed floor): each of `to` hears it, and so does every other
    /// connection whose call in that session this step decides later.
    pub(super) fn mode_changed_to(&mut self, to: &[ConnId], changed: wire::ModeChanged) {
        let at = self.out.len();
        for &conn in to {
            self.push(To::Owner(conn), ServerFrame::ModeChanged(changed.clone()));
        }
        self.news.push(News {
            at,
            told: to.len(),
            changed,
        });
    }

    /// A decision about a call of `session_id` goes to `owner`, which is not
    /// the caller: a mode change of that session earlier in this step is
    /// news for it too, so it gets a copy of it in its place.
    pub(super) fn decided(&mut self, owner: ConnId, session_id: &str) {
        for index in 0..self.news.len() {
            let news = &self.news[index];
            if news.changed.session_id != session_id {
                continue;
            }
            let (at, told) = (news.at, news.told);
            if self.out[at..at + told]
                .iter()
                .any(|copy| copy.to == To::Owner(owner))
            {
                continue;
            }
            let copy = Output {
                to: To::Owner(owner),
                frame: ServerFrame::ModeChanged(news.changed.clone()),
            };
            self.out.insert(at + told, copy);
            self.news[index].told += 1;
            for later in &mut self.news {
                if later.at > at {
                    later.at += 1;
                }
            }
        }
    }
}
