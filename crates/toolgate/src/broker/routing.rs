//! The broker's one entry point, [`Broker::step`]: one [`Input`] in (a line
//! from a connection, a timer tick, a connection closed, a stop, a reload),
//! [`Output`]s out, each addressed to one connection and saying why it goes
//! there ([`To`]). Every transport (stdio, the socket, the hook, the MCP
//! server, an in-process approver) drives the broker through it, so none of
//! them can decide differently.
//!
//! Who gets what:
//! - A `decision` goes to the connection that sent the `tool_call`: at once
//!   ([`To::Caller`]), or later ([`To::Owner`]) after an answer, a timeout, a
//!   mode change, a reload or a close.
//! - A `permission_request` goes to every approver connection
//!   ([`To::Approver`]); with none connected, to the connection that sent the
//!   call, as on stdio. The connections it went to are its *addressees*, and
//!   only they may answer it; the first answer wins and the other addressees
//!   get `permission_resolved`. An approver that connects later gets every
//!   open question; when the last approver goes, its open questions go to
//!   the connections that made the calls. In a fleet, another project's
//!   question (from the store) goes only to the approvers and observers
//!   whose `hello` asked for every project ([`To::Inbox`]).
//! - Everything else answers the connection whose line it answers.
//!
//! A session belongs to no connection: any connection may name any session
//! (a hook opens a new one per call). A *call* belongs to the connection that
//! sent it; when that connection closes, its open calls are denied (source
//! `cancel`) and everything else (sessions, grants, scopes) stays.
//!
//! Each frame is addressed where it is made, through the step's `Outbox`
//! (which knows the caller) and the connection table ([`Connections`]:
//! roles, who owns each open call, who was asked each question). With one
//! connection and no approver (stdio), every frame goes to that connection.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use toolgate_policy::Policy;
use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, DecodeError, ErrorCode, Role, ServerFrame};

use super::outbox::{FrameIds, Outbox};
use super::Broker;

/// A connection, as the transport numbers it (stdio is 0).
pub type ConnId = u64;

/// What a transport hands the broker.
pub enum Input<'a> {
    /// A connection opened: it is greeted with `ready` (role agent until it
    /// says `hello`).
    Opened {
        /// The new connection.
        conn: ConnId,
    },
    /// One complete input line (without its `\n`), with its 1-based number
    /// on its connection.
    Line {
        /// Where it came from.
        conn: ConnId,
        /// The line.
        line: &'a [u8],
        /// Its number on that connection, for error frames.
        number: u64,
    },
    /// A line decoded before it reached the broker ([`Decoded::line`] or
    /// [`Decoded::unreadable`]), so that a transport can decode on another
    /// thread, or outside its lock, while the broker decides what came
    /// before. It is handled exactly as the line itself would be.
    Decoded {
        /// Where it came from.
        conn: ConnId,
        /// What the line said.
        decoded: Decoded,
        /// Its number on that connection, for error frames.
        number: u64,
    },
    /// A frame the transport decoded itself or built (a hook call, a
    /// replay): handled as the line that says it would be, with no text in
    /// between.
    Frame {
        /// Where it came from.
        conn: ConnId,
        /// The frame.
        frame: ClientFrame,
        /// Its line number on that connection, when it has one, for error
        /// frames.
        number: Option<u64>,
    },
    /// A line the transport could not read whole (longer than the frame
    /// limit): what its first bytes said, as a decoding error. A `tool_call`
    /// whose `callID` was read is denied; anything else gets an `error`.
    Unreadable {
        /// Where it came from.
        conn: ConnId,
        /// What was wrong, with the ids that could be read.
        error: DecodeError,
        /// Its number on that connection.
        number: u64,
    },
    /// The clock moved: end the questions whose deadline passed.
    Tick,
    /// A connection closed: its open calls are denied (source `cancel`), the
    /// approvers asked about them get `permission_resolved`.
    Closed {
        /// The connection that closed.
        conn: ConnId,
    },
    /// Stop: deny every open call (source `shutdown`). End of stdin, a
    /// signal, or the transport going away.
    Stop,
    /// A replayed recording ended: deny every open call (source `replay`),
    /// a question the recording holds no answer to. The broker goes on.
    Unanswered,
    /// A replayed question no person's recorded answer decides: the
    /// recording says the call was refused (by the agent's own rules, a
    /// hook, a run that could not ask), or that the agent's own
    /// configuration let it run so nobody was asked. Denied now, source
    /// `replay`, with `reason`.
    NoAnswer {
        /// The question.
        permission_id: String,
        /// Why the recording holds no answer.
        reason: String,
    },
    /// Judge under a new policy from now on (SIGHUP), deciding the open calls
    /// whose answer is no longer "ask".
    Reload {
        /// The new policy.
        policy: Arc<Policy>,
        /// Its ask timeout, in milliseconds (0 waits forever).
        ask_timeout_ms: u64,
    },
    /// News from the shared store (see [`Broker::share`]).
    Shared(super::News),
    /// A remote admin's `create_token` or `revoke_token` (or
    /// `list_tokens`), done by its listener with the store and committed
    /// there: `reply` goes to `conn`, and what changed is recorded in the
    /// audit log (never the token's text), signed by `conn`'s token.
    Administered {
        /// The admin's connection.
        conn: ConnId,
        /// The reply (`token_created`, `tokens`, `token_revoked`, or an
        /// `error`).
        reply: ServerFrame,
        /// Who the admin is (`token NAME (admin)`), for a connection that
        /// closed before the reply (an open one is named as it signs its
        /// answers).
        by: String,
    },
}

/// One input line, decoded: what the broker makes of a line before it
/// looks at its own state. Decoding is pure (the same bytes always decode the
/// same way), so it may happen on any thread, ahead of the broker.
pub struct Decoded(Parsed);

enum Parsed {
    /// Nothing but whitespace: ignored.
    Blank,
    /// A frame, and what was worked out about it ahead.
    Frame(ClientFrame, Ahead),
    /// A line that did not decode, and the `sessionID` of the
    /// `session_start` it began, when it was one (that session is shut).
    Invalid {
        error: DecodeError,
        session_start: Option<String>,
    },
    /// A line the transport could not read whole ([`Input::Unreadable`]).
    Unreadable(DecodeError),
}

impl Decoded {
    /// Decode one complete line (without its `\n`) with its 1-based number.
    pub fn line(line: &[u8], number: u64) -> Decoded {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Decoded(Parsed::Blank);
        }
        match toolgate_protocol::decode_line(line, number) {
            Ok(frame) => Decoded::frame(frame),
            Err(error) => Decoded(Parsed::Invalid {
                error,
                session_start: session_start_id(line),
            }),
        }
    }

    /// A frame already decoded (or built by the transport): what
    /// [`Decoded::line`] gives for a line that says it.
    pub fn frame(frame: ClientFrame) -> Decoded {
        let hash = match &frame {
            ClientFrame::ToolCall(call) => Some(super::call_hash(&call.tool, &call.input)),
            _ => None,
        };
        Decoded(Parsed::Frame(
            frame,
            Ahead {
                hash,
                prepared: None,
                epoch: 0,
            },
        ))
    }

    /// A blank line (ignored), to leave where a decoded line was taken.
    pub fn blank() -> Decoded {
        Decoded(Parsed::Blank)
    }

    /// A line the transport could not read whole: what its first bytes
    /// said, as a decoding error (see [`Input::Unreadable`]).
    pub fn unreadable(error: DecodeError) -> Decoded {
        Decoded(Parsed::Unreadable(error))
    }

    /// Whether the line is a `shutdown` frame: the broker may stop when it
    /// has handled it, so a reader should not wait for more input first.
    pub fn is_shutdown(&self) -> bool {
        matches!(self.0, Parsed::Frame(ClientFrame::Shutdown(_), _))
    }

    /// For a `tool_call`: judge it as far as `policy` alone can
    /// ([`Policy::prepare`]), on whatever thread this runs, so that the
    /// broker only adds what the session decides. Harmless if the broker
    /// judges under another policy by then (a reload): it prepares again.
    /// Whether there was a call to prepare. Its disk link answers are not
    /// checked against the inotify queue here: the caller must call
    /// [`crate::disk::globs::confirm`] and [`Decoded::confirm_prepared`] before the
    /// broker judges it.
    pub fn prepare(&mut self, policy: &Policy) -> bool {
        let Parsed::Frame(ClientFrame::ToolCall(call), ahead) = &mut self.0 else {
            return false;
        };
        if ahead.prepared.is_none() {
            // Its link answers are confirmed with the batch's
            // (`confirm_prepared`), not at its first question.
            ahead.epoch = crate::disk::globs::epoch();
            ahead.prepared = Some(crate::disk::globs::deferred(|| {
                policy.prepare(&toolgate_policy::Call {
                    tool: &call.tool,
                    input: &call.input,
                    cwd: call.cwd.as_deref(),
                })
            }));
        }
        true
    }

    /// For a `tool_call`: the same call under the id `call_id`, with what
    /// was worked out about it (its hash, its preparation and the disk
    /// epoch that preparation saw). For a caller that met a line differing
    /// from this one's only in its `callID`: decoding is pure, so that line
    /// decodes to this frame with its own id. `None` for any other frame.
    pub fn same_call(&self, call_id: &str) -> Option<Decoded> {
        let Parsed::Frame(ClientFrame::ToolCall(call), ahead) = &self.0 else {
            return None;
        };
        let mut call = call.clone();
        call.call_id.clear();
        call.call_id.push_str(call_id);
        Some(Decoded(Parsed::Frame(
            ClientFrame::ToolCall(call),
            ahead.clone(),
        )))
    }

    /// After [`crate::disk::globs::confirm`] gave `epoch`: a call prepared before
    /// a change was seen is prepared again when the broker judges it.
    pub fn confirm_prepared(&mut self, epoch: u64) {
        if let Parsed::Frame(ClientFrame::ToolCall(_), ahead) = &mut self.0 {
            if ahead.epoch != epoch {
                ahead.prepared = None;
            }
        }
    }
}

/// What was worked out about a frame before the broker took it.
#[derive(Debug, Default, Clone)]
pub(super) struct Ahead {
    /// For a `tool_call`: the hash of its tool and input (how identical
    /// calls in a row are spotted).
    pub(super) hash: Option<u64>,
    /// For a `tool_call`: its judgement as far as the policy alone goes
    /// ([`Decoded::prepare`]).
    pub(super) prepared: Option<toolgate_policy::Prepared>,
    /// [`crate::disk::globs::epoch`] before it was prepared.
    pub(super) epoch: u64,
}

/// The `sessionID` of an unreadable line that is a `session_start` object.
fn session_start_id(line: &[u8]) -> Option<String> {
    let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    if frame.get("type").and_then(Value::as_str) != Some("session_start") {
        return None;
    }
    match frame.remove("sessionID") {
        Some(Value::String(id)) => Some(id),
        _ => None,
    }
}

/// Where an output goes, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// The connection whose input this answers.
    Caller(ConnId),
    /// The connection that sent the call this is about (a later decision, or
    /// its question when no approver is connected).
    Owner(ConnId),
    /// An approver connection (a question, or the news that it was resolved).
    Approver(ConnId),
    /// An observer connection (a copy of news about a session it watches).
    Observer(ConnId),
    /// A connection (approver or observer) that follows every project
    /// (`hello` with `"projects": "all"`): another project's question, or
    /// the news that it closed. Never copied to other observers.
    Inbox(ConnId),
}

impl To {
    /// The connection to write to.
    pub fn conn(self) -> ConnId {
        match self {
            To::Caller(conn)
            | To::Owner(conn)
            | To::Approver(conn)
            | To::Observer(conn)
            | To::Inbox(conn) => conn,
        }
    }
}

/// One frame for one connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Its addressee.
    pub to: To,
    /// The frame.
    pub frame: ServerFrame,
}

/// The connections the broker knows, and who may hear and answer what.
#[derive(Default)]
pub(super) struct Connections {
    /// Every open connection: its role and client name.
    open: HashMap<ConnId, Peer, foldhash::fast::RandomState>,
    /// The approver connections, in the order they said `hello`.
    approvers: Vec<ConnId>,
    /// The one connection that may be an approver (`serve --approver`'s
    /// own): no other may become one, and a question nobody hears waits
    /// for it instead of going back to the connection that made the call.
    sole_approver: Option<ConnId>,
    /// Calls with an open question: session → call → (owner, permission id).
    owners: HashMap<String, HashMap<String, (ConnId, String)>>,
    /// Open questions by permission id (another broker's too: owned by
    /// [`REMOTE`]).
    asked: HashMap<String, Asked>,
    /// The broker shares a store: a question nobody here hears waits for
    /// the fleet's approvers instead of going back to the call's connection.
    pub(super) fleet: bool,
}

/// The owner of another broker's question (no connection of this broker).
pub(super) const REMOTE: ConnId = ConnId::MAX;

#[derive(Default, Clone)]
struct Peer {
    role: Role,
    client: Option<String>,
    /// The token it connected with (a remote connection): `token NAME
    /// (ROLE)`, as answers it gives are signed.
    token: Option<String>,
    /// The sessions it sent calls in (for `list_sessions`).
    sessions: std::collections::HashSet<String>,
    /// The last of them: a flood in one session costs one comparison.
    last_session: Option<String>,
    /// When `sessions` is pruned of the sessions the broker forgot.
    prune_at: usize,
    /// The sessions it started or set the mode of: with `sessions`, the
    /// ones a change of mode no frame of theirs caused (a reload moving the
    /// managed floor) is news for.
    steered: std::collections::HashSet<String>,
    /// When `steered` is pruned of the sessions the broker forgot.
    steered_prune_at: usize,
    /// Its `hello` asked for every project's questions (an approver or an
    /// observer on a broker that shares a store).
    all_projects: bool,
}

/// An open question: who made the call, who was asked, and the request as
/// sent (for an approver that connects later).
struct Asked {
    owner: ConnId,
    addressees: Vec<ConnId>,
    request: Box<wire::PermissionRequest>,
    /// A `permission_resolved` already went to the addressees.
    resolved: bool,
    /// Another project's question: put only to the connections that follow
    /// every project.
    foreign: bool,
}

impl Connections {
    /// A new question: to every approver, or to the call's connection.
    pub(super) fn ask(&mut self, mut request: Box<wire::PermissionRequest>, ob: &mut Outbox<'_>) {
        let caller = ob.caller();
        let calls = self.owners.entry(request.session_id.clone()).or_default();
        // A call asked again (its question changed) keeps its connection.
        let previous = calls.get(request.call_id.as_str()).cloned();
        let Some(owner) = previous.as_ref().map(|(owner, _)| *owner).or(caller) else {
            tracing::warn!(call = %request.call_id, "a question with no connection to go to");
            return;
        };
        calls.insert(
            request.call_id.clone(),
            (owner, request.permission_id.clone()),
        );
        if let Some((_, old)) = previous {
            self.asked.remove(&old);
        }
        if let Some(client) = self.open.get(&owner).and_then(|p| p.client.clone()) {
            request
                .metadata
                .insert("client".to_string(), Value::String(client));
        }
        // Every approver but the connection that made the call (it never
        // answers its own call while another can); with none, that
        // connection itself (its client asks its user, as on stdio), unless
        // only the broker's own approver may answer: then the question
        // waits for it (and its timeout).
        let others: Vec<ConnId> = self
            .approvers
            .iter()
            .copied()
            .filter(|&c| c != owner)
            .collect();
        let addressees = if !others.is_empty() || self.sole_approver.is_some() || self.fleet {
            others
        } else {
            vec![owner]
        };
        for &conn in &addressees {
            let to = if conn != owner {
                To::Approver(conn)
            } else if Some(owner) == caller {
                To::Caller(conn)
            } else {
                To::Owner(conn)
            };
            ob.push(to, ServerFrame::PermissionRequest(request.clone()));
        }
        self.asked.insert(
            request.permission_id.clone(),
            Asked {
                owner,
                addressees,
                request,
                resolved: false,
                foreign: false,
            },
        );
    }

    /// Another broker's question (through the store): to every approver;
    /// another project's (`foreign`) only to the approvers and observers
    /// that follow every project.
    pub(super) fn ask_remote(
        &mut self,
        request: Box<wire::PermissionRequest>,
        foreign: bool,
        ob: &mut Outbox<'_>,
    ) {
        let addressees: Vec<ConnId> = if foreign {
            self.inbox()
        } else {
            self.approvers.clone()
        };
        for &conn in &addressees {
            let to = if foreign {
                To::Inbox(conn)
            } else {
                To::Approver(conn)
            };
            ob.push(to, ServerFrame::PermissionRequest(request.clone()));
        }
        self.asked.insert(
            request.permission_id.clone(),
            Asked {
                owner: REMOTE,
                addressees,
                request,
                resolved: false,
                foreign,
            },
        );
    }

    /// The approvers and observers that follow every project, in the order
    /// they connected.
    fn inbox(&self) -> Vec<ConnId> {
        let mut conns: Vec<ConnId> = self
            .open
            .iter()
            .filter(|(_, peer)| peer.all_projects)
            .map(|(conn, _)| *conn)
            .collect();
        conns.sort_unstable();
        conns
    }

    /// Another broker's question closed: the connections it was put to
    /// (but `except`, whose answer closed it) hear why.
    pub(super) fn end_remote(
        &mut self,
        resolved: wire::PermissionResolved,
        except: Option<ConnId>,
        ob: &mut Outbox<'_>,
    ) {
        let Some(asked) = self.asked.remove(&resolved.permission_id) else {
            return;
        };
        for conn in asked.addressees {
            if Some(conn) != except {
                let to = if asked.foreign {
                    To::Inbox(conn)
                } else {
                    To::Approver(conn)
                };
                ob.push(to, ServerFrame::PermissionResolved(resolved.clone()));
            }
        }
    }

    /// Other projects' open questions go to `conn` when it follows every
    /// project (those it was not put yet, oldest first), and no longer when
    /// it does not.
    fn follow_projects(&mut self, conn: ConnId, ob: &mut Outbox<'_>) {
        let follows = self.open.get(&conn).is_some_and(|peer| peer.all_projects);
        let mut new: Vec<(u64, String)> = Vec::new();
        for (id, asked) in &mut self.asked {
            if !asked.foreign {
                continue;
            }
            if !follows {
                asked.addressees.retain(|&c| c != conn);
            } else if !asked.addressees.contains(&conn) {
                new.push((asked.request.timestamp, id.clone()));
            }
        }
        new.sort();
        for (_, id) in new {
            if let Some(asked) = self.asked.get_mut(&id) {
                asked.addressees.push(conn);
                ob.push(
                    To::Inbox(conn),
                    ServerFrame::PermissionRequest(asked.request.clone()),
                );
            }
        }
    }

    /// The connection that owns the open call `call_id` of `session_id`.
    pub(super) fn owner_of(&self, session_id: &str, call_id: &str) -> Option<ConnId> {
        self.owners
            .get(session_id)
            .and_then(|calls| calls.get(call_id))
            .map(|(owner, _)| *owner)
    }

    /// How many connections a question was put to.
    pub(super) fn addressees(&self, permission_id: &str) -> usize {
        self.asked
            .get(permission_id)
            .map_or(0, |asked| asked.addressees.len())
    }

    /// Whether an approver other than `conn` is connected.
    pub(super) fn has_approver_besides(&self, conn: Option<ConnId>) -> bool {
        self.approvers.iter().any(|&c| Some(c) != conn)
    }

    /// Whether `conn` is open.
    pub(super) fn is_open(&self, conn: ConnId) -> bool {
        self.open.contains_key(&conn)
    }

    /// A question ended without its own answer: the news goes to the
    /// connections it was put to.
    pub(super) fn resolved(&mut self, resolved: wire::PermissionResolved, ob: &mut Outbox<'_>) {
        let Some(asked) = self.asked.get_mut(&resolved.permission_id) else {
            if let Some(conn) = ob.caller() {
                ob.push(To::Caller(conn), ServerFrame::PermissionResolved(resolved));
            }
            return;
        };
        asked.resolved = true;
        let owner = asked.owner;
        for &conn in &asked.addressees {
            let to = if conn == owner {
                To::Owner(conn)
            } else {
                To::Approver(conn)
            };
            ob.push(to, ServerFrame::PermissionResolved(resolved.clone()));
        }
    }

    /// A call's decision: to the connection that sent the call. When it
    /// had an open question, the other connections asked it hear that it
    /// was resolved (unless they already did).
    pub(super) fn decision(&mut self, decision: wire::Decision, ob: &mut Outbox<'_>) {
        let caller = ob.caller();
        let owned = self
            .owners
            .get_mut(decision.session_id.as_str())
            .and_then(|calls| calls.remove(decision.call_id.as_str()));
        let Some((owner, permission_id)) = owned else {
            match caller {
                Some(conn) => ob.push(To::Caller(conn), ServerFrame::Decision(decision)),
                None => tracing::warn!(
                    call = %decision.call_id,
                    "a decision with no connection to go to"
                ),
            }
            return;
        };
        if self
            .owners
            .get(decision.session_id.as_str())
            .is_some_and(HashMap::is_empty)
        {
            self.owners.remove(decision.session_id.as_str());
        }
        if Some(owner) != caller {
            ob.decided(owner, &decision.session_id);
        }
        if let Some(asked) = self.asked.remove(&permission_id) {
            if !asked.resolved {
                let reason = self.answered_by(caller);
                for &conn in &asked.addressees {
                    if Some(conn) != caller && conn != owner {
                        ob.push(
                            To::Approver(conn),
                            ServerFrame::PermissionResolved(wire::PermissionResolved {
                                permission_id: permission_id.clone(),
                                session_id: decision.session_id.clone(),
                                call_id: decision.call_id.clone(),
                                reason: reason.clone(),
                            }),
                        );
                    }
                }
            }
        }
        let to = if Some(owner) == caller {
            To::Caller(owner)
        } else {
            To::Owner(owner)
        };
        ob.push(to, ServerFrame::Decision(decision));
    }

    /// Why the other addressees' question closed when `caller` answered it.
    fn answered_by(&self, caller: Option<ConnId>) -> String {
        match caller.and_then(|conn| self.open.get(&conn)) {
            Some(Peer {
                role: Role::Approver,
                client: Some(name),
                ..
            }) => format!("answered by the approver `{name}`"),
            Some(Peer {
                role: Role::Approver,
                client: None,
                ..
            }) => "answered by another approver".to_string(),
            _ => "answered on another connection".to_string(),
        }
    }

    /// The name a connection goes by: its client name, else its role.
    fn client_of(&self, conn: Option<ConnId>) -> Option<String> {
        let peer = self.open.get(&conn?)?;
        Some(match (&peer.client, peer.role) {
            (Some(name), _) => name.clone(),
            (None, Role::Approver) => format!("approver connection {}", conn?),
            (None, Role::Agent) => format!("connection {}", conn?),
            (None, Role::Observer) => format!("observer connection {}", conn?),
        })
    }

    /// Who a connection's answers are from: its token first when it has
    /// one (`token alice (approver) via CLIENT`), else its name.
    fn signed(&self, conn: Option<ConnId>) -> Option<String> {
        let client = self.client_of(conn)?;
        let token = conn
            .and_then(|conn| self.open.get(&conn))
            .and_then(|peer| peer.token.as_ref());
        Some(match token {
            Some(token) => format!("{token} via {client}"),
            None => client,
        })
    }

    /// The open connections, other than observers, that sent calls in
    /// `session`, started it or set its mode, in the order they opened:
    /// those a change of its mode that none of them asked for is news for.
    pub(super) fn heard_in(&self, session: &str) -> Vec<ConnId> {
        let mut conns: Vec<ConnId> = self
            .open
            .iter()
            .filter(|(_, peer)| peer.role != Role::Observer)
            .filter(|(_, peer)| peer.sessions.contains(session) || peer.steered.contains(session))
            .map(|(conn, _)| *conn)
            .collect();
        conns.sort_unstable();
        conns
    }

    /// Every session an open connection (other than an observer) sent
    /// calls in, started or set the mode of, whether the broker still holds
    /// it or forgot it (an idle implicit session), in id order.
    pub(super) fn sessions_named(&self) -> Vec<String> {
        let named: std::collections::BTreeSet<&String> = self
            .open
            .values()
            .filter(|peer| peer.role != Role::Observer)
            .flat_map(|peer| peer.sessions.iter().chain(&peer.steered))
            .collect();
        named.into_iter().cloned().collect()
    }

    /// The names of the open connections that sent calls in `session`.
    pub(super) fn clients_in(&self, session: &str) -> Vec<String> {
        let mut conns: Vec<ConnId> = self
            .open
            .iter()
            .filter(|(_, peer)| peer.sessions.contains(session))
            .map(|(conn, _)| *conn)
            .collect();
        conns.sort_unstable();
        conns
            .into_iter()
            .filter_map(|conn| self.client_of(Some(conn)))
            .collect()
    }

    /// The open question `permission_id`, as it was put.
    pub(super) fn request(&self, permission_id: &str) -> Option<&wire::PermissionRequest> {
        self.asked
            .get(permission_id)
            .map(|asked| asked.request.as_ref())
    }
}

impl Peer {
    /// It started `session` or set its mode (`held`: as for [`Peer::used`]).
    fn steered(&mut self, session: &str, held: impl Fn(&str) -> bool) {
        if self.steered.insert(session.to_string())
            && self.steered.len() > self.steered_prune_at.max(256)
        {
            self.steered.retain(|id| held(id));
            self.steered_prune_at = 2 * self.steered.len();
        }
    }

    /// It sent a call in `session`; `held`: whether the broker still holds
    /// a session (those it forgot are pruned now and then, so a connection
    /// that runs through many sessions does not grow without end).
    fn used(&mut self, session: &str, held: impl Fn(&str) -> bool) {
        if self.last_session.as_deref() == Some(session) {
            return;
        }
        self.sessions.insert(session.to_string());
        self.last_session = Some(session.to_string());
        if self.sessions.len() > self.prune_at.max(256) {
            self.sessions.retain(|id| held(id));
            self.prune_at = 2 * self.sessions.len();
        }
    }
}

impl Broker {
    /// Handle one input; append what to write, addressed, to `out`.
    pub fn step(&mut self, input: Input<'_>, out: &mut Vec<Output>) {
        let from = out.len();
        // A grant whose lifetime is over is gone before anything is judged
        // or listed.
        self.expire_grants();
        self.handle_input(input, out);
        if !self.observers.is_empty() {
            self.observe(from, out);
        }
    }

    fn handle_input(&mut self, input: Input<'_>, out: &mut Vec<Output>) {
        match input {
            Input::Opened { conn } => {
                self.conns.open.entry(conn).or_default();
                out.push(Output {
                    to: To::Caller(conn),
                    frame: self.ready(),
                });
            }
            Input::Line { conn, line, number } => {
                self.decoded(conn, Decoded::line(line, number), Some(number), out)
            }
            Input::Decoded {
                conn,
                decoded,
                number,
            } => self.decoded(conn, decoded, Some(number), out),
            Input::Frame {
                conn,
                frame,
                number,
            } => self.decoded(conn, Decoded::frame(frame), number, out),
            Input::Unreadable {
                conn,
                error,
                number,
            } => self.reject_line(error, &mut Outbox::new(out, Some(conn), Some(number))),
            Input::Tick => self.expire(&mut Outbox::new(out, None, None)),
            Input::Closed { conn } => self.closed(conn, &mut Outbox::new(out, None, None)),
            Input::Stop => {
                if !self.stopped {
                    self.shutdown(&mut Outbox::new(out, None, None));
                }
            }
            Input::Unanswered => self.deny_open(
                wire::Source::Replay,
                "the recording holds no answer to this question",
                &mut Outbox::new(out, None, None),
            ),
            Input::NoAnswer {
                permission_id,
                reason,
            } => self.end_ask(
                &permission_id,
                wire::Source::Replay,
                reason,
                &mut Outbox::new(out, None, None),
            ),
            Input::Reload {
                policy,
                ask_timeout_ms,
            } => self.replace_policy(policy, ask_timeout_ms, &mut Outbox::new(out, None, None)),
            Input::Shared(news) => self.shared_news(news, out),
            Input::Administered { conn, reply, by } => {
                self.audit_tokens(conn, &reply, by);
                out.push(Output {
                    to: To::Caller(conn),
                    frame: reply,
                });
            }
        }
    }

    /// Record a token made or revoked over `conn` in the audit log: who
    /// (the connection's token), and the token's id, name, role, project
    /// and expiry; never its text.
    fn audit_tokens(&mut self, conn: ConnId, reply: &ServerFrame, by: String) {
        let (event, info, already) = match reply {
            ServerFrame::TokenCreated(created) => ("token_created", &created.info, None),
            ServerFrame::TokenRevoked(revoked) => {
                ("token_revoked", &revoked.info, Some(revoked.already))
            }
            _ => return,
        };
        let by = self.signed(Some(conn)).unwrap_or(by);
        let time = self.clock.wall_ms();
        if let Some(audit) = &mut self.audit {
            if let Err(err) = audit.token(time, event, info, already, &by) {
                tracing::error!("the audit log cannot be written: {err}");
            }
        }
    }

    /// The `ready` frame a connection gets when it opens.
    pub fn ready(&self) -> ServerFrame {
        ServerFrame::Ready(wire::Ready {
            protocol: wire::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            mode: self.policy.default_mode.as_str().to_string(),
            project_root: self.policy.project_root.to_string_lossy().into_owned(),
            policy_sources: self.origin.policy_sources.clone(),
            state_dir: self.origin.state_dir.clone(),
            role: None,
            client: None,
            projects: None,
        })
    }

    /// How many connections are approvers.
    pub fn approver_count(&self) -> usize {
        self.conns.approvers.len()
    }

    /// A call's decision, recorded in the audit log when one is kept, to
    /// the connection that sent the call.
    pub(super) fn decide(&mut self, decision: wire::Decision, ob: &mut Outbox<'_>) {
        let decision = if self.audit.is_some() {
            self.audited(decision, ob.caller())
        } else {
            decision
        };
        self.conns.decision(decision, ob);
    }

    /// One decoded line from `conn` (`line`: its number, when it has one):
    /// `hello` and answers are checked here (who may answer what);
    /// everything else goes to the broker's parts.
    fn decoded(
        &mut self,
        conn: ConnId,
        decoded: Decoded,
        line: Option<u64>,
        out: &mut Vec<Output>,
    ) {
        let ob = &mut Outbox::new(out, Some(conn), line);
        // A line read whole makes its connection known; one too long to
        // read is only answered.
        let parsed = match decoded.0 {
            Parsed::Unreadable(error) => {
                self.reject_line(error, ob);
                return;
            }
            parsed => parsed,
        };
        let peer = self.conns.open.entry(conn).or_default();
        let (frame, ahead) = match parsed {
            Parsed::Frame(frame, ahead) => (frame, ahead),
            Parsed::Invalid {
                error,
                session_start,
            } => {
                let from = ob.len();
                self.reject_line(error, ob);
                if let (false, Some(id)) = (self.stopped, session_start) {
                    self.shut_refused(&id, from, ob);
                }
                return;
            }
            Parsed::Blank | Parsed::Unreadable(_) => return,
        };
        let observer = peer.role == Role::Observer;
        let sessions = &self.sessions;
        match &frame {
            ClientFrame::ToolCall(call) => {
                peer.used(&call.session_id, |id| sessions.contains_key(id))
            }
            ClientFrame::SessionStart(wire::SessionStart { session_id, .. })
            | ClientFrame::SetMode(wire::SetMode { session_id, .. })
                if !observer =>
            {
                peer.steered(session_id, |id| sessions.contains_key(id))
            }
            _ => {}
        }
        // Error frames about a frame that decoded carry the ids it names (a
        // tool call's one error, a duplicate, names them itself: its ids
        // are not copied for every call).
        if !matches!(frame, ClientFrame::ToolCall(_)) {
            ob.about(FrameIds::of(&frame));
        }
        if observer
            && !matches!(
                frame,
                ClientFrame::Hello(_)
                    | ClientFrame::ListSessions(_)
                    | ClientFrame::ListPending(_)
                    | ClientFrame::ListTools(_)
                    | ClientFrame::ListGrants(_)
                    | ClientFrame::GetReminder(_)
            )
        {
            let why = "an observer only watches and lists: it may send hello, list_sessions, list_pending, list_tools, list_grants and get_reminder";
            match frame {
                // Every call with a readable id gets its one decision.
                ClientFrame::ToolCall(call) => {
                    let decision = wire::Decision {
                        session_id: call.session_id,
                        call_id: call.call_id,
                        decision: wire::Verdict::Deny,
                        source: wire::Source::Invalid,
                        reason: format!("{why}; it cannot make calls"),
                        rule: None,
                        message: None,
                        reminder: None,
                        child_session_id: None,
                    };
                    self.decide(decision, ob);
                }
                _ => ob.error(ErrorCode::Forbidden, why.to_string()),
            }
            return;
        }
        match frame {
            ClientFrame::Hello(hello) => self.hello(conn, hello, ob),
            ClientFrame::PermissionResponse(response)
                if self
                    .conns
                    .asked
                    .get(&response.permission_id)
                    .is_some_and(|asked| !asked.addressees.contains(&conn)) =>
            {
                // Not asked there: as if the question did not exist.
                let id = response.permission_id;
                ob.error_naming(
                    ErrorCode::UnknownPermission,
                    format!("no request has the id `{id}`"),
                    None,
                    None,
                    Some(id),
                );
            }
            frame => {
                if let (ClientFrame::PermissionResponse(response), Some(_)) = (&frame, &self.audit)
                {
                    self.audit_answer(conn, response);
                }
                let answer = match &frame {
                    ClientFrame::PermissionResponse(response) if !self.observers.is_empty() => {
                        self.answer_note(conn, response)
                    }
                    _ => None,
                };
                let at = ob.len();
                self.handle(frame, ahead, ob);
                if let Some(answer) = answer {
                    // Taken: the question is closed.
                    if self.conns.request(&answer.permission_id).is_none() {
                        self.observers.answered(at, answer);
                    }
                }
            }
        }
    }

    /// What observers are told if `response` from `conn` is taken.
    fn answer_note(
        &self,
        conn: ConnId,
        response: &wire::PermissionResponse,
    ) -> Option<wire::PermissionAnswered> {
        let request = self.conns.request(&response.permission_id)?;
        Some(wire::PermissionAnswered {
            permission_id: response.permission_id.clone(),
            session_id: request.session_id.clone(),
            call_id: request.call_id.clone(),
            response: response.response,
            message: response.message.clone(),
            patterns: response.patterns.clone(),
            expires_in: response.expires_in,
            by: self.signed(Some(conn)),
        })
    }

    /// Only `conn` may be an approver from now on (`serve --approver`: the
    /// in-process approver's connection). The agent's pipe is then never an
    /// answerer: its `hello` as an approver is refused, and questions never
    /// go back to it, even when the approver has gone.
    pub fn reserve_approver(&mut self, conn: ConnId) {
        self.conns.sole_approver = Some(conn);
    }

    /// `hello`: the connection's role and name; an approver gets every open
    /// question at once, except those about its own calls.
    fn hello(&mut self, conn: ConnId, hello: wire::Hello, ob: &mut Outbox<'_>) {
        let all_projects = hello.projects == Some(wire::Projects::All);
        if all_projects && !self.shared.active() {
            // Not about a line: no line number.
            ob.push(To::Caller(conn), ServerFrame::Error(wire::ErrorFrame::new(
                ErrorCode::InvalidFrame,
                "this broker shares no store (it was started without --store), so it knows only its own project's questions: `\"projects\": \"all\"` needs a broker on a shared store".to_string(),
            )));
            return;
        }
        if hello.role == Role::Approver && self.conns.sole_approver.is_some_and(|a| a != conn) {
            // Not about a line: no line number.
            ob.push(To::Caller(conn), ServerFrame::Error(wire::ErrorFrame::new(
                ErrorCode::Forbidden,
                "this connection cannot be an approver: toolgate was started with its own approver (--approver), which alone answers questions".to_string(),
            )));
            return;
        }
        let peer = self.conns.open.entry(conn).or_default();
        let was = peer.role;
        peer.role = hello.role;
        peer.client.clone_from(&hello.client);
        peer.all_projects = all_projects && hello.role != Role::Agent;
        match hello.role {
            Role::Observer => self.observers.watch(conn, hello.session_id.clone()),
            _ => self.observers.unwatch(conn),
        }
        let mut ready = self.ready();
        if let ServerFrame::Ready(ready) = &mut ready {
            ready.role = Some(hello.role);
            ready.client = hello.client;
            ready.projects = all_projects.then_some(wire::Projects::All);
        }
        ob.push(To::Caller(conn), ready);
        match (was, hello.role) {
            (Role::Agent, Role::Approver) => {
                self.conns.approvers.push(conn);
                let mut open: Vec<(u64, &String)> = self
                    .conns
                    .asked
                    .keys()
                    .map(|id| (self.questions.seq(id), id))
                    .collect();
                open.sort();
                let ids: Vec<String> = open.into_iter().map(|(_, id)| id.clone()).collect();
                for id in ids {
                    if let Some(asked) = self.conns.asked.get_mut(&id) {
                        // Never a question about its own call (another
                        // project's: below).
                        if !asked.addressees.contains(&conn)
                            && asked.owner != conn
                            && !asked.foreign
                        {
                            asked.addressees.push(conn);
                            ob.push(
                                To::Approver(conn),
                                ServerFrame::PermissionRequest(asked.request.clone()),
                            );
                        }
                    }
                }
            }
            (Role::Approver, Role::Agent | Role::Observer) => self.leave_approvers(conn, ob),
            _ => {}
        }
        self.conns.follow_projects(conn, ob);
    }

    /// `conn` is no longer an approver: it stops being asked, and questions
    /// nobody else hears go back to the connections that made the calls.
    fn leave_approvers(&mut self, conn: ConnId, ob: &mut Outbox<'_>) {
        self.conns.approvers.retain(|&c| c != conn);
        let mut orphans: Vec<(u64, String)> = Vec::new();
        let owner_answers = self.conns.sole_approver.is_none() && !self.conns.fleet;
        for (id, asked) in &mut self.conns.asked {
            asked.addressees.retain(|&c| c != conn);
            // Back to the connection that made the call, unless only the
            // broker's own approver may answer: then the question waits.
            if asked.addressees.is_empty()
                && owner_answers
                && self.conns.open.contains_key(&asked.owner)
            {
                orphans.push((self.questions.seq(id), id.clone()));
            }
        }
        orphans.sort();
        for (_, id) in orphans {
            if let Some(asked) = self.conns.asked.get_mut(&id) {
                asked.addressees.push(asked.owner);
                ob.push(
                    To::Owner(asked.owner),
                    ServerFrame::PermissionRequest(asked.request.clone()),
                );
            }
        }
    }

    /// A connection closed: it stops hearing questions (questions only it
    /// heard go back to their callers first), and then its own open calls
    /// are denied.
    fn closed(&mut self, conn: ConnId, ob: &mut Outbox<'_>) {
        let Some(peer) = self.conns.open.remove(&conn) else {
            return;
        };
        self.observers.unwatch(conn);
        for asked in self.conns.asked.values_mut() {
            asked.addressees.retain(|&c| c != conn);
        }
        let mut own: Vec<(u64, String)> = self
            .conns
            .asked
            .iter()
            .filter(|(_, asked)| asked.owner == conn)
            .map(|(id, _)| (self.questions.seq(id), id.clone()))
            .collect();
        own.sort();
        if peer.role == Role::Approver {
            self.leave_approvers(conn, ob);
        }
        for (_, id) in own {
            let session = self.questions.session_of(&id);
            self.end_ask(
                &id,
                wire::Source::Cancel,
                "the connection that made the call closed before the question was answered"
                    .to_string(),
                ob,
            );
            if let Some(session) = session {
                self.sessions.forget_idle(&session);
            }
        }
    }

    /// The name a connection goes by: its client name, else its role.
    pub(super) fn client_of(&self, conn: Option<ConnId>) -> Option<String> {
        self.conns.client_of(conn)
    }

    /// Who a connection's answers are from: its token (a remote
    /// connection's) and its name.
    pub(super) fn signed(&self, conn: Option<ConnId>) -> Option<String> {
        self.conns.signed(conn)
    }

    /// The connection `conn` (a remote one, just opened) holds the token
    /// `token` (`token NAME (ROLE)`): answers it gives are signed with it,
    /// in the audit log, to observers and in the shared store.
    pub fn vouch(&mut self, conn: ConnId, token: String) {
        self.conns.open.entry(conn).or_default().token = Some(token);
    }

    /// Record `response` in the audit log, as answered on `conn`.
    fn audit_answer(&mut self, conn: ConnId, response: &wire::PermissionResponse) {
        let by = self.signed(Some(conn)).unwrap_or_default();
        let call = self
            .questions
            .get(&response.permission_id)
            .map(|pending| (pending.session_id.clone(), pending.call_id.clone()));
        // An answer to no open question is refused (an error frame), not
        // recorded.
        let Some(call) = call else {
            return;
        };
        let time = self.clock.wall_ms();
        if let Some(audit) = &mut self.audit {
            let call = Some((call.0.as_str(), call.1.as_str()));
            if let Err(err) = audit.answer(time, response, call, &by) {
                tracing::error!("the audit log cannot be written: {err}");
            }
        }
    }

    /// `decision`, recorded in the audit log; a decision that cannot be
    /// recorded is a denial (nothing runs unrecorded).
    fn audited(&mut self, mut decision: wire::Decision, caller: Option<ConnId>) -> wire::Decision {
        let key = (decision.session_id.clone(), decision.call_id.clone());
        let time = self.clock.wall_ms();
        let asked_at = self
            .conns
            .owners
            .get(key.0.as_str())
            .and_then(|calls| calls.get(key.1.as_str()))
            .and_then(|(_, id)| self.conns.asked.get(id))
            .map(|asked| asked.request.timestamp);
        // An answer given on another broker is signed as the store names
        // who gave it.
        let answered_by = (decision.source == wire::Source::User)
            .then(|| {
                self.shared
                    .applying_by
                    .clone()
                    .or_else(|| self.signed(caller))
            })
            .flatten();
        let parent = self
            .sessions
            .get(key.0.as_str())
            .and_then(|session| session.parent.clone());
        let Some(audit) = &mut self.audit else {
            return decision;
        };
        let note = audit.notes.remove(&key);
        let written = audit.decision(
            &decision,
            super::audit::Context {
                time,
                parent: parent.as_deref(),
                note,
                answered_by,
                waited_ms: asked_at.map(|at| time.saturating_sub(at)),
            },
        );
        if let Err(err) = written {
            tracing::error!(call = %decision.call_id, "the audit log cannot be written: {err}");
            if decision.decision == wire::Verdict::Allow {
                decision.decision = wire::Verdict::Deny;
                decision.source = wire::Source::Invalid;
                decision.reason = format!(
                    "the audit log cannot be written ({err}), so the call is denied rather than run unrecorded"
                );
                decision.rule = None;
            }
        }
        decision
    }
}
