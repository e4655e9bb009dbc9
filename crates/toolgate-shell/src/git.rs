//! git: a handful of read-only subcommands, no option that runs programs or
//! writes files, never a signature check (gpg), only inside the project root
//! when configuration is trusted, and only when the repository git will use
//! is the project's own (asked of the [`crate::RepoOracle`]).

use std::path::{Path, PathBuf};

use crate::context::{Env, State};
use crate::opts::{long_hit, normalize, plain_args};
use crate::syntax::Word;
use crate::{Refusal, RepoFact, RepoQuery};

/// How many directories a script's `cd`s may leave the shell possibly in.
const MAX_DIRS: usize = 16;

/// Options that write files or run programs, for every subcommand.
const UNSAFE_LONG: &[&str] = &[
    "--output",
    "--ext-diff",
    "--textconv",
    "--exec",
    "--open-files-in-pager",
    "--paginate",
    "--filters",
    "--show-signature",
];
/// Exact names that abbreviate an unsafe option but are options of their own.
const SAFE_LONG: &[&str] = &["--text"];

fn refuse(reason: impl Into<String>) -> Result<(), Refusal> {
    stop(reason)
}

fn stop<T>(reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::new(reason))
}

/// Judge `git ARGS` (the words after `git`).
pub(crate) fn judge(args: &[Word], env: &Env<'_>, state: &State) -> Result<(), Refusal> {
    if !env.opts.trust_git_config {
        return refuse("git is not read-only here: the repository's configuration is not trusted (trustGitConfig is false) and can make git run programs");
    }
    // A commit id from a producer that prints only ids (`for c in $(git
    // log --format=%h -5); do git show "$c"; done`) is a revision after the
    // subcommand: judged as one (a hexadecimal word). Not among git's own
    // options (`-C "$c"` would name a directory).
    let ids: Vec<Word>;
    let args = if args.iter().any(is_commit_id) {
        let sub = args.iter().position(|w| !w.text.starts_with('-'));
        let dashdash = args.iter().position(|w| w.text == "--");
        if args.iter().enumerate().any(|(k, w)| {
            is_commit_id(w) && (sub.is_none_or(|s| k <= s) || dashdash.is_some_and(|d| k > d))
        }) || args.iter().any(|w| w.text == "--no-index")
        {
            return refuse("a commit id from a command's output before git's subcommand cannot be proven read-only");
        }
        ids = args
            .iter()
            .map(|w| {
                if is_commit_id(w) {
                    Word::literal("0123456789abcdef")
                } else {
                    w.clone()
                }
            })
            .collect();
        &ids[..]
    } else {
        args
    };
    plain_args("git", args)?;
    let (chdirs, i) = global_options(args)?;
    let dirs = git_dirs(state, &chdirs)?;
    for d in &dirs {
        inside_root(Some(d), env)?;
    }
    let Some(sub) = args.get(i) else {
        return refuse("`git` without a subcommand is not read-only");
    };
    let rest = &args[i + 1..];
    // `git stash show --ext-diff` names the stash subcommand in the reason.
    let shown = match (sub.text.as_str(), rest.first()) {
        ("stash", Some(s)) if !s.text.starts_with('-') => format!("stash {}", s.text),
        _ => sub.text.clone(),
    };
    unsafe_options(&shown, rest)?;
    signatures(&sub.text, rest)?;
    subcommand(&sub.text, rest)?;
    own_repository(state, &chdirs, env)
}

/// A word that is exactly a commit id a producer printed.
fn is_commit_id(w: &Word) -> bool {
    w.names.as_deref() == Some(&[crate::names::HEX.to_string()][..])
}

/// git's own options before the subcommand: the `-C` directories in order
/// and the index of the subcommand, or the first option that is not safe.
fn global_options(args: &[Word]) -> Result<(Vec<String>, usize), Refusal> {
    let mut chdirs: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let a = w.text.as_str();
        if !a.starts_with('-') {
            break;
        }
        match a {
            "-C" => {
                i += 1;
                let Some(d) = args.get(i) else {
                    return stop("`git -C` without a directory");
                };
                if d.tilde {
                    return stop(format!(
                        "`git -C {}` names a directory outside what can be checked lexically",
                        d.text
                    ));
                }
                if d.text.is_empty() {
                    return stop("`git -C ''` with an empty directory is not read-only");
                }
                chdirs.push(d.text.clone());
            }
            "--no-pager"
            | "-P"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-lazy-fetch"
            | "--no-advice" => {}
            "-p" | "--paginate" => return stop(format!("`git {a}` runs the pager program")),
            _ if a.starts_with("-c") => {
                return stop("`git -c` sets configuration that can make git run programs")
            }
            _ if a.starts_with("--config-env") => {
                return stop("`git --config-env` sets configuration that can make git run programs")
            }
            _ if [
                "--git-dir",
                "--work-tree",
                "--exec-path",
                "--namespace",
                "--super-prefix",
            ]
            .iter()
            .any(|o| a.starts_with(o)) =>
            {
                let name = a.split('=').next().unwrap_or(a);
                return stop(format!(
                    "`git {name}` points git at another repository or programs"
                ));
            }
            _ => return stop(format!("git option `{a}` is not known to be read-only")),
        }
        i += 1;
    }
    Ok((chdirs, i))
}

fn subcommand(sub: &str, rest: &[Word]) -> Result<(), Refusal> {
    match sub {
        "status" | "log" | "diff" | "show" | "blame" | "grep" | "ls-files" | "ls-tree"
        | "rev-parse" | "rev-list" | "describe" | "shortlog" | "cat-file" | "for-each-ref"
        | "name-rev" | "count-objects" | "cherry" | "merge-base" | "check-ignore" | "show-ref" => {
            Ok(())
        }
        "branch" => list_only("branch", rest, "arvil"),
        "tag" => list_only("tag", rest, "li"),
        "reflog" => reflog(rest),
        "remote" => remote(rest),
        "stash" => stash(rest),
        "worktree" => worktree(rest),
        "config" => config(rest),
        "verify-commit" | "verify-tag" => {
            refuse(format!("`git {sub}` runs gpg to verify signatures"))
        }
        other => refuse(format!("`git {other}` is not a read-only git command")),
    }
}

/// Every directory git may start in: each directory the shell may be in,
/// then the `-C` arguments (lexically here; the oracle follows them physically).
fn git_dirs(state: &State, chdirs: &[String]) -> Result<Vec<PathBuf>, Refusal> {
    let Some(bases) = &state.git_dirs else {
        return Err(Refusal::new(
            "git in a directory that cannot be determined cannot be proven read-only",
        ));
    };
    Ok(bases
        .iter()
        .map(|base| {
            chdirs.iter().fold(base.clone(), |dir, c| {
                let p = Path::new(c);
                if p.is_absolute() {
                    normalize(p)
                } else {
                    normalize(&dir.join(p))
                }
            })
        })
        .collect())
}

/// Ask the oracle, for every directory the shell may be in, which repository
/// git would use; only the project's own is read-only.
fn own_repository(state: &State, chdirs: &[String], env: &Env<'_>) -> Result<(), Refusal> {
    let Some(oracle) = &env.opts.repo_oracle else {
        return refuse(
            "git cannot be proven to use the project's own repository here (nothing checked which repository it would use)",
        );
    };
    if env.opts.cwd.as_deref().is_some_and(|c| {
        c.components()
            .any(|p| matches!(p, std::path::Component::ParentDir))
    }) {
        return refuse(
            "git in a working directory given with `..` cannot be proven to use the project's own repository",
        );
    }
    let Some(bases) = &state.git_dirs else {
        return refuse("git in a directory that cannot be determined cannot be proven read-only");
    };
    for base in bases {
        let query = RepoQuery {
            dir: base.clone(),
            chdirs: chdirs.to_vec(),
        };
        let fact = oracle.repository(&query);
        let verdict = match &fact {
            RepoFact::Own => Ok(()),
            RepoFact::Other(why) => refuse(format!(
                "git would use a repository that is not the project's own ({why}): its configuration can make git run programs"
            )),
            RepoFact::Unknown(why) => refuse(format!(
                "which repository git would use cannot be known ({why})"
            )),
        };
        env.repo_checks.borrow_mut().push((query, fact));
        verdict?;
    }
    Ok(())
}

/// A `cd` to `target` (`None`: no operand, i.e. `$HOME`): every directory the
/// shell may be in stays possible, and each one's target is added.
pub(crate) fn track_cd(state: &mut State, target: Option<&str>) {
    let Some(t) = target.filter(|t| *t != "-") else {
        state.git_dirs = None;
        return;
    };
    let p = Path::new(t);
    // `..` is followed from `$PWD`, which is physical after a `cd -P` (and
    // when the shell starts somewhere its inherited `PWD` does not name):
    // through a symlink it leaves for the link target's parent, which only the
    // disk knows. So after `cd` climbs, git's directory is unknown.
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        state.git_dirs = None;
        return;
    }
    let Some(dirs) = &state.git_dirs else {
        return;
    };
    let mut next = dirs.clone();
    for d in dirs {
        let to = normalize(&d.join(p));
        if !next.contains(&to) {
            next.push(to);
        }
    }
    state.git_dirs = (next.len() <= MAX_DIRS).then_some(next);
}

/// A `planModeReadOnlyCommands` git entry (`prefix` words of `args` are the
/// entry): git's own options, even inside the entry (`git -C x.git`), are
/// judged as for any git command, and so are the repository it would use
/// and the options after the entry.
pub(crate) fn extra_check(
    args: &[Word],
    prefix: usize,
    env: &Env<'_>,
    state: &State,
) -> Result<(), Refusal> {
    if !env.opts.trust_git_config {
        return refuse("git configuration is not trusted");
    }
    plain_args("git", args)?;
    let (chdirs, i) = global_options(args)?;
    for d in git_dirs(state, &chdirs)? {
        inside_root(Some(&d), env)?;
    }
    let rest = &args[i.max(prefix)..];
    unsafe_options("", rest)?;
    signatures("", rest)?;
    own_repository(state, &chdirs, env)
}

fn inside_root(dir: Option<&Path>, env: &Env<'_>) -> Result<(), Refusal> {
    match dir {
        None => refuse("git in a directory that cannot be determined cannot be proven read-only"),
        Some(d) if !d.starts_with(&env.root) => refuse(format!(
            "git in `{}`, outside the project root, reads configuration that is not trusted",
            d.display()
        )),
        Some(_) => Ok(()),
    }
}

fn unsafe_options(sub: &str, rest: &[Word]) -> Result<(), Refusal> {
    for w in rest {
        let a = w.text.as_str();
        if a.starts_with("--") {
            if let Some(u) = long_hit(a, UNSAFE_LONG, SAFE_LONG) {
                let what = match u {
                    "--output" => "writes a file",
                    "--show-signature" => "runs gpg to verify signatures",
                    "--paginate" | "--open-files-in-pager" => "runs a pager program",
                    _ => "runs an external program",
                };
                return refuse(format!("`git {sub} {u}` {what}").replace("  ", " "));
            }
            submodule_format(sub, a)?;
        } else if sub == "grep" && a.starts_with('-') && a[1..].contains('O') {
            return refuse("`git grep -O` opens files in a pager program");
        }
    }
    Ok(())
}

/// `--submodule=diff` runs `git diff` inside every populated directory that
/// is a gitlink in the commits compared, with that repository's `config`
/// (`diff.external`, textconv): a nested repository the project's files
/// brought, even one the index no longer lists (which the repository
/// oracle cannot see). `log` and `short` stay in the project's repository.
/// git takes no abbreviation of `--submodule=`: any prefix is refused too.
fn submodule_format(sub: &str, arg: &str) -> Result<(), Refusal> {
    let Some((name, value)) = arg.split_once('=') else {
        return Ok(());
    };
    if name.len() > 4 && "--submodule".starts_with(name) && !matches!(value, "log" | "short") {
        return refuse(
            format!("`git {sub} {arg}` runs git in each submodule's own repository")
                .replace("  ", " "),
        );
    }
    Ok(())
}

/// `git branch` and `git tag` only list: no name to create, no flag that changes.
fn list_only(sub: &str, rest: &[Word], list_letters: &str) -> Result<(), Refusal> {
    let plural = if sub == "branch" { "branches" } else { "tags" };
    let mut list = false;
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        let a = w.text.as_str();
        i += 1;
        match a {
            "--list" => list = true,
            "--all" | "--remotes" | "--verbose" | "--show-current" | "--no-color" | "--color"
            | "--no-column" | "--column" | "--ignore-case" | "--omit-empty" => {}
            "--contains" | "--no-contains" | "--merged" | "--no-merged" | "--points-at"
            | "--sort" | "--format" => {
                // The value; one that looks like an option is judged as one.
                if rest.get(i).is_some_and(|v| !v.text.starts_with('-')) {
                    i += 1;
                }
            }
            _ if [
                "--contains=",
                "--no-contains=",
                "--merged=",
                "--no-merged=",
                "--points-at=",
                "--sort=",
                "--format=",
                "--color=",
                "--column=",
                "--abbrev=",
            ]
            .iter()
            .any(|p| a.starts_with(p)) => {}
            _ if sub == "tag"
                && a.starts_with("-n")
                && a[2..].bytes().all(|c| c.is_ascii_digit()) => {}
            _ if a.starts_with('-') && !a.starts_with("--") && a.len() > 1 => {
                for ch in a[1..].chars() {
                    if !list_letters.contains(ch) {
                        return refuse(format!("`git {sub} {a}` changes {plural}"));
                    }
                    if ch == 'l' {
                        list = true;
                    }
                }
            }
            _ if !a.starts_with('-') && list => {}
            _ if !a.starts_with('-') => {
                return refuse(format!("`git {sub} {a}` creates a {sub}"));
            }
            _ => return refuse(format!("`git {sub} {a}` changes {plural}")),
        }
    }
    Ok(())
}

/// `git remote` lists (`-v`); `git remote get-url` reads one URL.
fn remote(rest: &[Word]) -> Result<(), Refusal> {
    if rest
        .iter()
        .all(|a| matches!(a.text.as_str(), "-v" | "--verbose"))
    {
        return Ok(());
    }
    if rest.first().is_some_and(|a| a.text == "get-url") {
        return Ok(());
    }
    let what = rest.first().map_or("", |a| a.text.as_str());
    refuse(format!(
        "`git remote {what}` is not read-only (only `git remote -v` and `git remote get-url` are)"
    ))
}

/// `git stash list` (log options) and `git stash show` (diff options); any
/// other form (`git stash` alone, `-p`, `push`, `pop`...) changes the stash.
fn stash(rest: &[Word]) -> Result<(), Refusal> {
    match rest.first().map(|a| a.text.as_str()) {
        Some("list" | "show") => Ok(()),
        Some(other) => refuse(format!(
            "`git stash {other}` changes the stash or the working tree (only `git stash list` and `git stash show` are read-only)"
        )),
        None => refuse("`git stash` saves and resets local changes"),
    }
}

/// `git worktree list` only.
fn worktree(rest: &[Word]) -> Result<(), Refusal> {
    match rest.first().map(|a| a.text.as_str()) {
        Some("list") => Ok(()),
        Some(other) => refuse(format!(
            "`git worktree {other}` is not read-only (only `git worktree list` is)"
        )),
        None => refuse("`git worktree` without `list` is not read-only"),
    }
}

/// `git config` reading only: `--get`, `--get-all`, `--get-regexp`,
/// `--get-urlmatch`, `--get-color(bool)`, `--list`/`-l`, the `get` and `list`
/// subcommands, or one `section.key` alone. Every option must be known
/// exactly (git accepts abbreviations, so `--unse` is `--unset`).
fn config(rest: &[Word]) -> Result<(), Refusal> {
    const READ: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "--list",
    ];
    const MODIFIERS: &[&str] = &[
        "--global",
        "--system",
        "--local",
        "--worktree",
        // not `--includes`: with `--file` it follows `include.path` anywhere
        "--no-includes",
        "--null",
        "--name-only",
        "--show-origin",
        "--show-scope",
        "--bool",
        "--int",
        "--bool-or-int",
        "--bool-or-str",
        "--path",
        "--expiry-date",
        "--no-type",
        // options of the `get` and `list` subcommands
        "--all",
        "--regexp",
        "--fixed-value",
        "--show-names",
        "--no-show-names",
    ];
    // Options whose value is the next argument unless given with `=`.
    const VALUED: &[&str] = &[
        "--file",
        "--blob",
        "--type",
        "--default",
        "--value",
        "--url",
    ];
    const WRITE: &[&str] = &[
        "--add",
        "--replace-all",
        "--unset",
        "--unset-all",
        "--rename-section",
        "--remove-section",
        "--edit",
    ];
    let mut reads = 0;
    let mut positional: Vec<&str> = Vec::new();
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        let a = w.text.as_str();
        i += 1;
        // Without a subcommand git stops reading options at the first other
        // word: `git config core.pager -f less` sets core.pager to `-f`.
        let legacy = positional
            .first()
            .is_some_and(|p| !matches!(*p, "get" | "list"));
        if legacy || !a.starts_with('-') || a == "-" {
            positional.push(a);
            continue;
        }
        if a == "--" {
            positional.extend(rest[i..].iter().map(|w| w.text.as_str()));
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = format!("--{}", long.split('=').next().unwrap_or(long));
            if WRITE.contains(&name.as_str()) {
                return refuse(config_write(&name));
            }
            if READ.contains(&name.as_str()) {
                reads += 1;
            } else if VALUED.contains(&name.as_str()) {
                if !long.contains('=') {
                    i += 1;
                }
            } else if !MODIFIERS.contains(&name.as_str()) {
                return refuse(format!(
                    "`git config {a}` is not known to be read-only (only reading forms are)"
                ));
            }
            continue;
        }
        // Short options: `-l` and `-z` may cluster; `-f FILE` takes a value.
        let cluster = &a[1..];
        for (k, ch) in cluster.char_indices() {
            match ch {
                'l' => reads += 1,
                'z' => {}
                'f' if k + 1 == cluster.len() => i += 1,
                // `-f/etc/x` would hide the file's path from the checks on
                // paths outside the project, which see only whole words.
                'f' => {
                    return refuse(format!(
                        "`git config {a}` names its file inside the option: give the file as its own argument"
                    ))
                }
                'e' => return refuse(config_write("--edit")),
                _ => {
                    return refuse(format!(
                        "`git config -{ch}` is not known to be read-only (only reading forms are)"
                    ))
                }
            }
        }
    }
    let ok = match positional.first().copied() {
        // git 2.46+: `git config get NAME`, `git config list`.
        Some("get" | "list") if reads == 0 => true,
        Some(sub @ ("set" | "unset" | "rename-section" | "remove-section" | "edit")) => {
            return refuse(config_write(sub));
        }
        // `--get NAME [VALUE-PATTERN]`, `--list`: every word after the
        // action is a name or pattern.
        _ if reads == 1 => true,
        // `git config section.key` reads one value (a name has a dot); a
        // second word would be the value to set.
        Some(name) if reads == 0 && positional.len() == 1 && name.contains('.') => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        refuse(format!(
            "`git config` writes configuration here (`{}`): only `--get`, `--get-all`, `--get-regexp`, `--list` and `get`/`list` read it",
            crate::syntax::join(rest)
        ))
    }
}

fn config_write(what: &str) -> String {
    match what {
        "--edit" | "edit" => format!("`git config {what}` runs an editor on the configuration"),
        _ => format!("`git config {what}` writes configuration"),
    }
}

/// Signature checks run gpg (`gpg.program`): `--show-signature` (caught with
/// the unsafe options), `%G?`/`%GS`/`%GK`/... in a pretty format, the
/// `%(signature)` atom of ref formats, `git tag -v`/`--verify`.
fn signatures(sub: &str, rest: &[Word]) -> Result<(), Refusal> {
    for w in rest {
        let a = w.text.as_str();
        // `%G?`, and with the `+`, `-` or space modifiers: `%+GS`, `%-G?`, `% GK`.
        let placeholder = a.match_indices('%').any(|(at, _)| {
            let after = &a[at + 1..];
            let after = after.strip_prefix(['+', '-', ' ']).unwrap_or(after);
            after.starts_with('G')
        });
        if placeholder {
            return refuse(format!(
                "a `%G` placeholder in a git format (`{a}`) runs gpg to verify signatures"
            ));
        }
        let lower = a.to_ascii_lowercase();
        if lower.contains("%(") && lower.contains("signature") {
            return refuse(format!(
                "the `%(signature)` atom in a git format (`{a}`) runs gpg to verify signatures"
            ));
        }
        if sub == "tag" {
            let name = a.split('=').next().unwrap_or(a);
            let verify_long = name.len() > 3 && "--verify".starts_with(name);
            let verify_short = a.starts_with('-')
                && !a.starts_with("--")
                && !a.starts_with("-n")
                && a.contains('v');
            if verify_long || verify_short {
                return refuse(format!("`git tag {a}` runs gpg to verify signatures"));
            }
        }
    }
    Ok(())
}

fn reflog(rest: &[Word]) -> Result<(), Refusal> {
    let mut i = 0;
    let mut first = None;
    while let Some(w) = rest.get(i) {
        i += 1;
        if matches!(w.text.as_str(), "-n" | "--max-count") {
            i += 1;
        } else if !w.text.starts_with('-') {
            first = Some(w);
            break;
        }
    }
    match first {
        None => Ok(()),
        Some(w) if matches!(w.text.as_str(), "show" | "exists" | "list") => Ok(()),
        Some(w) => refuse(format!(
            "`git reflog {}` is not read-only (only `git reflog show` is)",
            w.text
        )),
    }
}
