//! Modes, actions and the mode table.

use std::fmt;
use std::str::FromStr;

/// How much a session may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Everything is allowed; only explicit `deny` rules hold.
    Auto,
    /// Reads and edits run; shell commands that are not read-only ask.
    AutoEdit,
    /// Reads run; everything else asks.
    Ask,
    /// Research only: writers are denied, fetches ask, leaving plan mode asks.
    Plan,
    /// Research only, and nothing ever asks: what would ask is denied.
    ReadOnly,
}

impl Mode {
    /// Every mode, loosest first.
    pub const ALL: [Mode; 5] = [
        Mode::Auto,
        Mode::AutoEdit,
        Mode::Ask,
        Mode::Plan,
        Mode::ReadOnly,
    ];

    /// The canonical name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::AutoEdit => "auto_edit",
            Mode::Ask => "ask",
            Mode::Plan => "plan",
            Mode::ReadOnly => "readonly",
        }
    }

    /// How strict the mode is: a child session may never be less strict than its parent.
    pub fn strictness(self) -> u8 {
        match self {
            Mode::Auto => 0,
            Mode::AutoEdit => 1,
            Mode::Ask => 2,
            Mode::Plan => 3,
            Mode::ReadOnly => 4,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is neither a mode nor an alias.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{0}` (expected auto, auto_edit, ask, plan or readonly, or an alias such as default, yolo, acceptEdits, read-only)")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(name: &str) -> Result<Mode, UnknownMode> {
        Ok(match name {
            "auto" | "yolo" | "bypassPermissions" => Mode::Auto,
            "auto_edit" | "acceptEdits" | "accept_edits" | "auto-edit" => Mode::AutoEdit,
            "ask" | "default" | "manual" => Mode::Ask,
            "plan" => Mode::Plan,
            "readonly" | "read-only" | "read_only" => Mode::ReadOnly,
            other => return Err(UnknownMode(other.to_string())),
        })
    }
}

/// What a rule, a mode or an evaluation says about a call. Ordered by
/// strictness, so combining answers is `max()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Run it.
    Allow,
    /// Ask the user.
    Ask,
    /// Refuse it.
    Deny,
}

impl Action {
    /// The name as written in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }

    /// Parse `allow`, `ask` or `deny`.
    pub fn parse(name: &str) -> Option<Action> {
        match name {
            "allow" => Some(Action::Allow),
            "ask" => Some(Action::Ask),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }
}

/// What kind of thing a tool does: the rows of the mode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Reads a file.
    Read,
    /// Searches file names or contents.
    Search,
    /// Lists a directory.
    List,
    /// Changes no state outside the conversation: todo lists, questions, plan notes.
    Think,
    /// Fetches from the network or searches the web.
    Fetch,
    /// Writes, patches, deletes or moves files.
    Edit,
    /// Runs a shell command (judged by shell analysis).
    Shell,
    /// Runs something that is not a shell command but is not read-only either.
    Execute,
    /// Leaves plan mode (asks for plan approval in plan mode).
    ExitPlan,
    /// Starts a sub-agent.
    Task,
    /// Unknown tools and MCP tools.
    Other,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 11] = [
        Kind::Read,
        Kind::Search,
        Kind::List,
        Kind::Think,
        Kind::Fetch,
        Kind::Edit,
        Kind::Shell,
        Kind::Execute,
        Kind::ExitPlan,
        Kind::Task,
        Kind::Other,
    ];

    /// The name used in policy files (`tools.NAME.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Search => "search",
            Kind::List => "list",
            Kind::Think => "think",
            Kind::Fetch => "fetch",
            Kind::Edit => "edit",
            Kind::Shell => "shell",
            Kind::Execute => "execute",
            Kind::ExitPlan => "exit_plan_mode",
            Kind::Task => "task",
            Kind::Other => "other",
        }
    }

    /// Parse a kind name; `write`, `patch`, `delete` and `move` are aliases of `edit`.
    pub fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "read" => Kind::Read,
            "search" => Kind::Search,
            "list" => Kind::List,
            "think" => Kind::Think,
            "fetch" => Kind::Fetch,
            "edit" | "write" | "patch" | "delete" | "move" => Kind::Edit,
            "shell" => Kind::Shell,
            "execute" => Kind::Execute,
            "exit_plan_mode" => Kind::ExitPlan,
            "task" => Kind::Task,
            "other" => Kind::Other,
            _ => return None,
        })
    }

    /// True for kinds that can change files, run programs or start agents:
    /// the ones `planModeAllowedTools` can never unlock.
    pub fn is_writer(self) -> bool {
        matches!(self, Kind::Edit | Kind::Shell | Kind::Execute | Kind::Task)
    }

    /// A short plural noun for reasons and reminders.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Read => "file reads",
            Kind::Search => "searches",
            Kind::List => "directory listings",
            Kind::Think => "todo lists, questions and notes",
            Kind::Fetch => "web fetches and web searches",
            Kind::Edit => "file edits, writes, patches, deletes and moves",
            Kind::Shell => "shell commands",
            Kind::Execute => "tools that run programs",
            Kind::ExitPlan => "leaving plan mode",
            Kind::Task => "sub-agents",
            Kind::Other => "other and MCP tools",
        }
    }
}

/// The mode table of protocol v1: what `mode` answers for a call of `kind`.
///
/// `shell_read_only` says whether every simple command of a shell call is
/// proven read-only; `plan_allowed` whether the tool is in `planModeAllowedTools`
/// (which never covers writers, see [`Kind::is_writer`]) or, for a sub-agent
/// launch, whether its type is in `readOnlyAgents` (a read-only sub-agent,
/// whose own calls are judged in plan mode like the parent's).
pub fn mode_answer(mode: Mode, kind: Kind, shell_read_only: bool, plan_allowed: bool) -> Action {
    use Action::{Allow, Ask, Deny};
    match kind {
        Kind::Read | Kind::Search | Kind::List | Kind::Think => Allow,
        Kind::Shell if shell_read_only => Allow,
        Kind::Fetch => match mode {
            Mode::Auto | Mode::AutoEdit => Allow,
            Mode::Ask | Mode::Plan => Ask,
            Mode::ReadOnly => Deny,
        },
        Kind::Edit => match mode {
            Mode::Auto | Mode::AutoEdit => Allow,
            Mode::Ask => Ask,
            Mode::Plan | Mode::ReadOnly => Deny,
        },
        Kind::Shell | Kind::Execute => match mode {
            Mode::Auto => Allow,
            Mode::AutoEdit | Mode::Ask => Ask,
            Mode::Plan | Mode::ReadOnly => Deny,
        },
        Kind::Task => match mode {
            Mode::Auto => Allow,
            Mode::AutoEdit | Mode::Ask => Ask,
            Mode::Plan if plan_allowed => Allow,
            Mode::Plan | Mode::ReadOnly => Deny,
        },
        Kind::ExitPlan => match mode {
            Mode::Auto | Mode::AutoEdit | Mode::Ask => Allow,
            Mode::Plan => Ask,
            Mode::ReadOnly => Deny,
        },
        Kind::Other => match mode {
            Mode::Auto => Allow,
            Mode::AutoEdit | Mode::Ask => Ask,
            Mode::Plan if plan_allowed => Allow,
            Mode::Plan | Mode::ReadOnly => Deny,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    #[test]
    fn aliases() {
        let cases = [
            ("default", Mode::Ask),
            ("manual", Mode::Ask),
            ("yolo", Mode::Auto),
            ("bypassPermissions", Mode::Auto),
            ("acceptEdits", Mode::AutoEdit),
            ("accept_edits", Mode::AutoEdit),
            ("auto-edit", Mode::AutoEdit),
            ("read-only", Mode::ReadOnly),
            ("read_only", Mode::ReadOnly),
            ("plan", Mode::Plan),
        ];
        for (name, mode) in cases {
            assert_eq!(name.parse::<Mode>().unwrap(), mode, "{name}");
        }
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>().unwrap(), mode);
        }
        assert!("Plan".parse::<Mode>().is_err());
    }

    /// The table of protocol-v1.md, row by row: auto, auto_edit, ask, plan, readonly.
    #[test]
    fn mode_table_matches_the_spec() {
        use Action::{Allow as A, Ask as Q, Deny as D};
        let rows: &[(&str, Kind, bool, [Action; 5])] = &[
            ("read", Kind::Read, false, [A, A, A, A, A]),
            ("search", Kind::Search, false, [A, A, A, A, A]),
            ("list", Kind::List, false, [A, A, A, A, A]),
            ("think", Kind::Think, false, [A, A, A, A, A]),
            ("fetch", Kind::Fetch, false, [A, A, Q, Q, D]),
            ("edit", Kind::Edit, false, [A, A, Q, D, D]),
            ("shell read-only", Kind::Shell, true, [A, A, A, A, A]),
            ("shell other", Kind::Shell, false, [A, Q, Q, D, D]),
            ("exit_plan_mode", Kind::ExitPlan, false, [A, A, A, Q, D]),
            ("task", Kind::Task, false, [A, Q, Q, D, D]),
            ("other", Kind::Other, false, [A, Q, Q, D, D]),
        ];
        for (name, kind, read_only, expected) in rows {
            for (mode, want) in Mode::ALL.iter().zip(expected) {
                assert_eq!(
                    mode_answer(*mode, *kind, *read_only, false),
                    *want,
                    "{name} in {mode}"
                );
            }
        }
        assert_eq!(mode_answer(Mode::Plan, Kind::Other, false, true), A);
        assert_eq!(mode_answer(Mode::ReadOnly, Kind::Other, false, true), D);
        // A read-only sub-agent type: launched in plan mode, never in
        // read-only mode (nothing that starts agents runs there), and it
        // changes nothing in the other modes.
        for (mode, want) in Mode::ALL.iter().zip([A, Q, Q, A, D]) {
            assert_eq!(mode_answer(*mode, Kind::Task, false, true), want, "{mode}");
        }
        // Only the `other` and `task` rows read the flag.
        for kind in [Kind::Edit, Kind::Shell, Kind::Execute, Kind::Fetch] {
            assert_eq!(
                mode_answer(Mode::Plan, kind, false, true),
                mode_answer(Mode::Plan, kind, false, false),
                "{kind:?}"
            );
        }
    }
}
