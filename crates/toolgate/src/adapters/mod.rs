//! What speaks each agent's language and turns it into the broker's.
//!
//! - [`hook`]: one tool call from an agent's hook (Claude Code, Codex,
//!   Gemini CLI, qwen-code), decided in-process or by a running broker.
//! - [`mcp`]: `toolgate mcp`, Claude Code's permission-prompt tool.
//! - [`import`]: `toolgate import`, other agents' permission settings as
//!   a policy.

pub mod hook;
pub mod import;
pub mod mcp;
