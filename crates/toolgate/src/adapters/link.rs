//! `toolgate link-bridge`: link-assistant/agent under toolgate.
//!
//! link-assistant's `agent` asks before a tool runs by writing a
//! `permission_request` line on its stdout (`permissionID`, `sessionID`,
//! `callID`, `tool` one of `bash`, `edit`, `webfetch`, `title`,
//! `metadata.command` / `metadata.filePath` / `metadata.url`; its `write`
//! and `patch` ask as `edit`) and waits for a `permission_response` line on
//! its stdin (`permissionID`, `response` `once`, `always` or `reject`; it
//! reads no `message`). That is how the agent 0.26.0 writes it
//! (`scripts/e2e-link-agent` runs it). The bridge starts the agent, passes the
//! orchestrator's lines (its own stdin) to the agent and the agent's lines
//! to the orchestrator (its own stdout) unchanged, except each
//! `permission_request`, which it decides through toolgate (in-process, or
//! the broker on `--socket`, whose approvers may answer an `ask`) and
//! answers itself: `once` for `allow`, `reject` for `deny`. What asks and
//! nobody toolgate reaches can answer ([`Verdict::Ask`]) goes to the
//! orchestrator, as the agent wrote it.
//!
//! A `permission_response` written to the bridge reaches the agent only
//! when it answers a question put to the orchestrator; any other is dropped
//! (said on stderr): only toolgate, and whom it asks, answer the agent, so
//! whoever writes the agent's input cannot approve a call it was not asked
//! about.
//!
//! So that every mutating call asks, the agent runs with its permission
//! mode set to `ask` and without its `--permission` override: what it was
//! given there is toolgate's to apply instead ([`Spellings`]). Its hard
//! layer (`--read-only`, `--disable-tools`) is passed on unchanged and
//! applied by toolgate too.

use std::collections::HashMap;
use std::process::ExitStatus;

use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::adapters::mcp::{Approval, Decide, Started, Verdict};
use crate::transport::lines::{AsyncReader, Line};

/// The longest line relayed either way (a longer one is dropped, and said).
const LINE_LIMIT: usize = 64 << 20;

/// The agent's permission mode (`--permission-mode`).
pub const MODE_ENV: &str = "LINK_ASSISTANT_AGENT_PERMISSION_MODE";
/// The agent's OpenCode-style override (`--permission`).
pub const PERMISSION_ENV: &str = "LINK_ASSISTANT_AGENT_PERMISSION";
/// The agent's hard read-only layer (`--read-only`).
pub const READ_ONLY_ENV: &str = "LINK_ASSISTANT_AGENT_READ_ONLY";
/// The tools the agent removes (`--disable-tools`).
pub const DISABLE_TOOLS_ENV: &str = "LINK_ASSISTANT_AGENT_DISABLE_TOOLS";

/// What the agent's command line and environment say about permissions,
/// spelled as link-assistant/agent spells it (a flag beats its variable,
/// as in the agent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spellings {
    /// `--permission-mode` / [`MODE_ENV`], as a toolgate mode name;
    /// `readonly` when `--read-only` / [`READ_ONLY_ENV`] is set.
    pub mode: Option<String>,
    /// `--permission` / [`PERMISSION_ENV`]: its origin and its JSON.
    pub permission: Option<(String, String)>,
    /// `--disable-tools` / [`DISABLE_TOOLS_ENV`]: toolgate permission
    /// names denied outright.
    pub disabled: Vec<String>,
}

/// A flag's value: `--name VALUE` or `--name=VALUE` at `args[at]`; the
/// value and how many arguments it took.
fn flag_value<'a>(args: &'a [String], at: usize, name: &str) -> Option<(Option<&'a str>, usize)> {
    let arg = args[at].as_str();
    if arg == name {
        return Some((args.get(at + 1).map(String::as_str), 2));
    }
    arg.strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('='))
        .map(|value| (Some(value), 1))
}

impl Spellings {
    /// Read the agent's arguments (after its program) and environment.
    /// `Err` names what cannot be used.
    pub fn read(
        args: &[String],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Spellings, String> {
        let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let (mut mode, mut permission, mut read_only, mut disabled) = (None, None, false, None);
        let mut at = 0;
        while at < args.len() {
            if args[at] == "--" {
                break;
            }
            let mut took = 1;
            if let Some((value, n)) = flag_value(args, at, "--permission-mode") {
                let value = value.ok_or("--permission-mode needs a mode")?;
                mode = Some((value.to_string(), "--permission-mode"));
                took = n;
            } else if let Some((value, n)) = flag_value(args, at, "--permission") {
                let value = value.ok_or("--permission needs JSON")?;
                permission = Some(("the agent's --permission".to_string(), value.to_string()));
                took = n;
            } else if let Some((value, n)) = flag_value(args, at, "--disable-tools") {
                disabled = Some(value.ok_or("--disable-tools needs a list")?.to_string());
                took = n;
            } else if args[at] == "--read-only" {
                read_only = true;
            }
            at += took;
        }
        let mode = mode.or_else(|| env(MODE_ENV).map(|value| (value, MODE_ENV)));
        let mode = match mode {
            None => None,
            Some((value, from)) => Some(link_mode(&value).map_err(|err| format!("{from}: {err}"))?),
        };
        let permission = permission
            .or_else(|| env(PERMISSION_ENV).map(|text| (PERMISSION_ENV.to_string(), text)));
        if let Some((from, text)) = &permission {
            serde_json::from_str::<Map<String, Value>>(text)
                .map_err(|err| format!("{from} is not a JSON object: {err}"))?;
        }
        read_only |= env(READ_ONLY_ENV).is_some_and(|value| {
            matches!(
                value.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes"
            )
        });
        let disabled = disabled.or_else(|| env(DISABLE_TOOLS_ENV));
        let mut names: Vec<String> = Vec::new();
        for tool in disabled.iter().flat_map(|list| list.split(',')) {
            let name = permission_name(tool.trim());
            if !name.is_empty() && !names.iter().any(|known| known == name) {
                names.push(name.to_string());
            }
        }
        Ok(Spellings {
            mode: if read_only {
                Some("readonly".to_string())
            } else {
                mode
            },
            permission,
            disabled: names,
        })
    }

    /// The `--disable-tools` list as a permission override that denies
    /// each, or `None` when it is empty.
    pub fn disabled_override(&self) -> Option<String> {
        if self.disabled.is_empty() {
            return None;
        }
        let denied: Map<String, Value> = self
            .disabled
            .iter()
            .map(|name| (name.clone(), json!("deny")))
            .collect();
        Some(Value::Object(denied).to_string())
    }
}

/// link-assistant's mode as a toolgate mode name.
fn link_mode(value: &str) -> Result<String, String> {
    match value.trim() {
        mode @ ("auto" | "plan" | "readonly" | "ask") => Ok(mode.to_string()),
        other => Err(format!(
            "{other:?} is not one of link-assistant/agent's modes (auto, plan, readonly, ask)"
        )),
    }
}

/// The toolgate permission a link-assistant tool falls under: its file
/// tools are all `edit` (so disabling `write` denies edits too: stricter,
/// never looser).
fn permission_name(tool: &str) -> &str {
    match tool {
        "edit" | "write" | "multiedit" | "patch" => "edit",
        other => other,
    }
}

/// The agent's command line as the bridge runs it: without the mode and
/// the `--permission` it was given, and `--permission-mode ask` last
/// (before a `--`, if any).
pub fn agent_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < args.len() {
        if args[at] == "--" {
            break;
        }
        let took = flag_value(args, at, "--permission-mode")
            .or_else(|| flag_value(args, at, "--permission"))
            .map(|(_, n)| n);
        match took {
            Some(n) => at += n,
            None => {
                out.push(args[at].clone());
                at += 1;
            }
        }
    }
    out.extend(["--permission-mode".to_string(), "ask".to_string()]);
    out.extend(args[at..].iter().cloned());
    out
}

/// A `permission_request` from the agent, as a question for toolgate: its
/// `permissionID` and the call in Claude Code's terms (the tool names the
/// decision path knows). `Err` says why it cannot be decided (it is
/// rejected).
pub fn approval(
    request: &Map<String, Value>,
    mode: Option<&str>,
) -> Result<(String, Approval), String> {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
    let id = text(request.get("permissionID"))
        .or_else(|| text(request.get("permission_id")))
        .filter(|id| !id.is_empty())
        .ok_or("a permission_request without a permissionID")?;
    let empty = Map::new();
    let metadata = request
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let title = text(request.get("title"));
    let subject = |key: &str| text(metadata.get(key)).or_else(|| title.clone());
    let tool = request.get("tool").and_then(Value::as_str).unwrap_or("");
    // The agent's `patch` asks once per file, as `edit` with `filePath`; a
    // move also names `movePath`: two paths, one written and one removed,
    // which one call cannot say. It fails closed (the agent's 0.26.0 does
    // not offer `patch` to the model).
    if tool == "edit" {
        if let Some(moved) = text(metadata.get("movePath")).filter(|moved| !moved.is_empty()) {
            return Err(format!(
                "{id}: an edit that moves a file to {moved}, which toolgate cannot judge as one call"
            ));
        }
    }
    let (name, input) = match tool {
        "bash" => ("Bash", json!({ "command": subject("command") })),
        "edit" => (
            "Write",
            json!({ "file_path": subject("filePath"), "content": "" }),
        ),
        "webfetch" => ("WebFetch", json!({ "url": subject("url"), "prompt": "" })),
        other => {
            return Err(format!(
                "{id}: a permission_request for tool {other:?}, which toolgate cannot judge"
            ))
        }
    };
    let Value::Object(input) = input else {
        return Err(format!("{id}: unreadable request"));
    };
    if input.values().any(Value::is_null) {
        return Err(format!(
            "{id}: a {tool} permission_request naming no subject"
        ));
    }
    let approval = Approval {
        tool_name: name.to_string(),
        input,
        tool_use_id: text(request.get("callID")).filter(|call| !call.is_empty()),
        permission_mode: mode.map(str::to_string),
        agent_id: None,
    };
    Ok((id, approval))
}

/// The agent's answer to `permission`: `once` for allow, `reject` for deny.
pub fn response(permission: &str, verdict: &Verdict) -> Value {
    let answer = match verdict {
        Verdict::Allow => "once",
        Verdict::Deny(_) | Verdict::Ask(_) => "reject",
    };
    json!({"type": "permission_response", "permissionID": permission, "response": answer})
}

/// Run `program args` (already rewritten, [`agent_args`]) with `env` set
/// in its environment and `unset` removed from it, relaying between this
/// process's stdin/stdout and the agent; `decide` answers each
/// `permission_request`. Returns the agent's exit status once it ended and
/// its output was passed on.
pub async fn relay<D: Decide>(
    decide: &mut D,
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    unset: &[&str],
    mode: Option<&str>,
) -> std::io::Result<ExitStatus> {
    use std::process::Stdio;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for name in unset {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .map_err(|err| std::io::Error::new(err.kind(), format!("cannot start {program}: {err}")))?;
    let (Some(agent_in), Some(agent_out)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the agent's pipes were not opened"));
    };
    // Lines as bytes (a line that is not UTF-8 passes through as it is),
    // framed by the broker's own codec.
    let mut agent_lines = AsyncReader::new(agent_out, LINE_LIMIT);
    let mut own_lines = AsyncReader::new(tokio::io::stdin(), LINE_LIMIT);
    let mut deciding: JoinSet<(String, String, Verdict)> = JoinSet::new();
    let mut relay = Relay {
        agent_in: Some(agent_in),
        out: tokio::io::stdout(),
        open: HashMap::new(),
        forwarded: HashMap::new(),
    };
    let (mut own_open, mut agent_open) = (true, true);
    while agent_open {
        tokio::select! {
            line = agent_lines.next_line(), if agent_open => match line? {
                None => agent_open = false,
                Some(Line::TooLarge(_)) => {
                    crate::say!("toolgate link-bridge: dropped a line of the agent's over {LINE_LIMIT} bytes");
                }
                Some(Line::Data(line)) => match permission_request(&line) {
                    None => relay.tell_orchestrator(&line).await?,
                    Some(request) => match approval(&request, mode) {
                        Err(why) => {
                            let id = request.get("permissionID").or_else(|| request.get("permission_id"))
                                .and_then(Value::as_str).unwrap_or("").to_string();
                            crate::say!("toolgate link-bridge: reject: {why}");
                            send(&mut relay.agent_in, &response(&id, &Verdict::Deny(why))).await;
                        }
                        Ok((id, approval)) => {
                            let withdrawn = CancellationToken::new();
                            let said = format!("{} {}", approval.tool_name, Value::Object(approval.input.clone()));
                            relay.open.insert(id.clone(), (withdrawn.clone(), line.to_vec()));
                            match decide.start(&approval, withdrawn) {
                                Started::Now(verdict) => relay.decided(&id, &said, verdict, own_open).await?,
                                Started::Later(future) => {
                                    deciding.spawn(async move { (id, said, future.await) });
                                }
                            }
                        }
                    },
                },
            },
            decided = deciding.join_next(), if !deciding.is_empty() => {
                if let Some(Ok((id, said, verdict))) = decided {
                    relay.decided(&id, &said, verdict, own_open).await?;
                }
                if !own_open && deciding.is_empty() && relay.forwarded.is_empty() {
                    // Nothing more will be said to the agent.
                    relay.agent_in = None;
                }
            },
            line = own_lines.next_line(), if own_open => match line {
                Ok(Some(Line::Data(line))) => match object_of_type(&line, "permission_response") {
                    Some(answer) => relay.orchestrator_answered(&answer).await,
                    None => {
                        let mut bytes = line.to_vec();
                        bytes.push(b'\n');
                        write_agent(&mut relay.agent_in, &bytes).await;
                    }
                },
                Ok(Some(Line::TooLarge(_))) => {
                    crate::say!("toolgate link-bridge: dropped a line of the input over {LINE_LIMIT} bytes");
                }
                Ok(None) | Err(_) => {
                    own_open = false;
                    // Nobody is left to answer what the orchestrator was asked.
                    for (id, said) in std::mem::take(&mut relay.forwarded) {
                        let why = "toolgate: the orchestrator's input ended before it answered";
                        answer(&mut relay.agent_in, &id, &Verdict::Deny(why.into()), &said).await;
                    }
                    if deciding.is_empty() {
                        relay.agent_in = None;
                    }
                }
            },
        }
    }
    // The agent's output ended: whatever it still asked cannot be answered.
    for (_, (withdrawn, _)) in relay.open {
        withdrawn.cancel();
    }
    drop(relay.agent_in);
    child.wait().await
}

/// The relay's state: the two ends it writes, the questions toolgate is
/// deciding (their withdrawal and line) and those put to the orchestrator
/// (how each is shown on stderr).
struct Relay {
    agent_in: Option<tokio::process::ChildStdin>,
    out: tokio::io::Stdout,
    open: HashMap<String, (CancellationToken, Vec<u8>)>,
    forwarded: HashMap<String, String>,
}

impl Relay {
    /// Pass a line on to the orchestrator.
    async fn tell_orchestrator(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.out.write_all(line).await?;
        self.out.write_all(b"\n").await?;
        self.out.flush().await
    }

    /// toolgate decided question `id`: its answer goes to the agent, or,
    /// when nobody toolgate reaches could answer ([`Verdict::Ask`]) and the
    /// orchestrator can still answer, the question goes to the orchestrator
    /// as the agent wrote it.
    async fn decided(
        &mut self,
        id: &str,
        said: &str,
        verdict: Verdict,
        orchestrator_open: bool,
    ) -> std::io::Result<()> {
        let Some((_, line)) = self.open.remove(id) else {
            return Ok(());
        };
        match verdict {
            Verdict::Ask(why) if orchestrator_open => {
                let why = why.lines().next().unwrap_or_default();
                crate::say!("toolgate link-bridge: asked the orchestrator {id} {said}: {why}");
                self.forwarded.insert(id.to_string(), said.to_string());
                self.tell_orchestrator(&line).await
            }
            Verdict::Ask(why) => {
                let verdict = Verdict::Deny(format!(
                    "{why}; the orchestrator's input has ended, so it cannot be asked either"
                ));
                answer(&mut self.agent_in, id, &verdict, said).await;
                Ok(())
            }
            verdict => {
                answer(&mut self.agent_in, id, &verdict, said).await;
                Ok(())
            }
        }
    }

    /// A `permission_response` from the orchestrator: passed on when it
    /// answers a question the orchestrator was asked, as `once` or
    /// `reject` (an `always` is a `once`: the agent would stop asking, and
    /// toolgate would see no more of those calls; an answer it cannot read
    /// is a `reject`). Any other is dropped: only toolgate, and whom it
    /// asks, answer the agent.
    async fn orchestrator_answered(&mut self, answer: &Map<String, Value>) {
        let id = answer
            .get("permissionID")
            .or_else(|| answer.get("permission_id"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(said) = self.forwarded.remove(id) else {
            crate::say!("toolgate link-bridge: dropped a permission_response from the input that answers no question put to the orchestrator: only toolgate answers the agent");
            return;
        };
        let response = match answer.get("response").and_then(Value::as_str) {
            Some("once") => "once",
            Some("always") => {
                crate::say!("toolgate link-bridge: the orchestrator's `always` to {id} is taken as `once`: toolgate must go on seeing those calls");
                "once"
            }
            Some("reject") => "reject",
            other => {
                crate::say!("toolgate link-bridge: the orchestrator's answer to {id} is not once, always or reject ({other:?}): rejected");
                "reject"
            }
        };
        crate::say!("toolgate link-bridge: {response} {id} {said}: the orchestrator's answer");
        let mut frame =
            json!({"type": "permission_response", "permissionID": id, "response": response});
        if let Some(message) = answer.get("message").and_then(Value::as_str) {
            frame["message"] = json!(message);
        }
        send(&mut self.agent_in, &frame).await;
    }
}

/// The line, when it is a `permission_request` object.
fn permission_request(line: &[u8]) -> Option<Map<String, Value>> {
    object_of_type(line, "permission_request")
}

/// The line, when it is a JSON object whose `type` is `kind`.
fn object_of_type(line: &[u8], kind: &str) -> Option<Map<String, Value>> {
    let text = std::str::from_utf8(line).ok()?;
    if !text.contains(kind) {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) if object.get("type").and_then(Value::as_str) == Some(kind) => {
            Some(object)
        }
        _ => None,
    }
}

/// Answer the agent, and say the answer on stderr.
async fn answer(
    agent_in: &mut Option<tokio::process::ChildStdin>,
    id: &str,
    verdict: &Verdict,
    said: &str,
) {
    match verdict {
        Verdict::Allow => crate::say!("toolgate link-bridge: once {id} {said}"),
        Verdict::Deny(why) | Verdict::Ask(why) => {
            // The reason's first line (a reminder for the model follows).
            let why = why.lines().next().unwrap_or_default();
            crate::say!("toolgate link-bridge: reject {id} {said}: {why}");
        }
    }
    send(agent_in, &response(id, verdict)).await;
}

/// Write one frame to the agent.
async fn send(agent_in: &mut Option<tokio::process::ChildStdin>, frame: &Value) {
    let mut bytes = frame.to_string().into_bytes();
    bytes.push(b'\n');
    write_agent(agent_in, &bytes).await;
}

/// Write to the agent's stdin; once that fails (the agent closed it) it is
/// dropped and nothing more is written.
async fn write_agent(agent_in: &mut Option<tokio::process::ChildStdin>, bytes: &[u8]) {
    let Some(stdin) = agent_in.as_mut() else {
        return;
    };
    let written = async {
        stdin.write_all(bytes).await?;
        stdin.flush().await
    };
    if written.await.is_err() {
        *agent_in = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn flags_beat_variables_and_read_only_wins() {
        let env = |name: &str| match name {
            MODE_ENV => Some("auto".to_string()),
            PERMISSION_ENV => Some(r#"{"bash":"allow"}"#.to_string()),
            DISABLE_TOOLS_ENV => Some("bash, write,patch".to_string()),
            _ => None,
        };
        let read = Spellings::read(&strings(&["--permission-mode=plan"]), env).unwrap();
        assert_eq!(read.mode.as_deref(), Some("plan"));
        assert_eq!(read.permission.as_ref().unwrap().0, PERMISSION_ENV);
        assert_eq!(read.disabled, ["bash", "edit"]);
        let read =
            Spellings::read(&strings(&["--read-only", "--permission-mode", "auto"]), env).unwrap();
        assert_eq!(read.mode.as_deref(), Some("readonly"));
        let read = Spellings::read(&[], |name: &str| {
            (name == READ_ONLY_ENV).then(|| "1".to_string())
        })
        .unwrap();
        assert_eq!(read.mode.as_deref(), Some("readonly"));
        assert!(
            Spellings::read(&strings(&["--permission-mode", "yolo"]), |_: &str| None)
                .unwrap_err()
                .contains("yolo")
        );
        assert!(Spellings::read(&strings(&["--permission", "[1]"]), |_: &str| None).is_err());
    }

    #[test]
    fn the_agent_runs_in_ask_mode_without_its_override() {
        let args = strings(&[
            "--permission-mode",
            "plan",
            "--permission={}",
            "--read-only",
            "--model",
            "m",
        ]);
        assert_eq!(
            agent_args(&args),
            strings(&["--read-only", "--model", "m", "--permission-mode", "ask"])
        );
    }

    #[test]
    fn requests_become_calls_and_unknown_ones_are_refused() {
        let request = |value: Value| value.as_object().unwrap().clone();
        let (id, bash) = approval(
            &request(json!({"permissionID":"p1","callID":"c1","tool":"bash","title":"ls","metadata":{"command":"rm -rf x"}})),
            Some("plan"),
        )
        .unwrap();
        assert_eq!((id.as_str(), bash.tool_name.as_str()), ("p1", "Bash"));
        assert_eq!(bash.input["command"], "rm -rf x");
        assert_eq!(bash.permission_mode.as_deref(), Some("plan"));
        let (_, edit) = approval(
            &request(json!({"permission_id":"p2","tool":"edit","title":"/w/a.txt"})),
            None,
        )
        .unwrap();
        assert_eq!(edit.input["file_path"], "/w/a.txt");
        assert!(approval(
            &request(json!({"permissionID":"p3","tool":"mystery"})),
            None
        )
        .is_err());
        assert!(approval(&request(json!({"permissionID":"p4","tool":"bash"})), None).is_err());
        assert!(approval(&request(json!({"tool":"bash","title":"ls"})), None).is_err());
        // The agent's patch tool moving a file: two paths, rejected.
        let moved = approval(
            &request(json!({"permissionID":"p5","tool":"edit","title":"/w/b.txt",
                "metadata":{"filePath":"/w/a.txt","movePath":"/w/b.txt","changeType":"move"}})),
            None,
        );
        assert!(moved.unwrap_err().contains("/w/b.txt"));
        let (_, patched) = approval(
            &request(json!({"permissionID":"p6","tool":"edit","title":"/w/a.txt",
                "metadata":{"filePath":"/w/a.txt","movePath":null,"changeType":"update"}})),
            None,
        )
        .unwrap();
        assert_eq!(patched.input["file_path"], "/w/a.txt");
    }
}
