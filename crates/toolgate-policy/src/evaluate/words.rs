//! The checks for the paths the words of a shell script name (see
//! [`crate::shell_words`] for which words count): `external_directory` for a
//! word that may leave the project, `read` for one that may be a file a read
//! rule guards, reached by name, through a glob, a directory read
//! recursively or a run-time expansion. A tool's own reads (a search's
//! directory and filters, a read of globs, the links a search follows) are
//! judged the same way, written as a shell command.

use std::path::{Path, PathBuf};

use toolgate_shell::{ReadTarget, SimpleCommand};

use super::{external_check, fixed_check, Check};
use crate::grants::GrantPattern;
use crate::mode::Action;
use crate::paths::{normalize, RootedPath};
use crate::rules::Rule;
use crate::script_words::{script_words, ScriptWords};
use crate::shell_words::{
    names_a_place, place, reached, stays_inside, strictest, working_directories, Arg, Guard, Marks,
    Place, Reach, Role,
};
use crate::Policy;

impl Policy {
    /// The read-rule checks a tool's reads get when they are written as
    /// `COMMAND -- PATHS GLOBS` in a shell: the same judgement as a shell
    /// command's words (globs, directories read recursively, guarded files).
    /// `paths` are literal; `globs` keep their glob characters. External paths
    /// are left to the caller, which checks each subject itself.
    pub(super) fn read_guard_checks(
        &self,
        command: &str,
        paths: &[&str],
        globs: &[&str],
        base: &Path,
    ) -> Vec<Check> {
        if self.read_guards.is_empty() || (paths.is_empty() && globs.is_empty()) {
            return Vec::new();
        }
        // The common search (`src`, `.`, no filter) reaches a guard only when it
        // is a guarded file itself or a guard names a place in the tree: the
        // shell's own judgement would find nothing else, so it is not asked.
        let plain = |path: &&str| {
            !path.starts_with('/')
                && path.split('/').all(|segment| segment != "..")
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
        };
        if globs.is_empty()
            && paths.iter().all(plain)
            && !paths.iter().any(|path| {
                self.read_guards
                    .iter()
                    .any(|guard| guard.matches_any_case(path))
            })
            && !self.anchored_read_guard()
        {
            return Vec::new();
        }
        let mut script = format!("{command} --");
        let words = paths
            .iter()
            .map(|path| (*path, false))
            .chain(globs.iter().map(|glob| (*glob, true)));
        for (word, glob) in words {
            script.push(' ');
            if !shell_quote(word, glob, &mut script) {
                // A word no shell line can carry (a newline, NUL): fail closed.
                let guards = self.guards();
                return strictest(&guards)
                    .map(|guard| reached_check(word.to_string(), guard.rule, Reach::Anywhere))
                    .into_iter()
                    .collect();
            }
        }
        let analysis = toolgate_shell::analyze(toolgate_shell::Script::Text(&script), &self.shell);
        let words = script_words(&analysis.commands);
        self.shell_word_checks(&analysis.commands, words, base, true)
            .into_iter()
            .filter(|check| check.permission != "external_directory")
            .collect()
    }

    /// Is there a deny or ask read rule that names a place in the tree
    /// (`secrets/**`), which a directory read recursively can reach?
    fn anchored_read_guard(&self) -> bool {
        self.rules.rules().iter().any(|rule| {
            rule.permission.matches("read")
                && rule.action != Action::Allow
                && rule.pattern.as_str() != "*"
                && names_a_place(rule.pattern.as_str())
        })
    }

    /// The checks for what the links below the directory `dir` (as written,
    /// relative to `base`) lead to, for a tool that follows them while it
    /// walks the tree: `external_directory` for a place outside the project,
    /// the read guards for the files inside; a tree the disk cannot show
    /// may lead anywhere. Nothing without a disk oracle (it sees no links).
    pub(super) fn followed_link_checks(&self, dir: &str, base: &Path) -> Vec<Check> {
        let Some(oracle) = &self.glob_oracle else {
            return Vec::new();
        };
        let absolute = normalize(dir, base, self.home.as_deref());
        let Some(found) = oracle.links_below(&absolute) else {
            return vec![anywhere_check(dir)];
        };
        // A link that stays inside the tree leads where the tree's read
        // already goes (and is judged with it).
        let tree = oracle
            .resolve(&absolute)
            .unwrap_or_else(|| absolute.clone());
        let found: Vec<PathBuf> = found
            .into_iter()
            .filter(|real| !real.starts_with(&tree))
            .collect();
        let mut checks = Vec::new();
        let mut inside = Vec::new();
        for real in found {
            let rooted = RootedPath::new(real, &self.project_root);
            if rooted.external {
                if !is_standard_device(&rooted.absolute) {
                    checks.push(external_check(&rooted, true));
                }
            } else {
                inside.push(rooted.absolute.to_string_lossy().into_owned());
            }
        }
        let inside: Vec<&str> = inside.iter().map(String::as_str).collect();
        checks.extend(self.read_guard_checks("rg -e x", &inside, &[], base));
        checks
    }

    /// The checks for the paths the words of a script name: `external_directory`
    /// for those that may leave the project, `read` for those that may be files a
    /// read rule guards. See [`crate::shell_words`] for which words count.
    pub(super) fn shell_word_checks(
        &self,
        commands: &[SimpleCommand],
        words: ScriptWords<'_>,
        base: &Path,
        disk_settled: bool,
    ) -> Vec<Check> {
        let home = self.home.as_deref();
        let changes_directory = words.changes_directory();
        let mut followed: Vec<(Option<String>, Role)> = Vec::new();
        let ScriptWords { mut args, moves } = words;
        // What the program models found read beyond the words: option
        // values (`--files0-from=F`), response files (`@F`), and names that
        // arrive on the input (`xargs cat`), which may be any file, or the
        // names a producer prints (`find … | xargs cat`).
        for read in commands.iter().flat_map(|c| &c.reads) {
            let role = if read.tree { Role::Tree } else { Role::File };
            if let ReadTarget::OptionsIn(word) = &read.target {
                if !self.may_become_options(word, base, changes_directory, disk_settled) {
                    continue;
                }
            }
            args.push(match &read.target {
                ReadTarget::Path(path) => Arg::new(path, Marks::guessed(path), role),
                ReadTarget::Names(glob) => Arg {
                    names: true,
                    ..Arg::new(glob, Marks::guessed(glob), role)
                },
                ReadTarget::Any | ReadTarget::OptionsIn(_) => any_name(role),
            });
        }
        // A program that follows the links below a directory it reads (`grep
        // -R`, `rg -L`) reads what they lead to as well: each link's real
        // place is judged like a word of the command; a tree the disk cannot
        // show (too large, unreadable, a glob or an
        // expansion, a directory changed by a `cd` or by the script itself)
        // may lead anywhere.
        for arg in &args {
            // Without a disk oracle no link is seen, as for every path.
            if !arg.follows_links || self.glob_oracle.is_none() {
                continue;
            }
            let oracle = match &self.glob_oracle {
                Some(oracle)
                    if !arg.marks.expansion
                        && !arg.marks.glob
                        && !changes_directory
                        && disk_settled =>
                {
                    oracle
                }
                _ => {
                    followed.push((None, arg.role));
                    continue;
                }
            };
            let dir = normalize(arg.text, base, self.home.as_deref());
            // A link that stays inside the tree leads where the tree's read
            // already goes.
            let tree = oracle.resolve(&dir).unwrap_or_else(|| dir.clone());
            match oracle.links_below(&dir) {
                Some(reached) => followed.extend(
                    reached
                        .into_iter()
                        .filter(|real| !real.starts_with(&tree))
                        .map(|real| (Some(real.to_string_lossy().into_owned()), arg.role)),
                ),
                None => followed.push((None, arg.role)),
            }
        }
        for (reached, role) in &followed {
            args.push(match reached {
                Some(path) => Arg::new(path, Marks::guessed(path), *role),
                None => Arg::new(
                    NAMES_FROM_INPUT,
                    Marks {
                        expansion: true,
                        ..Marks::default()
                    },
                    *role,
                ),
            });
        }
        // A name a consumer may split into other words is any file.
        let split: Vec<Role> = args
            .iter()
            .filter(|arg| {
                arg.names && self.names_may_split(arg.text, base, changes_directory, disk_settled)
            })
            .map(|arg| arg.role)
            .collect();
        args.extend(split.into_iter().map(any_name));
        let mut bases: Option<Vec<Option<PathBuf>>> = None;

        let at_root = !changes_directory && *base == *self.project_root;
        let anchored_guard = self.anchored_read_guard();
        let mut guards: Option<Vec<Guard<'_>>> = None;
        let mut outside: Vec<String> = Vec::new();
        let mut guarded: Vec<String> = Vec::new();
        let mut reached_seen: Vec<String> = Vec::new();
        let mut checks = Vec::new();
        for arg in &args {
            let reads = arg.role >= Role::File && !self.read_guards.is_empty();
            // A word whose path crosses a symbolic link is judged where it
            // leads as well, through the general path below.
            let crosses_link = self.glob_oracle.is_some()
                && !arg.marks.expansion
                && !arg.marks.glob
                && self.crosses_link(arg.text, base);
            if at_root && stays_inside(arg.text, arg.marks) && !crosses_link {
                // A plain relative word names itself.
                if reads
                    && self
                        .read_guards
                        .iter()
                        .any(|guard| guard.matches_any_case(arg.text))
                    && !guarded.iter().any(|seen| seen == arg.text)
                    && self.read_guard(arg.text).is_some()
                {
                    guarded.push(arg.text.to_string());
                    checks.push(read_argument_check(arg.text.to_string()));
                }
                if !(reads && arg.role == Role::Tree && anchored_guard) {
                    continue;
                }
            }
            let bases = bases.get_or_insert_with(|| {
                working_directories(moves.iter().map(Vec::as_slice), base, home)
            });
            match place(arg.text, arg.marks, bases, home) {
                Place::Anywhere => {
                    if arg.external && !outside.iter().any(|seen| seen == arg.text) {
                        outside.push(arg.text.to_string());
                        checks.push(anywhere_check(arg.text));
                    }
                    if reads && !reached_seen.iter().any(|seen| seen == arg.text) {
                        let guards = guards.get_or_insert_with(|| self.guards());
                        if let Some(guard) = strictest(guards) {
                            reached_seen.push(arg.text.to_string());
                            checks.push(reached_check(
                                arg.text.to_string(),
                                guard.rule,
                                Reach::Anywhere,
                            ));
                        }
                    }
                }
                Place::Paths(mut paths) => {
                    // From the command's own directory, `crosses_link` already
                    // looked; after a `cd` every possible directory is asked.
                    let look = crosses_link || (changes_directory && self.glob_oracle.is_some());
                    if look && !arg.marks.expansion && !arg.marks.glob {
                        let mut real = Vec::new();
                        for base in bases.iter().flatten() {
                            let lexical = RootedPath::new(
                                normalize(arg.text, base, home),
                                &self.project_root,
                            );
                            if let Some(linked) = self.linked_path(arg.text, base, &lexical) {
                                let placed =
                                    RootedPath::new(linked.absolute.clone(), &self.project_root);
                                if linked.external && !placed.external {
                                    // Its links could not be followed: it may
                                    // lead anywhere.
                                    if !outside.iter().any(|seen| seen == arg.text) {
                                        outside.push(arg.text.to_string());
                                        checks.push(anywhere_check(arg.text));
                                    }
                                } else {
                                    real.push(linked.absolute);
                                }
                            }
                        }
                        paths.extend(real);
                        paths.dedup();
                    }
                    for path in paths {
                        // Outside the project or not is a matter of the word's
                        // fixed head: a glob's matches only replace its glob
                        // segments by names (never `.` or `..`), so the glob
                        // itself is judged, one question however many it matches.
                        let rooted = RootedPath::new(path, &self.project_root);
                        if arg.external
                            && rooted.external
                            && !is_standard_device(&rooted.absolute)
                            && !outside.contains(&rooted.subject)
                        {
                            outside.push(rooted.subject.clone());
                            checks.push(external_argument_check(&rooted));
                        }
                        if !reads {
                            continue;
                        }
                        let mut expanded =
                            self.expand_globs(rooted.absolute, arg.marks.glob, disk_settled);
                        if arg.marks.glob {
                            // A match that is a link is read where it leads.
                            let linked: Vec<(PathBuf, bool)> = expanded
                                .iter()
                                .filter(|(_, glob)| !glob)
                                .filter_map(|(path, _)| {
                                    let oracle = self.glob_oracle.as_ref()?;
                                    let lexical = RootedPath::new(path.clone(), &self.project_root);
                                    self.linked(oracle.as_ref(), path, &lexical)
                                })
                                .map(|real| (real.absolute, false))
                                .collect();
                            for (real, _) in &linked {
                                let real = RootedPath::new(real.clone(), &self.project_root);
                                if arg.external && real.external && !outside.contains(&real.subject)
                                {
                                    outside.push(real.subject.clone());
                                    checks.push(external_argument_check(&real));
                                }
                            }
                            expanded.extend(linked);
                        }
                        for (path, glob) in expanded {
                            let rooted = RootedPath::new(path, &self.project_root);
                            if !glob
                                && !guarded.contains(&rooted.subject)
                                && self
                                    .read_guards
                                    .iter()
                                    .any(|guard| guard.matches_any_case(&rooted.subject))
                                && self.read_guard(&rooted.subject).is_some()
                            {
                                guarded.push(rooted.subject.clone());
                                checks.push(read_argument_check(rooted.subject.clone()));
                            }
                            // A glob, or a directory read recursively, may reach more.
                            if !(glob || arg.role == Role::Tree && anchored_guard)
                                || reached_seen.contains(&rooted.subject)
                            {
                                continue;
                            }
                            let guards = guards.get_or_insert_with(|| self.guards());
                            if let Some((guard, reach)) =
                                reached(guards, &rooted.absolute, glob, arg.role)
                            {
                                reached_seen.push(rooted.subject.clone());
                                checks.push(reached_check(rooted.subject, guard.rule, reach));
                            }
                        }
                    }
                }
            }
        }
        checks
    }

    fn guards(&self) -> Vec<Guard<'_>> {
        crate::shell_words::guards(&self.rules, &self.project_root)
    }
}

/// How a read of any file (names from a command's input) is shown.
const NAMES_FROM_INPUT: &str = "$(names read from input)";

/// An argument standing for any file a command could name (names that
/// arrive on its input, unknown until it runs).
fn any_name<'a>(role: Role) -> Arg<'a> {
    Arg::new(
        NAMES_FROM_INPUT,
        Marks {
            expansion: true,
            ..Marks::default()
        },
        role,
    )
}

/// `read` for a file a shell command names, judged by the read rules alone
/// (the mode allows reading); `always` grants that file.
fn read_argument_check(subject: String) -> Check {
    let always = GrantPattern::exact(&subject);
    fixed_check("read", subject, always)
}

/// `read` for a shell word that reaches a guarded file through a glob, a
/// directory read recursively or a run-time expansion: judged by that rule
/// (and by any rule matching the word itself); `always` grants the word.
fn reached_check(subject: String, rule: &Rule, reach: Reach) -> Check {
    Check {
        reached: Some(Box::new((rule.clone(), reach))),
        runs_unknown: false,
        ..read_argument_check(subject)
    }
}

/// The device files every shell uses are not paths outside the project.
fn is_standard_device(path: &Path) -> bool {
    matches!(
        path.to_str(),
        Some("/dev/null" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr")
    )
}

/// `external_directory` for a shell word whose place the shell decides at run
/// time (`$X/y`, `~user/x`, `~+/x`): it may be anywhere, so it asks like a
/// path outside the project; `always` grants that word only.
fn anywhere_check(word: &str) -> Check {
    let mut check = external_argument_check(&RootedPath {
        absolute: PathBuf::from(word),
        subject: word.to_string(),
        external: true,
    });
    check.always = GrantPattern::exact(word);
    check
}

/// `external_directory` for a path named in a shell command. Whether it is a
/// file or a directory is unknown, so `always` grants its parent directory,
/// or only the path itself when the parent is `/`.
fn external_argument_check(path: &RootedPath) -> Check {
    let mut check = external_check(path, false);
    let parent = path
        .absolute
        .parent()
        .map(|p| p.to_string_lossy().into_owned());
    if parent.as_deref().is_none_or(|p| p == "/") {
        check.always = GrantPattern::exact(&path.subject);
    }
    check
}

/// Append `word` to a shell line as one literal word, its glob characters
/// (`* ? [ ] { } , ! ^`) left to the shell when `glob`. False for a word no
/// line can hold (a newline or NUL).
fn shell_quote(word: &str, glob: bool, out: &mut String) -> bool {
    if word.contains(['\n', '\0']) {
        return false;
    }
    for c in word.chars() {
        if (glob && "*?[]{},!^".contains(c)) || c.is_ascii_alphanumeric() || "/._-+@%=:".contains(c)
        {
            out.push(c);
        } else if c == '\'' {
            out.push_str("\\'");
        } else {
            out.push('\'');
            out.push(c);
            out.push('\'');
        }
    }
    true
}
