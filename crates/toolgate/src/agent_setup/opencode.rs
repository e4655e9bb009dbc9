//! OpenCode has no command hook: it loads JavaScript plugins from
//! `.opencode/plugins/` (the project's) and `~/.config/opencode/plugins/`
//! (the user's), and a plugin's `tool.execute.before` that throws stops the
//! call, the error reaching the model. `toolgate init opencode` writes one
//! such plugin, `toolgate.js`, which runs toolgate's hook for every call
//! (`toolgate hook claude`: the hook takes OpenCode's own tool names and
//! arguments, `bash`, `write`, `edit` with `filePath`, ... as they are) and
//! lets the call run only on `allow`. An `ask`, an answer it cannot read or
//! a hook that does not answer in time stops the call: OpenCode's plugin
//! cannot ask a person (give `--socket`, and the broker's approvers answer
//! before the hook does).

use std::path::Path;

/// The first line of the plugin, by which `init` and `doctor` know it.
pub const MARK: &str = "// toolgate: written by `toolgate init opencode`; run again to update.";

/// The plugin running `argv` (the hook command's words) for each call,
/// killed after `timeout_secs`.
pub fn plugin(argv: &[String], timeout_secs: u64) -> String {
    let argv = serde_json::to_string(argv).unwrap_or_else(|_| "[]".to_string());
    let timeout_ms = timeout_secs.saturating_mul(1000);
    format!(
        r#"{MARK}
// Every tool call OpenCode makes is decided by toolgate first; only `allow`
// lets it run. See toolgate's docs/init.md.
import {{ spawnSync }} from "node:child_process";

const TOOLGATE = {argv};

export const Toolgate = async ({{ directory }}) => ({{
  "tool.execute.before": async (input, output) => {{
    const call = {{
      hook_event_name: "PreToolUse",
      session_id: input.sessionID,
      tool_name: input.tool,
      tool_input: output.args ?? {{}},
      tool_use_id: input.callID,
      cwd: directory,
    }};
    const run = spawnSync(TOOLGATE[0], TOOLGATE.slice(1), {{
      input: JSON.stringify(call),
      encoding: "utf8",
      timeout: {timeout_ms},
    }});
    let answer = {{}};
    try {{
      answer = JSON.parse(run.stdout).hookSpecificOutput ?? {{}};
    }} catch {{}}
    if (answer.permissionDecision === "allow") return;
    if (answer.permissionDecision === "ask") {{
      throw new Error(
        `toolgate asks before this call, and an OpenCode plugin cannot ask a person: ${{answer.permissionDecisionReason ?? ""}}`,
      );
    }}
    const why = (run.stderr ?? "").trim() || `exit status ${{run.status}}`;
    throw new Error(answer.permissionDecisionReason ?? `toolgate did not answer (${{why}}): the call is refused`);
  }},
}});
"#
    )
}

/// The hook command's words in a plugin `init` wrote (`None`: not one).
pub fn argv_of(text: &str) -> Option<Vec<String>> {
    if !text.starts_with(MARK) {
        return None;
    }
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("const TOOLGATE = "))?;
    serde_json::from_str(line.trim_end_matches(';')).ok()
}

/// Where OpenCode loads the user's plugins from.
pub fn user_plugins(home: &Path, config_home: Option<&Path>) -> std::path::PathBuf {
    match config_home {
        Some(config) => config.join("opencode/plugins"),
        None => home.join(".config/opencode/plugins"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn the_command_is_read_back_from_the_plugin() {
        let argv: Vec<String> = [
            "/opt/tool gate/toolgate",
            "hook",
            "claude",
            "--socket",
            "/run/a \"b\".sock",
        ]
        .iter()
        .map(|word| word.to_string())
        .collect();
        let text = plugin(&argv, 60);
        assert_eq!(argv_of(&text), Some(argv));
        assert!(text.contains("timeout: 60000"));
        assert_eq!(argv_of("export const Other = 1;\n"), None);
    }
}
