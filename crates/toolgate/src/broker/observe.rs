//! Observers and listings: what an orchestrator sees of the agents it runs.
//!
//! An `observer` connection (`hello` with `"role":"observer"`, optionally
//! a `sessionID`: that session's subtree) gets a copy of every decision,
//! question, answer (`permission_answered`), resolution, session start and
//! end and mode change about the sessions it watches, in the order the
//! broker made them, and may do nothing but list. The copies are made once
//! per step, from the step's own outputs, after the frames they copy: a
//! broker with no observer pays one length check per step.
//!
//! `list_sessions` and `list_pending` (any connection) are answered to the
//! asking connection with the session tree (ids, parents, effective modes,
//! scopes, clients, pending counts) and the open questions.

use std::collections::HashSet;

use toolgate_protocol as wire;
use toolgate_protocol::ServerFrame;

use super::routing::To;
use super::{Broker, ConnId, Output};
use crate::convert;

/// The observer connections and what a step owes them.
#[derive(Default)]
pub(super) struct Observers {
    watching: Vec<Watcher>,
    /// News for observers that is in no output of this step (answers
    /// taken, a mode change nobody else hears): where in the step's outputs
    /// each goes (an answer before the frames that followed from it).
    notes: Vec<(usize, ServerFrame)>,
    /// The questions observers were shown (a question put again to an
    /// approver that connects later is not news).
    shown: HashSet<String>,
}

/// One observer connection.
struct Watcher {
    conn: ConnId,
    /// The session whose subtree it watches; every session when `None`.
    root: Option<String>,
    /// The sessions of the subtree it was told about: a session that ended
    /// is gone from the tree by the time its `session_ended` is copied.
    members: HashSet<String>,
}

impl Observers {
    /// Whether no connection observes.
    pub(super) fn is_empty(&self) -> bool {
        self.watching.is_empty()
    }

    /// `conn` observes `root`'s subtree (every session when `None`).
    pub(super) fn watch(&mut self, conn: ConnId, root: Option<String>) {
        self.unwatch(conn);
        self.watching.push(Watcher {
            conn,
            root,
            members: HashSet::new(),
        });
    }

    /// `conn` observes no more.
    pub(super) fn unwatch(&mut self, conn: ConnId) {
        self.watching.retain(|watcher| watcher.conn != conn);
    }

    /// An answer was taken; `at`: where the outputs that followed from it
    /// begin.
    pub(super) fn answered(&mut self, at: usize, answered: wire::PermissionAnswered) {
        self.note(at, ServerFrame::PermissionAnswered(answered));
    }

    /// News for observers at `at` in the step's outputs, whether or not an
    /// output carries it too (a `mode_changed` a reload brings: a copy in
    /// the outputs is then not copied again).
    pub(super) fn note(&mut self, at: usize, frame: ServerFrame) {
        if !self.watching.is_empty() {
            self.notes.push((at, frame));
        }
    }
}

/// The session a frame is about, if observers see it; `key`: what makes it
/// the same news as another copy of it in the step.
fn observed(frame: &ServerFrame) -> Option<(&str, Option<String>)> {
    Some(match frame {
        ServerFrame::Decision(decision) => (decision.session_id.as_str(), None),
        ServerFrame::PermissionRequest(request) => (
            request.session_id.as_str(),
            Some(format!("asked {}", request.permission_id)),
        ),
        ServerFrame::PermissionResolved(resolved) => (
            resolved.session_id.as_str(),
            Some(format!("resolved {}", resolved.permission_id)),
        ),
        ServerFrame::ModeChanged(changed) => (
            changed.session_id.as_str(),
            Some(format!(
                "mode {} {} {}",
                changed.session_id, changed.previous, changed.mode
            )),
        ),
        ServerFrame::SessionStarted(started) => (started.session_id.as_str(), None),
        ServerFrame::SessionEnded(ended) => (ended.session_id.as_str(), None),
        _ => return None,
    })
}

impl Broker {
    /// Copy to each observer what this step made (the outputs from `from`
    /// on) about the sessions it watches.
    pub(super) fn observe(&mut self, from: usize, out: &mut Vec<Output>) {
        let notes = std::mem::take(&mut self.observers.notes);
        if self.observers.watching.is_empty() {
            return;
        }
        let end = out.len();
        let mut notes = notes.into_iter().peekable();
        let mut step_keys: HashSet<String> = HashSet::new();
        for index in from..=end {
            while let Some((_, frame)) = notes.next_if(|(at, _)| *at <= index) {
                if let Some((_, Some(key))) = observed(&frame) {
                    if !step_keys.insert(key) {
                        continue;
                    }
                }
                self.copy_to_observers(&frame, false, None, out);
            }
            if index == end {
                break;
            }
            if matches!(out[index].to, To::Observer(_) | To::Inbox(_)) {
                continue;
            }
            let frame = &out[index].frame;
            let Some((_, key)) = observed(frame) else {
                continue;
            };
            if let Some(key) = key {
                if !step_keys.insert(key) {
                    continue;
                }
            }
            if let ServerFrame::PermissionRequest(request) = frame {
                if !self.observers.shown.insert(request.permission_id.clone()) {
                    continue;
                }
            }
            let ended = matches!(frame, ServerFrame::SessionEnded(_));
            let (frame, to) = (frame.clone(), out[index].to.conn());
            self.copy_to_observers(&frame, ended, Some(to), out);
        }
        // Forget the questions that closed (bounded by the open ones).
        if self.observers.shown.len() > 2 * self.questions.len() + 64 {
            let questions = &self.questions;
            self.observers
                .shown
                .retain(|id| questions.get(id).is_some());
        }
    }

    /// `frame` to every observer watching its session but `addressee`,
    /// which has it already (`ended`: the frame ends that session).
    fn copy_to_observers(
        &mut self,
        frame: &ServerFrame,
        ended: bool,
        addressee: Option<ConnId>,
        out: &mut Vec<Output>,
    ) {
        let session = match frame {
            ServerFrame::PermissionAnswered(answered) => answered.session_id.as_str(),
            frame => match observed(frame) {
                Some((session, _)) => session,
                None => return,
            },
        };
        let mut ancestors: Option<Vec<String>> = None;
        for watcher in &mut self.observers.watching {
            let covered = match &watcher.root {
                None => true,
                Some(root) if root == session => true,
                Some(_) if watcher.members.contains(session) => true,
                Some(root) => {
                    let chain = ancestors.get_or_insert_with(|| self.sessions.ancestors(session));
                    chain.iter().any(|ancestor| ancestor == root)
                }
            };
            if !covered || addressee == Some(watcher.conn) {
                continue;
            }
            if ended {
                watcher.members.remove(session);
            } else if watcher.root.is_some() {
                watcher.members.insert(session.to_string());
            }
            out.push(Output {
                to: To::Observer(watcher.conn),
                frame: frame.clone(),
            });
        }
    }

    /// The answer to `list_sessions`: `root`'s subtree (every session when
    /// `None`), parents before children.
    pub(super) fn sessions_frame(&self, root: Option<&str>) -> ServerFrame {
        let ids: Vec<String> = match root {
            Some(root) => self
                .sessions
                .subtree(root)
                .into_iter()
                .filter(|id| self.sessions.contains_key(id))
                .collect(),
            None => self.sessions.in_tree_order(),
        };
        let sessions = ids
            .into_iter()
            .filter_map(|id| {
                let session = self.sessions.get(&id)?;
                let scope = self.sessions.scope_of(Some(&id));
                let scope = convert::effective_scope(
                    scope.effective(|tool| self.policy.registry.lookup(tool).permission.clone()),
                    &self.policy.always_available,
                );
                Some(wire::SessionInfo {
                    parent_id: session.parent.clone(),
                    mode: self.effective_mode(&id).as_str().to_string(),
                    started: session.started,
                    scope,
                    clients: self.conns.clients_in(&id),
                    pending: session.live.len(),
                    session_id: id,
                })
            })
            .collect();
        ServerFrame::Sessions(wire::Sessions { sessions })
    }

    /// The answer to `list_tools`: where each tool the registry knows
    /// stands in the session's mode and scope.
    pub(super) fn tools_frame(&self, session_id: &str) -> ServerFrame {
        use toolgate_policy::Access;
        let mode = self.effective_mode(session_id);
        let scope = self.sessions.scope_of(Some(session_id));
        let never_ask = self.config.on_ask == super::OnAsk::Deny;
        let mut tools = wire::Tools {
            session_id: session_id.to_string(),
            mode: mode.as_str().to_string(),
            available: Vec::new(),
            limited: Vec::new(),
            asks: Vec::new(),
            unavailable: Vec::new(),
        };
        for name in self.policy.registry.names() {
            let list =
                match toolgate_policy::tool_access(&self.policy, &name, mode, &scope, never_ask) {
                    Access::Available => &mut tools.available,
                    Access::Limited => &mut tools.limited,
                    Access::Asks => &mut tools.asks,
                    Access::Unavailable => &mut tools.unavailable,
                };
            list.push(name);
        }
        ServerFrame::Tools(tools)
    }

    /// The answer to `list_pending`: the open questions (of `root`'s
    /// subtree, or all), oldest first.
    pub(super) fn pending_frame(&self, root: Option<&str>) -> ServerFrame {
        let within: Option<HashSet<String>> =
            root.map(|root| self.sessions.subtree(root).into_iter().collect());
        let questions = self
            .questions
            .all()
            .iter()
            .filter_map(|id| self.conns.request(id))
            .filter(|request| {
                within
                    .as_ref()
                    .is_none_or(|within| within.contains(&request.session_id))
            })
            .cloned()
            .collect();
        ServerFrame::Pending(wire::Pending { questions })
    }
}
