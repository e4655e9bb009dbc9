//! Every built-in tool name of `policy.md` is known to the registry with an
//! explicit kind, and the registry's built-in table holds nothing else: a new
//! tool cannot slip in unclassified, and a listed one cannot fall through to
//! "unknown tool".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use toolgate_policy::{Kind, Registry};

/// The built-in tool names of the first-wave policy requirements, agent by agent, with
/// the kind each must have. A name two agents share (`glob`) is listed twice.
const SPEC: &[(&str, &[(&str, Kind)])] = &[
    (
        "Claude Code",
        &[
            ("Read", Kind::Read),
            ("Edit", Kind::Edit),
            ("MultiEdit", Kind::Edit),
            ("Write", Kind::Edit),
            ("NotebookEdit", Kind::Edit),
            ("Bash", Kind::Shell),
            ("Grep", Kind::Search),
            ("Glob", Kind::Search),
            ("LS", Kind::List),
            ("WebFetch", Kind::Fetch),
            ("WebSearch", Kind::Fetch),
            ("Task", Kind::Task),
            ("TodoWrite", Kind::Think),
            ("ExitPlanMode", Kind::ExitPlan),
        ],
    ),
    (
        "OpenCode",
        &[
            ("read", Kind::Read),
            ("edit", Kind::Edit),
            ("write", Kind::Edit),
            ("patch", Kind::Edit),
            ("multiedit", Kind::Edit),
            ("bash", Kind::Shell),
            ("glob", Kind::Search),
            ("grep", Kind::Search),
            ("list", Kind::List),
            ("webfetch", Kind::Fetch),
            ("websearch", Kind::Fetch),
            ("task", Kind::Task),
            ("todowrite", Kind::Think),
            ("todoread", Kind::Think),
            ("question", Kind::Think),
        ],
    ),
    (
        "Codex",
        &[
            ("shell", Kind::Shell),
            ("exec_command", Kind::Shell),
            ("apply_patch", Kind::Edit),
            ("local_shell", Kind::Shell),
        ],
    ),
    (
        "Gemini CLI and qwen-code",
        &[
            ("read_file", Kind::Read),
            ("read_many_files", Kind::Read),
            ("write_file", Kind::Edit),
            ("replace", Kind::Edit),
            ("run_shell_command", Kind::Shell),
            ("glob", Kind::Search),
            ("search_file_content", Kind::Search),
            ("list_directory", Kind::List),
            ("web_fetch", Kind::Fetch),
            ("google_web_search", Kind::Fetch),
            // Appends to a memory file outside the project: a writer.
            ("save_memory", Kind::Edit),
            ("exit_plan_mode", Kind::ExitPlan),
        ],
    ),
    // Tools added for issue 8 (policy.md's list gains them): each agent's
    // further tools, and Roo Code's (Kilo Code and Cline share most names).
    (
        "Claude Code (further)",
        &[
            ("Agent", Kind::Task),
            ("NotebookRead", Kind::Read),
            ("AskUserQuestion", Kind::Think),
            ("BashOutput", Kind::Think),
            ("KillShell", Kind::Execute),
            ("KillBash", Kind::Execute),
            ("SlashCommand", Kind::Execute),
        ],
    ),
    ("OpenCode (further)", &[("codesearch", Kind::Fetch)]),
    (
        "Codex (further)",
        &[
            ("shell_command", Kind::Shell),
            ("write_stdin", Kind::Execute),
            ("view_image", Kind::Read),
            ("list_dir", Kind::List),
            ("grep_files", Kind::Search),
            ("update_plan", Kind::Think),
        ],
    ),
    (
        "Gemini CLI and qwen-code (further)",
        &[
            ("smart_edit", Kind::Edit),
            ("web_search", Kind::Fetch),
            ("write_todos", Kind::Think),
            ("todo_write", Kind::Think),
        ],
    ),
    (
        "Roo Code, Kilo Code and Cline",
        &[
            ("read_file", Kind::Read),
            ("write_to_file", Kind::Edit),
            ("apply_diff", Kind::Edit),
            ("insert_content", Kind::Edit),
            ("search_and_replace", Kind::Edit),
            ("replace_in_file", Kind::Edit),
            ("edit_file", Kind::Edit),
            ("generate_image", Kind::Edit),
            ("execute_command", Kind::Shell),
            ("terminal", Kind::Shell), // Zed
            ("search_files", Kind::Search),
            ("codebase_search", Kind::Search),
            ("list_files", Kind::List),
            ("list_code_definition_names", Kind::List),
            ("browser_action", Kind::Fetch),
            ("new_task", Kind::Task),
            ("run_slash_command", Kind::Execute),
            ("ask_followup_question", Kind::Think),
            ("update_todo_list", Kind::Think),
            ("fetch_instructions", Kind::Think),
            ("plan_mode_respond", Kind::Think),
        ],
    ),
    // Its `bash` and `edit` are OpenCode's names above.
    (
        "GitHub Copilot CLI",
        &[("view", Kind::Read), ("create", Kind::Edit)],
    ),
    (
        "Claude Code 2.1 (further)",
        &[
            ("Skill", Kind::Execute),
            ("ScheduleWakeup", Kind::Execute),
            ("Workflow", Kind::Execute),
            ("ListAgents", Kind::Think),
            ("ReportFindings", Kind::Think),
            ("ToolSearch", Kind::Think),
        ],
    ),
    (
        "Codex 0.169 (further)",
        &[
            ("request_user_input", Kind::Think),
            ("get_goal", Kind::Think),
            ("create_goal", Kind::Think),
            ("update_goal", Kind::Think),
            ("tool_search", Kind::Think),
        ],
    ),
    (
        "Gemini CLI 0.61 and qwen-code 0.15 (further)",
        &[
            ("grep_search", Kind::Search),
            ("invoke_agent", Kind::Task),
            ("agent", Kind::Task),
            ("activate_skill", Kind::Execute),
            ("skill", Kind::Execute),
            ("list_background_processes", Kind::Think),
            ("read_background_output", Kind::Think),
            ("task_stop", Kind::Execute),
            ("monitor", Kind::Execute),
            ("update_topic", Kind::Think),
            ("send_message", Kind::Think),
            ("enter_plan_mode", Kind::Think),
        ],
    ),
    (
        "Roo Code (further)",
        &[
            ("attempt_completion", Kind::Execute),
            ("switch_mode", Kind::Execute),
        ],
    ),
];

/// The tools each current CLI sends, as measured from its own model requests
/// (issue 11): every one must be known with a kind, never fall through to
/// "unknown tool".
const SENT_TODAY: &[(&str, &str)] = &[
    (
        "Claude Code 2.1.328",
        "Agent, Bash, Edit, ListAgents, Read, ReportFindings, ScheduleWakeup, Skill, ToolSearch, Workflow, Write",
    ),
    (
        "Codex 0.169.0",
        "exec_command, write_stdin, request_user_input, apply_patch, view_image, get_goal, create_goal, update_goal, tool_search, web_search",
    ),
    (
        "Gemini CLI 0.61.0",
        "update_topic, list_directory, read_file, grep_search, glob, replace, write_file, web_fetch, run_shell_command, list_background_processes, read_background_output, google_web_search, enter_plan_mode, invoke_agent, activate_skill",
    ),
    (
        "qwen-code 0.15.10",
        "tool_search, agent, task_stop, send_message, skill, list_directory, read_file, grep_search, glob, edit, write_file, run_shell_command, todo_write, web_fetch, monitor",
    ),
    (
        "Roo Code",
        "execute_command, write_to_file, apply_diff, read_file, list_files, search_files, new_task, ask_followup_question, attempt_completion, update_todo_list, switch_mode",
    ),
];

#[test]
fn every_tool_the_current_clis_send_has_a_kind() {
    let registry = Registry::default();
    let mut missing = Vec::new();
    for (agent, names) in SENT_TODAY {
        for name in names.split(", ") {
            let spec = registry.lookup(name);
            if !spec.known || spec.kind == Kind::Other {
                missing.push(format!("{agent}: `{name}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tools with no kind:\n{}",
        missing.join("\n")
    );
}

fn spec_names() -> impl Iterator<Item = (&'static str, Kind)> {
    SPEC.iter().flat_map(|(_, tools)| tools.iter().copied())
}

/// What the registry says of `name`: `known KIND` or `unknown`.
fn check(registry: &Registry, name: &str, expected: Kind) {
    let spec = registry.lookup(name);
    let actual = if spec.known && spec.kind != Kind::Other {
        format!("known {}", spec.kind.as_str())
    } else {
        format!("unclassified ({})", spec.kind.as_str())
    };
    assert_eq!(actual, format!("known {}", expected.as_str()), "{name}");
}

#[test]
fn every_spec_name_has_its_explicit_kind() {
    let registry = Registry::default();
    for (name, kind) in spec_names() {
        check(&registry, name, kind);
    }
}

#[test]
fn the_builtin_table_holds_only_spec_names_each_once() {
    let mut seen: Vec<&str> = Vec::new();
    for name in Registry::builtin_names() {
        assert!(
            spec_names().any(|(listed, _)| listed == name),
            "`{name}` is built in but not in policy.md's list: classify it in the spec and here"
        );
        assert!(!seen.contains(&name), "`{name}` is built in twice");
        seen.push(name);
    }
    for (name, _) in spec_names() {
        assert!(
            seen.contains(&name),
            "`{name}` is in policy.md but not built in"
        );
    }
}

#[test]
fn names_outside_the_table_are_unclassified() {
    let registry = Registry::default();
    for name in [
        "mcp__github__create_issue",
        "BASH",
        "edit_files",
        "Shell",
        "use_mcp_tool",
        "",
    ] {
        let spec = registry.lookup(name);
        assert_eq!((spec.known, spec.kind), (false, Kind::Other), "{name}");
    }
}
