//! The first half of a judgement, what the policy alone decides: a call
//! becomes its checks. The tool's subject is read from its input, its paths
//! are placed against the project root (and followed through links), a
//! shell call is analysed into simple commands, each judged read-only or
//! not, and an unknown tool's embedded commands meet the `bash` rules.

use std::borrow::Cow;
use std::path::Path;

use toolgate_shell::SimpleCommand;

use super::answer::narrower_options;
use super::{external_check, Basis, Body, Calls, Check, Ready, TargetKind, Via};
use crate::grants::GrantPattern;
use crate::mode::{Action, Kind};
use crate::paths::{normalize, RootedPath};
use crate::script_words::script_words;
use crate::tools::{
    extract, not_read_only_field, unknown_fields, variants, workdir, FieldSubject, FieldValue,
    ShellInput, Subject, SubjectField,
};
use crate::{Call, Policy, SubjectOrigin, SubjectRead};

impl Policy {
    /// `use_mcp_tool`: the MCP call it makes, prepared as that call, each
    /// check of the MCP tool's permission carrying the calling tool's rules
    /// ([`super::Check::via`]); unusable input is denied.
    fn prepare_mcp_caller(&self, call: &Call<'_>) -> Body {
        let permission = self.registry.lookup(call.tool).permission.clone();
        let mcp = match crate::mcp_caller::mcp_call(call.input) {
            Ok(mcp) => mcp,
            Err(reason) => {
                return Body::Invalid {
                    permission,
                    kind: Kind::Other,
                    reason: format!("the `{}` call is unusable: {reason}", call.tool),
                }
            }
        };
        let mut body = self.prepare_body(&Call {
            tool: &mcp.name,
            input: &mcp.arguments,
            cwd: call.cwd,
        });
        let via = Via {
            permission: permission.clone(),
            name: mcp.name.clone(),
        };
        body.called_via(&via);
        Body::Calls(Box::new(Calls {
            permission,
            tool: mcp.name,
            input: mcp.arguments,
            body,
        }))
    }

    pub(super) fn prepare_body(&self, call: &Call<'_>) -> Body {
        // Tools that call tools are judged by their calls (batch.rs).
        if crate::batch::is_batch(call.tool) {
            return Body::Batch;
        }
        // A tool that calls one MCP tool by name is judged as that call.
        if crate::mcp_caller::is_mcp_caller(call.tool) {
            return self.prepare_mcp_caller(call);
        }
        let spec = self.registry.lookup(call.tool);
        let invalid = |reason: String| Body::Invalid {
            permission: spec.permission.clone(),
            kind: spec.kind,
            reason,
        };
        // A command or directory given twice, differently: each one must pass.
        match variants(&spec, call.input) {
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
            Ok(Some(inputs)) => {
                let each = inputs
                    .into_iter()
                    .map(|input| {
                        let prepared = self.prepare(&Call {
                            input: &input,
                            ..*call
                        });
                        (input, prepared)
                    })
                    .collect();
                return Body::Each {
                    permission: spec.permission.clone(),
                    kind: spec.kind,
                    each,
                };
            }
            Ok(None) => {}
        }
        // A shell call's own directory (`workdir`, `directory`, `cwd`, ...) is where it runs.
        let joined: String;
        let call = &match workdir(&spec, call.input) {
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
            Ok(Some(dir)) => {
                joined = join_dir(call.cwd, &dir);
                Call {
                    cwd: Some(&joined),
                    ..*call
                }
            }
            Ok(None) => *call,
        };
        // A background run, a kept session, an environment: never read-only.
        let held = not_read_only_field(&spec, call.input);
        let subject = match extract(&spec, call.input) {
            Ok(subject) => subject,
            Err(reason) => {
                return invalid(format!("the `{}` call is unusable: {reason}", call.tool))
            }
        };
        let base: Cow<'_, Path> = match call.cwd {
            Some(cwd) => Cow::Owned(normalize(cwd, &self.project_root, self.home.as_deref())),
            None => Cow::Borrowed(&self.project_root),
        };
        let plan_allowed = match (spec.kind, &subject) {
            (Kind::Other, _) => self.plan_allowed.iter().any(|tool| tool.matches(call.tool)),
            // A sub-agent of a type that only reads: launched in plan mode,
            // its own calls judged in plan mode (the hooks run them in a
            // child session, which inherits the mode).
            (Kind::Task, Subject::Text(agent)) => {
                let tool = call.tool;
                self.read_only_agents
                    .iter()
                    .any(|entry| crate::config::read_only_agent(entry, tool, agent))
            }
            _ => false,
        };
        let mut ready = Ready {
            permission: spec.permission.clone(),
            kind: spec.kind,
            plan_allowed,
            // A plan approval of nothing: the model is told to pass its plan.
            empty_plan: spec.kind == Kind::ExitPlan
                && match &subject {
                    Subject::Text(text) => text.trim().is_empty(),
                    _ => true,
                },
            invalid: None,
            searched: None,
            // Most calls have one to three checks: no regrowth of large items.
            checks: Vec::with_capacity(4),
            title: String::new(),
            plan: None,
        };
        let checks = &mut ready.checks;
        if call.cwd.is_some() {
            let cwd = RootedPath::new(base.to_path_buf(), &self.project_root);
            if cwd.external {
                checks.push(external_check(&cwd, true));
            }
        }

        // Judged by the mode table for the tool's kind (see [`Basis::Tool`]).
        let simple = |subject: String, always: GrantPattern, scope: Option<TargetKind>| {
            let narrower = narrower_options(spec.kind, &subject, &always);
            Check {
                permission: Cow::Owned(spec.permission.clone()),
                subject,
                inner: Vec::new(),
                basis: Basis::Tool,
                mode_action: Action::Allow,
                mode_reason: Cow::Borrowed(""),
                always,
                read_only: false,
                refusal: None,
                narrower,
                scope,
                reached: None,
                runs_unknown: false,
                origin: None,
                via: None,
            }
        };

        match &subject {
            Subject::Shell(script) => {
                // The shell options only change when the call names its own directory.
                let with_cwd;
                let options = match call.cwd {
                    None => &self.shell,
                    Some(raw) => {
                        // A `..` in the reported directory is resolved by the
                        // kernel after symlinks: keep it for shell analysis,
                        // which refuses git there rather than guess.
                        let dotdot = Path::new(raw)
                            .components()
                            .any(|c| c == std::path::Component::ParentDir);
                        with_cwd = toolgate_shell::Options {
                            cwd: Some(if dotdot && !raw.starts_with('~') {
                                self.project_root.join(raw)
                            } else {
                                base.to_path_buf()
                            }),
                            ..self.shell.clone()
                        };
                        &with_cwd
                    }
                };
                // A remembered analysis comes with its words (see
                // [`crate::script_words`]); a fresh one has them found here.
                let remembered;
                let fresh;
                let (analysis, kept) = match script {
                    ShellInput::Text(text) if call.cwd.is_none() => {
                        ready.title = text.clone();
                        remembered = self.shell_cache.analyze(text, options);
                        (&remembered.analysis, Some(&remembered.words))
                    }
                    ShellInput::Text(text) => {
                        ready.title = text.clone();
                        fresh =
                            toolgate_shell::analyze(toolgate_shell::Script::Text(text), options);
                        (&fresh, None)
                    }
                    ShellInput::Argv(argv) => {
                        ready.title = argv.join(" ");
                        fresh =
                            toolgate_shell::analyze(toolgate_shell::Script::Argv(argv), options);
                        (&fresh, None)
                    }
                };
                if analysis.commands.is_empty() {
                    ready.invalid = Some(format!("the `{}` call has an empty command", call.tool));
                    return Body::Ready(Box::new(ready));
                }
                // Paths the words name: outside the project (`external_directory`),
                // or files the user guards with read rules (`.env` asks by default).
                // Globs are expanded on the disk only when no command of the script
                // can change it first (`touch src/x.env.rs; cat src/*.rs`).
                let disk_settled = analysis.is_read_only();
                let words = match kept {
                    Some(kept) => kept.words(),
                    None => script_words(&analysis.commands),
                };
                checks.extend(self.shell_word_checks(
                    &analysis.commands,
                    words,
                    &base,
                    disk_settled,
                ));
                let moves = analysis.commands.iter().any(|c| {
                    c.text
                        .split(' ')
                        .next()
                        .is_some_and(|w| matches!(w, "cd" | "pushd" | "popd"))
                });
                for command in &analysis.commands {
                    let unmet = match &command.verdict {
                        Ok(()) => self.unmet_requirement(&command.requires, &base, moves),
                        Err(_) => None,
                    };
                    let read_only = command.verdict.is_ok() && held.is_none() && unmet.is_none();
                    let refusal = match (&command.verdict, &held, unmet) {
                        (Ok(()), None, None) => None,
                        (Err(refusal), _, _) => Some(refusal.reason.clone()),
                        (Ok(()), Some(held), _) => Some(held.to_string()),
                        (Ok(()), None, Some(unmet)) => Some(unmet),
                    };
                    // What the mode says of a command that only reads is the
                    // same in every mode; of any other, see [`Basis::Shell`].
                    let mode_reason = match refusal {
                        None => {
                            let text = &command.text;
                            let mut reason = String::with_capacity(text.len() + 42);
                            reason.extend(["`", text, "` only reads, which every mode allows"]);
                            reason.into()
                        }
                        Some(_) => Cow::Borrowed(""),
                    };
                    // A literal `always` (a destructive program, say) may contain
                    // `*` or `?`: it is granted as exactly that text.
                    let always = match command.always.strip_suffix(" *") {
                        Some(prefix) if command.always != command.text => {
                            GrantPattern::prefixed(prefix, " *")
                        }
                        _ => GrantPattern::exact(&command.always),
                    };
                    let runs_unknown = runs_unknown(command);
                    // The exact command, narrower than its arity prefix.
                    let narrower = if command.always == command.text {
                        Vec::new()
                    } else {
                        vec![GrantPattern::exact(&command.text)]
                    };
                    checks.push(Check {
                        permission: Cow::Owned(spec.permission.clone()),
                        subject: command.text.clone(),
                        inner: command.inner.clone(),
                        basis: Basis::Shell,
                        mode_action: Action::Allow,
                        mode_reason,
                        always,
                        read_only,
                        refusal,
                        narrower,
                        scope: Some(TargetKind::Command),
                        reached: None,
                        runs_unknown,
                        origin: None,
                        via: None,
                    });
                }
            }
            Subject::Paths(paths) => {
                let mut shown = Vec::new();
                // OpenCode grants every edit with `always`; a read that asks
                // (a `.env` file) is granted for that file only.
                let path_check = |subject: String| {
                    let always = if spec.kind == Kind::Read {
                        GrantPattern::exact(&subject)
                    } else {
                        GrantPattern::prefixed("", "*")
                    };
                    let target = if spec.kind == Kind::List {
                        TargetKind::Directory
                    } else {
                        TargetKind::File
                    };
                    simple(subject, always, Some(target))
                };
                for path in paths {
                    let rooted =
                        RootedPath::resolve(path, &base, &self.project_root, self.home.as_deref());
                    if rooted.external {
                        checks.push(external_check(&rooted, false));
                    }
                    // A symbolic link on the way: the file it reaches is
                    // what is read or written, judged like the path itself.
                    if let Some(real) = self.linked_path(path, &base, &rooted) {
                        if real.external && !rooted.external {
                            checks.push(external_check(&real, false));
                        }
                        checks.push(path_check(real.subject));
                    }
                    shown.push(rooted.subject.clone());
                    checks.push(path_check(rooted.subject));
                }
                // Entries that are globs (Gemini's `read_many_files` `paths` and
                // `include`) read what they match: as a shell's `cat` would.
                if matches!(spec.kind, Kind::Read | Kind::List) {
                    let globs: Vec<&str> = paths
                        .iter()
                        .map(String::as_str)
                        .filter(|path| path.contains(['*', '?', '[', '{']))
                        .collect();
                    checks.extend(self.read_guard_checks("cat", &[], &globs, &base));
                }
                ready.title = shown.join(", ");
            }
            Subject::Search { pattern, path } => {
                let directory = match path {
                    Some(path) => {
                        let rooted = RootedPath::resolve(
                            path,
                            &base,
                            &self.project_root,
                            self.home.as_deref(),
                        );
                        if rooted.external {
                            checks.push(external_check(&rooted, true));
                        }
                        if let Some(real) = self.linked_path(path, &base, &rooted) {
                            if real.external && !rooted.external {
                                checks.push(external_check(&real, true));
                            }
                        }
                        rooted.subject
                    }
                    None => RootedPath::new(base.to_path_buf(), &self.project_root).subject,
                };
                ready.title = pattern.clone();
                // The directory searched must be inside the session's scope.
                ready.searched = Some(directory);
                checks.push(simple(
                    pattern.clone(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
                // A search reads the files it looks in (`pattern: "."` prints
                // them): the directory, or the files its `glob`/`include` filter
                // picks under it, meet the read rules as `rg` in a shell would.
                let searched = path.clone().unwrap_or_else(|| ".".to_string());
                let mut filters: Vec<String> = Vec::new();
                for field in ["glob", "include"] {
                    if let Some(filter) = call.input.get(field).and_then(serde_json::Value::as_str)
                    {
                        filters.push(format!("{}/**/{filter}", searched.trim_end_matches('/')));
                    }
                }
                let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
                checks.extend(self.read_guard_checks(
                    "rg -e x",
                    &[searched.as_str()],
                    &filters,
                    &base,
                ));
                // A search tool may follow the links below the directory it
                // searches (OpenCode's `grep` has run `rg --follow`).
                checks.extend(self.followed_link_checks(&searched, &base));
            }
            Subject::Text(text) if spec.kind == Kind::ExitPlan => {
                ready.title = "Leave plan mode and carry out this plan".to_string();
                ready.plan = Some(text.clone());
                checks.push(simple(
                    "*".to_string(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
            }
            Subject::Text(text) => {
                ready.title = text.clone();
                checks.push(simple(text.clone(), GrantPattern::prefixed("", "*"), None));
            }
            Subject::Fields(values) => {
                let fields: Vec<String> = spec
                    .subject_fields()
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                let declared = spec.subject == SubjectField::Declared;
                let origin = |field: Option<&str>, read: SubjectRead| {
                    Some(Box::new(SubjectOrigin {
                        fields: fields.clone(),
                        declared,
                        field: field.map(str::to_string),
                        read,
                    }))
                };
                let everything = || GrantPattern::prefixed("", "*");
                let mut shown: Vec<String> = Vec::new();
                if values.is_empty() {
                    let names: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
                    let why = match names.as_slice() {
                        [one] => format!("the call gives no {one}"),
                        _ => format!("the call gives none of {}", names.join(", ")),
                    };
                    let mut check = simple("*".to_string(), everything(), None);
                    check.origin = origin(None, SubjectRead::Unknown(why));
                    checks.push(check);
                }
                for FieldSubject { field, value } in values {
                    let field = Some(field.as_str());
                    match value {
                        FieldValue::Text(text) => {
                            shown.push(text.clone());
                            let mut check = simple(text.clone(), everything(), None);
                            check.origin = origin(field, SubjectRead::Text);
                            checks.push(check);
                        }
                        // Matched as the paths of reads and edits are, so that
                        // `./secrets/x` and `$ROOT/secrets/x` meet `secrets/*`.
                        FieldValue::Path(path) => {
                            let rooted = RootedPath::resolve(
                                path,
                                &base,
                                &self.project_root,
                                self.home.as_deref(),
                            );
                            shown.push(rooted.subject.clone());
                            let mut check =
                                simple(rooted.subject, everything(), Some(TargetKind::Path));
                            check.origin = origin(field, SubjectRead::Path);
                            checks.push(check);
                        }
                        // Each simple command on its own, so that `git *` does
                        // not cover `git status; rm -rf /`.
                        FieldValue::Command(command) => {
                            let (script, text) = match command {
                                ShellInput::Text(text) => {
                                    (toolgate_shell::Script::Text(text), text.clone())
                                }
                                ShellInput::Argv(argv) => {
                                    (toolgate_shell::Script::Argv(argv), argv.join(" "))
                                }
                            };
                            let analysis = toolgate_shell::analyze(script, &self.shell);
                            if analysis.commands.is_empty() {
                                let mut check = simple(text.clone(), everything(), None);
                                check.origin = origin(field, SubjectRead::Text);
                                checks.push(check);
                            }
                            for simple_command in &analysis.commands {
                                let mut check = simple(
                                    simple_command.text.clone(),
                                    everything(),
                                    Some(TargetKind::Command),
                                );
                                check.inner = simple_command.inner.clone();
                                check.runs_unknown = runs_unknown(simple_command);
                                check.origin = origin(field, SubjectRead::Command);
                                checks.push(check);
                            }
                            shown.push(text);
                        }
                        FieldValue::Unreadable(why) => {
                            let mut check = simple("*".to_string(), everything(), None);
                            check.origin = origin(field, SubjectRead::Unknown(why.clone()));
                            checks.push(check);
                        }
                    }
                }
                ready.title = if shown.is_empty() {
                    call.tool.to_string()
                } else {
                    shown.join(", ")
                };
            }
            Subject::None => {
                if spec.kind == Kind::ExitPlan {
                    ready.title = "Leave plan mode and carry out this plan".to_string();
                    ready.plan = Some(String::new());
                } else {
                    ready.title = call.tool.to_string();
                }
                checks.push(simple(
                    "*".to_string(),
                    GrantPattern::prefixed("", "*"),
                    None,
                ));
            }
        }
        // A tool toolgate does not know whose input carries a command
        // (`command`, `cmd`, `script`, a program with its `args`) meets the
        // `bash` rules too, in every mode, as it meets the session's scope.
        if spec.kind == Kind::Other {
            ready
                .checks
                .extend(self.embedded_command_checks(call.input));
        }
        Body::Ready(Box::new(ready))
    }

    /// The checks that hold each simple command found in an unknown tool's
    /// input against the `bash` rules: allowed by every mode (the tool's
    /// own check carries the mode's answer), so a rule can only make the
    /// call stricter; a command whose program cannot be known meets every
    /// deny and ask rule of `bash`, as in a shell call.
    fn embedded_command_checks(
        &self,
        input: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<Check> {
        let mut checks = Vec::new();
        for command in unknown_fields(input).commands {
            let script = match &command {
                ShellInput::Text(text) => toolgate_shell::Script::Text(text),
                ShellInput::Argv(argv) => toolgate_shell::Script::Argv(argv),
            };
            let analysis = toolgate_shell::analyze(script, &self.shell);
            for simple in &analysis.commands {
                checks.push(Check {
                    permission: Cow::Borrowed("bash"),
                    subject: simple.text.clone(),
                    inner: simple.inner.clone(),
                    basis: Basis::Fixed,
                    mode_action: Action::Allow,
                    mode_reason: Cow::Borrowed(
                        "a command in the input of a tool toolgate does not know meets the `bash` rules",
                    ),
                    always: GrantPattern::exact(&simple.text),
                    read_only: false,
                    refusal: None,
                    narrower: Vec::new(),
                    scope: Some(TargetKind::Command),
                    reached: None,
                    runs_unknown: runs_unknown(simple),
                    origin: None,
                    via: None,
                });
            }
        }
        checks
    }
}

/// A shell call's own directory, against the directory the agent reported.
fn join_dir(cwd: Option<&str>, dir: &str) -> String {
    match cwd {
        Some(cwd) if !dir.starts_with(['/', '~']) => {
            format!("{}/{dir}", cwd.trim_end_matches('/'))
        }
        _ => dir.to_string(),
    }
}

/// Does a simple command run something its analysis cannot name? So it does
/// when it could not be parsed into words, when its program (or an inner
/// command's) is decided at run time ([`unknown_program`]), when it hands
/// text to the shell to run later or as code (`coproc`, `trap`, `alias`,
/// `hash`, `source`), and when it runs a shell whose script was not read
/// (from its input, a file, or behind options the analysis does not know).
fn runs_unknown(command: &SimpleCommand) -> bool {
    const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"];
    fn program_of(text: &str) -> &str {
        let first = text.split(' ').next().unwrap_or("");
        first.rsplit('/').next().unwrap_or(first)
    }
    if command.words.is_empty() {
        return true;
    }
    let texts = || std::iter::once(&command.text).chain(&command.inner);
    if texts().any(|text| {
        unknown_program(text)
            || matches!(
                program_of(text),
                "coproc" | "trap" | "alias" | "hash" | "source" | "." | "enable" | "bind"
            )
            || program_of(text).contains(['{', '}', '\\', '*', '?', '['])
    }) {
        return true;
    }
    // A shell runs what its analysed script holds: the inner commands after
    // it (wrappers come first, outermost first). Without one after the last
    // shell, that shell's script was not read.
    let is_shell = |text: &String| SHELLS.contains(&program_of(text));
    let last_shell = texts()
        .enumerate()
        .filter(|(_, text)| is_shell(text))
        .last();
    last_shell.is_some_and(|(last, _)| last + 1 == 1 + command.inner.len())
}

/// Is the program of a simple command's text (words joined by spaces,
/// expansions as written) decided only when it runs? So it is when the
/// program word is an expansion, when `eval` is given one, and when a
/// shell's `-c` script starts with one (`sh -c "$X"`: the first word after
/// `-c` is the script's program).
fn unknown_program(text: &str) -> bool {
    let expanded = |word: &str| word.contains(['$', '`']);
    let mut words = text.split(' ');
    let Some(program) = words.next() else {
        return false;
    };
    if expanded(program) {
        return true;
    }
    match program.rsplit('/').next().unwrap_or(program) {
        "eval" => words.any(expanded),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "busybox" => {
            let mut words = words.skip_while(|word| {
                !(word.starts_with('-') && !word.starts_with("--") && word.contains('c'))
            });
            words.next().is_some() && words.next().is_some_and(expanded)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn programs_named_by_an_expansion() {
        let cases: &[(&str, bool)] = &[
            ("$RM -rf build", true),
            ("$(which rm) -rf x", true),
            ("`which rm` x", true),
            ("${RM:-rm} x", true),
            ("eval $CMD", true),
            ("sh -c $X", true),
            ("/bin/bash -lc $X y", true),
            ("bash -c echo $HOME", false),
            ("sh -c rm $X", false),
            ("rm $X", false),
            ("ls $HOME", false),
            ("eval ls", false),
            ("echo $X", false),
        ];
        for (text, expected) in cases {
            assert_eq!(super::unknown_program(text), *expected, "{text}");
        }
    }
}
