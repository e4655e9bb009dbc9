//! What speaks each agent's language and turns it into the broker's.
//!
//! - [`claude_bridge`]: `toolgate claude-bridge`, between an orchestrator
//!   and Claude Code's stream-json control protocol.
//! - [`bind`]: an agent put under a parent session, within a scope, by
//!   the orchestrator that starts it.
//! - [`hook`]: one tool call from an agent's hook (Claude Code, Codex,
//!   Gemini CLI, qwen-code), decided in-process or by a running broker.
//! - [`mcp`]: `toolgate mcp`, Claude Code's permission-prompt tool.
//! - [`link`]: `toolgate link-bridge`, link-assistant/agent's
//!   `permission_request`s answered through toolgate.
//! - [`import`]: `toolgate import`, other agents' permission settings as
//!   a policy.

pub mod bind;
pub mod claude_bridge;
pub mod hook;
pub mod import;
#[cfg(unix)]
pub mod link;
pub mod mcp;
