//! `toolgate check`: decide one call as `serve` would in a fresh session and
//! show the whole way to the answer (see `toolgate::check`).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use toolgate::say;

use super::broker::{open, BrokerFlags};
use super::flags::{PolicyArgs, ServeArgs};

/// The flags of `toolgate check`. It decides one call in a fresh session,
/// with no grants: the state, audit, approver and socket flags of `serve`
/// do not apply to it.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The session's scope, as `session_start`'s `permissions`:
    /// '{"commandPatterns":["git *"]}'.
    #[arg(long, value_name = "JSON")]
    session_scope: Option<String>,
    /// The tool's whole input as a JSON object, instead of SUBJECT.
    #[arg(long, value_name = "JSON", conflicts_with = "subject")]
    input: Option<String>,
    /// The directory the agent reports for the call (relative to the
    /// project root).
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The tool, as an agent names it (bash, Bash, run_shell_command,
    /// edit, Write, webfetch, mcp__server__tool, ...).
    #[arg(value_name = "TOOL")]
    tool: String,
    /// The command, path, URL or pattern.
    #[arg(value_name = "SUBJECT")]
    subject: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// `toolgate check`: see [`toolgate::check`].
/// `outer`: the flags given before `check`.
pub fn run(mut check: CheckArgs, outer: ServeArgs) -> ExitCode {
    check.policy = check.policy.or(outer.policy);
    let usage = |message: String| {
        say!("toolgate check: {message}");
        ExitCode::from(2)
    };
    let scope = match check.session_scope.as_deref().map(|text| {
        serde_json::from_str::<toolgate_protocol::ScopeSpec>(text)
            .map(toolgate::convert::scope_rules)
            .map_err(|err| format!("--session-scope is not a scope: {err}"))
    }) {
        None => None,
        Some(Ok(rules)) => Some(rules),
        Some(Err(err)) => return usage(err),
    };
    let flags = BrokerFlags {
        policy: check.policy.clone(),
        ..BrokerFlags::default()
    };
    let Ok(opened) = open(flags, false) else {
        return ExitCode::from(2);
    };
    let policy = opened.policy.clone();
    let spec = policy.registry.lookup(&check.tool).into_owned();
    let input = match (&check.input, &check.subject) {
        (Some(text), _) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(input)) => input,
            Ok(_) => return usage("--input is not a JSON object".to_string()),
            Err(err) => return usage(format!("--input is not JSON: {err}")),
        },
        (None, Some(subject)) => match toolgate::check::input_for(&spec, subject) {
            Some(input) => input,
            None => {
                return usage(format!(
                    "`{}` takes no subject; give its input with --input JSON (or none)",
                    check.tool
                ))
            }
        },
        (None, None) => serde_json::Map::new(),
    };
    let floor = match (&policy.mode_floor, opened.configured_mode) {
        (Some((_, origin)), Some(asked)) if policy.floored(asked) != asked => {
            Some((asked, origin.as_str()))
        }
        _ => None,
    };
    let request = toolgate::check::Request {
        tool: &check.tool,
        input: &input,
        cwd: check.cwd.as_deref(),
        mode: policy.default_mode,
        floor,
    };
    let evaluation = match toolgate::check::evaluate(&policy, &request, scope) {
        Ok(evaluation) => evaluation,
        Err(err) => return usage(err),
    };
    // A `use_mcp_tool` call is judged as the MCP call it makes: that tool's
    // registry entry is the one to show.
    let spec = match toolgate::check::mcp_call(&request) {
        Some(mcp) => policy.registry.lookup(&mcp.name).into_owned(),
        None => spec,
    };
    let text = if check.json {
        toolgate::check::to_json(&request, &spec, &evaluation).to_string() + "\n"
    } else {
        toolgate::check::to_text(&request, &spec, &evaluation)
    };
    let mut out = std::io::stdout().lock();
    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        say!("toolgate check: cannot write: {err}");
        return ExitCode::from(2);
    }
    match evaluation.action {
        toolgate_policy::Action::Allow => ExitCode::SUCCESS,
        toolgate_policy::Action::Deny => ExitCode::from(1),
        toolgate_policy::Action::Ask => ExitCode::from(3),
    }
}
