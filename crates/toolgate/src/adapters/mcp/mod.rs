//! `toolgate mcp`: an MCP server on stdio whose one tool, `approve`, is
//! Claude Code's permission-prompt tool (`claude -p --permission-prompt-tool
//! mcp__toolgate__approve`).
//!
//! Claude Code calls `approve` with `{tool_name, input, tool_use_id}` for a
//! call that none of its own rules allows, and obeys one text content block
//! holding `{"behavior":"allow","updatedInput":INPUT}` or
//! `{"behavior":"deny","message":…}`. The decision is made by a [`Decide`]:
//! in-process from the policy (as `toolgate hook claude` decides), or by a
//! running broker over its socket, where a human approver may answer.
//!
//! A hand-written JSON-RPC 2.0 server (one JSON object per line), speaking
//! both eras of MCP:
//! - the `initialize` handshake, for protocol versions 2024-11-05,
//!   2025-03-26, 2025-06-18 and 2025-11-25: the client's version is echoed
//!   when it is one of them, else 2025-11-25 is offered; until `initialize`
//!   only `ping` is served;
//! - 2026-07-28, which has no handshake: `server/discover`, then requests
//!   carrying `_meta["io.modelcontextprotocol/protocolVersion"]`; another
//!   version there is answered with error -32022 naming the supported ones.
//!
//! Claude Code 2.1.328 probes `server/discover` at 2026-07-28 first and falls
//! back to `initialize` 2025-11-25 when the server does not know the method;
//! the official Python SDK's client does the same.
//!
//! Fail closed: whatever goes wrong while deciding a well-formed `approve`
//! call (bad arguments, a broker that cannot be reached, a question nobody
//! can answer) is a `deny` naming the reason; JSON-RPC errors are only for
//! messages that are not a valid request. End of input ends the server.
//!
//! One task serves it all on a single-threaded tokio runtime ([`serve`]):
//! it reads lines with the broker's line codec, answers what it can at
//! once, and awaits each call that may take a person's time beside its
//! input ([`run`]), so that pings, other calls and cancellations are
//! answered meanwhile. Its parts:
//! - `rpc`: the protocol, without I/O;
//! - `decide`: the question and its answer, and [`InProcess`];
//! - `remote`: [`Remote`], each call a future on a connection of its own.

mod decide;
#[cfg(unix)]
mod remote;
mod rpc;

use std::collections::HashMap;
use std::io;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use decide::{Approval, Decide, InProcess, Started, Verdict, NO_HUMAN};
#[cfg(unix)]
pub use remote::Remote;
pub use rpc::{approve_tool, Handled, Later, Server, HANDSHAKE_VERSIONS, MODERN_VERSION};

use crate::transport::lines::{AsyncReader, Line};

/// Serve MCP on stdin/stdout until end of input (see [`run`]), on a
/// runtime of its own.
pub fn serve<D: Decide>(server: &mut Server<D>, limit: usize) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(run(tokio::io::stdin(), tokio::io::stdout(), server, limit));
    // A read of stdin may still wait on tokio's blocking thread: it is
    // not waited for.
    runtime.shutdown_background();
    served
}

/// Serve MCP on `input`/`output` until end of input. Lines longer than
/// `limit` bytes are skipped without being buffered, answered with a parse
/// error. A call whose decision may take a person's time is awaited beside
/// the input, and answered when decided, unless the client cancelled it
/// first (`notifications/cancelled`: the call is withdrawn and gets no
/// reply). At end of input the calls still waiting are withdrawn (a call
/// the broker decided before the withdrawal reached it keeps that
/// decision; the others are denied), each answered, and then it returns.
pub async fn run<R, W, D>(
    input: R,
    mut output: W,
    server: &mut Server<D>,
    limit: usize,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    D: Decide,
{
    let mut lines = AsyncReader::new(input, limit);
    // The calls being decided, by request id (as JSON text): which one
    // (an id may be reused once its call was cancelled) and how to
    // withdraw it.
    let mut waiting: HashMap<String, (u64, CancellationToken)> = HashMap::new();
    let mut deciding: JoinSet<(String, u64, rpc::Reply)> = JoinSet::new();
    let mut started = 0u64;
    let mut reading = true;
    loop {
        let handled = tokio::select! {
            line = lines.next_line(), if reading => match line? {
                Some(Line::Data(line)) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Some(Line::Data(line)) => server.handle(&line),
                Some(Line::TooLarge(_)) => Handled::Reply(rpc::error(
                    Value::Null,
                    rpc::PARSE_ERROR,
                    format!("the message is longer than {limit} bytes"),
                )),
                None => {
                    // The client is gone: withdraw what still waits (each
                    // is then answered), and end when all have been.
                    reading = false;
                    for (_, withdrawn) in waiting.values() {
                        withdrawn.cancel();
                    }
                    continue;
                }
            },
            Some(decided) = deciding.join_next() => {
                // A decision's future cannot panic (no code here may), so
                // a task that did not finish is one aborted: none is.
                let Ok((key, which, reply)) = decided else { continue };
                // A cancelled call gets no reply.
                if waiting.get(&key).is_some_and(|(current, _)| *current == which) {
                    waiting.remove(&key);
                    send(&mut output, reply).await?;
                }
                continue;
            }
            else => return output.flush().await,
        };
        match handled {
            Handled::Reply(reply) => send(&mut output, reply).await?,
            Handled::Cancel(id) => {
                if let Some((_, withdrawn)) = waiting.remove(&id.to_string()) {
                    withdrawn.cancel();
                }
            }
            Handled::Later(later) => {
                let key = later.id.to_string();
                if waiting.contains_key(&key) {
                    // Never started: nothing was sent for it.
                    later.withdrawn.cancel();
                    let reply = rpc::error(
                        later.id,
                        rpc::INVALID_REQUEST,
                        "a request with this id is still being answered",
                    );
                    send(&mut output, reply).await?;
                    continue;
                }
                started += 1;
                waiting.insert(key.clone(), (started, later.withdrawn));
                let (which, reply) = (started, later.reply);
                deciding.spawn(async move { (key, which, reply.await) });
            }
        }
    }
}

/// Write one reply line, if there is one.
async fn send<W: AsyncWrite + Unpin>(output: &mut W, reply: rpc::Reply) -> io::Result<()> {
    let Some(reply) = reply else {
        return Ok(());
    };
    let mut line = serde_json::to_vec(&reply).map_err(io::Error::other)?;
    line.push(b'\n');
    output.write_all(&line).await?;
    output.flush().await
}
