//! What decides an `approve` call: the question, its answer, and the
//! in-process decider (a broker of this process's own, as `toolgate hook
//! claude` decides).

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;
use toolgate_policy::Mode;

use crate::adapters::bind::Binding;
use crate::adapters::hook;
use crate::broker::{Broker, Input};

/// One permission question from Claude Code.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// Claude Code's tool name (`Bash`, `Write`, `mcp__server__tool`, ...).
    pub tool_name: String,
    /// The tool's input, as the model wrote it.
    pub input: Map<String, Value>,
    /// Claude Code's id of the call, when it sent one.
    pub tool_use_id: Option<String>,
    /// The agent's own permission mode, when it has one (a bridge reads it
    /// from the agent's command line): with `--mode`, the stricter applies,
    /// as for a hook.
    pub permission_mode: Option<String>,
    /// The sub-agent making the call (Claude Code's `agent_id`), when the
    /// agent says: the call is decided in that sub-agent's session, as a
    /// hook decides it.
    pub agent_id: Option<String>,
}

/// The answer to an [`Approval`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call may run with its input unchanged.
    Allow,
    /// The call is refused; the message reaches the model.
    Deny(String),
    /// The policy asks a person, and nobody this decider reaches can
    /// answer (no broker, or no approver connected to it): the question is
    /// already withdrawn. A client that can ask someone else (a bridge asks
    /// its orchestrator) may; any other denies with the message, which says
    /// why and how to attach an approver.
    Ask(String),
}

impl Verdict {
    /// What a client that cannot ask anyone answers: an [`Verdict::Ask`]
    /// is a denial with its message.
    pub fn or_deny(self) -> Verdict {
        match self {
            Verdict::Ask(message) => Verdict::Deny(message),
            verdict => verdict,
        }
    }
}

/// Whatever decides approvals: the in-process broker, or a broker over its
/// socket. It must always answer; what it cannot decide it denies.
pub trait Decide {
    /// Start deciding one call: decided at once, or (when the answer may
    /// take a person's time) a future the server awaits beside its input,
    /// so that it goes on answering pings, other calls and cancellations.
    /// `withdrawn` is cancelled when the client withdraws the call or its
    /// input ends: the future then ends soon, with the decision the broker
    /// made before the withdrawal reached it, or a denial.
    fn start(&mut self, approval: &Approval, withdrawn: CancellationToken) -> Started;

    /// Decide the calls started from now on in `session`. A bridge learns
    /// its agent's session id only once the agent has started and said it
    /// (`toolgate claude-bridge` reads it from Claude Code's `system/init`).
    fn set_session(&mut self, session: &str);
}

/// A call being decided: see [`Decide::start`].
pub enum Started {
    /// Decided.
    Now(Verdict),
    /// To be decided by this future.
    Later(Pin<Box<dyn Future<Output = Verdict> + Send>>),
}

/// Decides in this process with a broker built from the policy flags, as
/// `toolgate hook claude` does. An `ask` cannot reach a human here: it is
/// [`Verdict::Ask`], saying how to attach one.
pub struct InProcess {
    broker: Broker,
    session: String,
    flag: Option<Mode>,
    default: Mode,
    binding: Binding,
    calls: u64,
    client: &'static str,
}

impl InProcess {
    /// Decide in `session`, in mode `flag` (`--mode`, `TOOLGATE_MODE` or the
    /// policy file's `mode`) or else `default`, the session bound as
    /// `binding` says.
    pub fn new(
        broker: Broker,
        session: String,
        flag: Option<Mode>,
        default: Mode,
        binding: Binding,
    ) -> InProcess {
        InProcess {
            broker,
            session,
            flag,
            default,
            binding,
            calls: 0,
            client: "mcp",
        }
    }

    /// The subcommand deciding, as named in call ids and in the denial of
    /// an `ask` (`mcp` unless said otherwise).
    pub fn client(mut self, client: &'static str) -> InProcess {
        self.client = client;
        self
    }
}

/// What `toolgate mcp` says when no human can be asked in-process.
pub const NO_HUMAN: &str = "no human can be asked here: `toolgate mcp` decides in-process; to have a person answer, start a broker (`toolgate serve --listen unix`) and an approver (`toolgate approve`), and give `toolgate mcp` `--socket PATH` (or TOOLGATE_SOCKET)";

/// What `toolgate CLIENT` says when no human can be asked in-process.
pub fn no_human(client: &str) -> String {
    NO_HUMAN.replace("toolgate mcp", &format!("toolgate {client}"))
}

impl Decide for InProcess {
    fn start(&mut self, approval: &Approval, _withdrawn: CancellationToken) -> Started {
        Started::Now(self.decide(approval))
    }

    fn set_session(&mut self, session: &str) {
        session.clone_into(&mut self.session);
    }
}

impl InProcess {
    /// Decide `approval` now: what would ask a person is withdrawn and
    /// [`Verdict::Ask`].
    fn decide(&mut self, approval: &Approval) -> Verdict {
        self.calls += 1;
        let call = approval
            .tool_use_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{}-{}", self.client, self.calls));
        let mut input = json!({
            "session_id": self.session,
            "tool_name": approval.tool_name,
            "tool_input": approval.input,
            "tool_use_id": call,
        });
        if let Ok(cwd) = std::env::current_dir() {
            input["cwd"] = json!(cwd.to_string_lossy());
        }
        if let Some(mode) = &approval.permission_mode {
            input["permission_mode"] = json!(mode);
        }
        if let Some(agent) = &approval.agent_id {
            input["agent_id"] = json!(agent);
        }
        let answer = hook::decide(
            hook::Agent::Claude,
            &input,
            self.flag,
            self.default,
            &self.binding,
            &mut self.broker,
        );
        let mut reason = match answer.reason.strip_prefix("toolgate hook: ") {
            Some(rest) => format!("toolgate: {rest}"),
            None => answer.reason,
        };
        if let Some(reminder) = &answer.reminder {
            reason = format!("{reason}\n\n{reminder}");
        }
        match answer.decision {
            "allow" => Verdict::Allow,
            "ask" => {
                // The question stays pending in the broker: withdraw it, so
                // the same call can be asked again and nothing waits on it.
                let cancel = toolgate_protocol::Cancel {
                    session_id: self.session.clone(),
                    call_id: call,
                };
                let mut out = Vec::new();
                self.broker.step(
                    Input::Frame {
                        conn: 0,
                        frame: toolgate_protocol::ClientFrame::Cancel(cancel),
                        number: None,
                    },
                    &mut out,
                );
                self.broker.commit();
                Verdict::Ask(format!("{reason}; {}", no_human(self.client)))
            }
            _ => Verdict::Deny(reason),
        }
    }
}
