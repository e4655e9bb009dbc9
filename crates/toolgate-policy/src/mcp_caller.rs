//! Tools that call one MCP tool by name: Roo Code's `use_mcp_tool` (Kilo
//! Code and Cline have the same tool) carries `server_name`, `tool_name`
//! and `arguments`, and the agent runs that server's tool with those
//! arguments. Such a call is judged as the call `mcp__SERVER__TOOL` with
//! `arguments` as its input, the name Claude Code gives the same tool: its
//! kind and `subject` declaration in the policy's `tools`, its rules, its
//! grants, its place in a session's scope, the MCP default subject
//! ([`crate::MCP_SUBJECT_FIELDS`]) of its arguments. So a rule written for
//! `mcp__github__create_issue` decides a Roo Code call of that tool too.
//!
//! The calling tool keeps a say that can only tighten:
//! - it must pass a session's scope like any tool (a scope with
//!   `allowedTools` names it as well as the MCP tool);
//! - the rules keyed on its own permission (`use_mcp_tool`) are matched
//!   against the name `mcp__SERVER__TOOL`: a deny or an ask among them
//!   tightens the answer (`{"use_mcp_tool": {"mcp__github__*": "deny"}}`),
//!   an allow loosens nothing.
//!
//! Decided here, fail closed: a call whose `server_name` or `tool_name` is
//! missing, empty or not text, whose `arguments` are neither an object nor
//! a JSON object in a string (Roo Code sends them as text), or whose
//! `server_name` would make the name ambiguous (it holds `__` or ends with
//! `_`, so `mcp__a___b` could be server `a` or `a_`) is unusable: denied
//! with source `invalid`. No `arguments`, `null` or `""` is an empty input,
//! as Roo Code reads it.

use serde_json::{Map, Value};

/// The tools that call one MCP tool by name (see the module documentation).
pub const MCP_CALLERS: &[&str] = &["use_mcp_tool"];

/// True when `tool` calls one MCP tool by name (`use_mcp_tool`).
pub fn is_mcp_caller(tool: &str) -> bool {
    MCP_CALLERS.contains(&tool)
}

/// The MCP call a `use_mcp_tool` call makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpCall {
    /// `server_name`, as given.
    pub server: String,
    /// `tool_name`, as given.
    pub tool: String,
    /// The MCP tool's name as Claude Code writes it: `mcp__SERVER__TOOL`.
    pub name: String,
    /// `arguments`, decoded when given as text: the MCP tool's input.
    pub arguments: Map<String, Value>,
}

/// Read the MCP call out of a `use_mcp_tool` input; `Err` says what cannot
/// be read.
pub fn mcp_call(input: &Map<String, Value>) -> Result<McpCall, String> {
    let server = name(input, "server_name")?;
    if server.contains("__") || server.ends_with('_') {
        return Err(format!(
            "`server_name` `{server}` holds `__` or ends with `_`, so `mcp__{server}__…` would not say which server it is"
        ));
    }
    let tool = name(input, "tool_name")?;
    let arguments = match input.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(Value::String(text)) if text.is_empty() => Map::new(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(arguments)) => arguments,
            Ok(other) => {
                return Err(format!(
                    "`arguments` is {}, not a JSON object",
                    what(&other)
                ))
            }
            Err(err) => return Err(format!("`arguments` is not JSON: {err}")),
        },
        Some(other) => return Err(format!("`arguments` is {}, not an object", what(other))),
    };
    Ok(McpCall {
        name: format!("mcp__{server}__{tool}"),
        server,
        tool,
        arguments,
    })
}

/// A name field: text, not empty.
fn name(input: &Map<String, Value>, field: &str) -> Result<String, String> {
    match input.get(field) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(format!("`{field}` is empty")),
        None | Some(Value::Null) => Err(format!("the input has no `{field}`")),
        Some(other) => Err(format!("`{field}` is {}, not text", what(other))),
    }
}

/// What a JSON value is, for a message.
fn what(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use serde_json::json;

    use super::*;

    /// `name arguments`, or `error: why`.
    fn check(input: Value, expected: &str) {
        let actual = match mcp_call(input.as_object().unwrap()) {
            Ok(call) => format!("{} {}", call.name, Value::Object(call.arguments)),
            Err(why) => format!("error: {why}"),
        };
        assert_eq!(actual, expected, "{input}");
    }

    #[test]
    fn calls_read_from_inputs() {
        let cases = [
            // Roo Code sends `arguments` as text; an object is read too.
            (
                json!({"server_name": "gw", "tool_name": "invoke", "arguments": "{\"name\":\"gmail_list\"}"}),
                r#"mcp__gw__invoke {"name":"gmail_list"}"#,
            ),
            (
                json!({"server_name": "github", "tool_name": "create_issue", "arguments": {"title": "x"}}),
                r#"mcp__github__create_issue {"title":"x"}"#,
            ),
            // No arguments, null or "": an empty input.
            (
                json!({"server_name": "s", "tool_name": "t"}),
                "mcp__s__t {}",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": null}),
                "mcp__s__t {}",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": ""}),
                "mcp__s__t {}",
            ),
            // A tool name may hold `__`: the first `__` after the server's
            // name still separates the two.
            (
                json!({"server_name": "s", "tool_name": "a__b"}),
                "mcp__s__a__b {}",
            ),
            (
                json!({"server_name": "_s-1.x", "tool_name": "_t"}),
                "mcp___s-1.x___t {}",
            ),
            // Missing, empty or not text.
            (
                json!({"tool_name": "t"}),
                "error: the input has no `server_name`",
            ),
            (
                json!({"server_name": null, "tool_name": "t"}),
                "error: the input has no `server_name`",
            ),
            (
                json!({"server_name": "s"}),
                "error: the input has no `tool_name`",
            ),
            (
                json!({"server_name": "", "tool_name": "t"}),
                "error: `server_name` is empty",
            ),
            (
                json!({"server_name": "s", "tool_name": ""}),
                "error: `tool_name` is empty",
            ),
            (
                json!({"server_name": 7, "tool_name": "t"}),
                "error: `server_name` is a number, not text",
            ),
            (
                json!({"server_name": ["s"], "tool_name": "t"}),
                "error: `server_name` is an array, not text",
            ),
            (
                json!({"server_name": "s", "tool_name": {"name": "t"}}),
                "error: `tool_name` is an object, not text",
            ),
            // A server name that would make the name ambiguous.
            (
                json!({"server_name": "a__b", "tool_name": "t"}),
                "error: `server_name` `a__b` holds `__` or ends with `_`, so `mcp__a__b__…` would not say which server it is",
            ),
            (
                json!({"server_name": "a_", "tool_name": "t"}),
                "error: `server_name` `a_` holds `__` or ends with `_`, so `mcp__a___…` would not say which server it is",
            ),
            // Arguments that are no object.
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": "{\"name\":"}),
                "error: `arguments` is not JSON: EOF while parsing a value at line 1 column 8",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": "[1]"}),
                "error: `arguments` is an array, not a JSON object",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": "  "}),
                "error: `arguments` is not JSON: EOF while parsing a value at line 1 column 2",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": 3}),
                "error: `arguments` is a number, not an object",
            ),
            (
                json!({"server_name": "s", "tool_name": "t", "arguments": ["a"]}),
                "error: `arguments` is an array, not an object",
            ),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }
}
