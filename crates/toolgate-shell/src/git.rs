//! git: a handful of read-only subcommands, no option that runs programs or
//! writes files, and only inside the project root when configuration is trusted.

use std::path::Path;

use crate::analysis::{Env, State};
use crate::opts::{long_hit, normalize, plain_args};
use crate::syntax::Word;
use crate::Refusal;

/// Options that write files or run programs, for every subcommand.
const UNSAFE_LONG: &[&str] = &[
    "--output",
    "--ext-diff",
    "--textconv",
    "--exec",
    "--open-files-in-pager",
    "--paginate",
    "--filters",
];
/// Exact names that abbreviate an unsafe option but are options of their own.
const SAFE_LONG: &[&str] = &["--text"];

fn refuse(reason: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal::new(reason))
}

/// Judge `git ARGS` (the words after `git`).
pub(crate) fn judge(args: &[Word], env: &Env<'_>, state: &State) -> Result<(), Refusal> {
    if !env.opts.trust_git_config {
        return refuse("git is not read-only here: the repository's configuration is not trusted (trustGitConfig is false) and can make git run programs");
    }
    plain_args("git", args)?;
    let mut dir = state.cwd.clone();
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
                    return refuse("`git -C` without a directory");
                };
                if d.tilde {
                    return refuse(format!(
                        "`git -C {}` names a directory outside what can be checked lexically",
                        d.text
                    ));
                }
                let p = Path::new(&d.text);
                dir = if p.is_absolute() {
                    Some(normalize(p))
                } else {
                    dir.map(|base| normalize(&base.join(p)))
                };
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
            "-p" | "--paginate" => return refuse(format!("`git {a}` runs the pager program")),
            _ if a.starts_with("-c") => {
                return refuse("`git -c` sets configuration that can make git run programs")
            }
            _ if a.starts_with("--config-env") => {
                return refuse(
                    "`git --config-env` sets configuration that can make git run programs",
                )
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
                return refuse(format!(
                    "`git {name}` points git at another repository or programs"
                ));
            }
            _ => return refuse(format!("git option `{a}` is not known to be read-only")),
        }
        i += 1;
    }
    inside_root(dir.as_deref(), env)?;
    let Some(sub) = args.get(i) else {
        return refuse("`git` without a subcommand is not read-only");
    };
    let rest = &args[i + 1..];
    unsafe_options(&sub.text, rest)?;
    match sub.text.as_str() {
        "status" | "log" | "diff" | "show" | "blame" | "grep" | "ls-files" | "ls-tree"
        | "rev-parse" | "rev-list" | "describe" | "shortlog" | "cat-file" | "for-each-ref"
        | "name-rev" => Ok(()),
        "branch" => list_only("branch", rest, "arvil"),
        "tag" => list_only("tag", rest, "li"),
        "reflog" => reflog(rest),
        "remote" => {
            if rest
                .iter()
                .all(|a| matches!(a.text.as_str(), "-v" | "--verbose"))
            {
                Ok(())
            } else {
                refuse(format!(
                    "`git remote {}` is not read-only (only `git remote -v` is)",
                    crate::syntax::join(rest)
                ))
            }
        }
        other => refuse(format!("`git {other}` is not a read-only git command")),
    }
}

/// The rest of a `planModeReadOnlyCommands` git entry still has to be safe.
pub(crate) fn extra_check(rest: &[Word], env: &Env<'_>, state: &State) -> Result<(), Refusal> {
    if !env.opts.trust_git_config {
        return refuse("git configuration is not trusted");
    }
    plain_args("git", rest)?;
    inside_root(state.cwd.as_deref(), env)?;
    unsafe_options("", rest)
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
                    "--paginate" | "--open-files-in-pager" => "runs a pager program",
                    _ => "runs an external program",
                };
                return refuse(format!("`git {sub} {u}` {what}").replace("  ", " "));
            }
        } else if sub == "grep" && a.starts_with('-') && a[1..].contains('O') {
            return refuse("`git grep -O` opens files in a pager program");
        }
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
