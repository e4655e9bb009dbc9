//! Which repository git would use: git's discovery, done on the disk, so
//! that shell analysis (which never touches the disk) can ask through
//! [`toolgate_shell::RepoOracle`] whether a git command stays in the
//! project's own repository.
//!
//! A repository that is not the project's own runs programs from its
//! `config` (`core.fsmonitor`, `diff.external`, `core.pager`, ...): a bare
//! repository committed as ordinary files (`HEAD`, `config`, `objects/`,
//! `refs/`) survives `git clone`, and `git -C that.git status` or a `cd`
//! into it makes git use it.
//!
//! [`DiskRepos`] follows git (setup.c): it resolves the directory git starts
//! in physically (the shell's directory, then each `-C` through the kernel's
//! rules, symlinks and all), then walks up from it; at each directory `D`,
//! `D/.git` (a directory that looks like a repository, or a `gitdir:` file)
//! or `D` itself looking like a repository is the one git uses. It looks
//! like a repository more readily than git does (a `HEAD` entry and an
//! `objects` or `commondir` entry are enough), so it never walks past one git
//! would stop at. The answer is [`RepoFact::Own`] only when that directory is
//! inside the project root (physically) and the repository found is the one
//! found from the project root (or none is found from either); and the
//! project's own repository must be a `.git` (of the root or of a parent, as
//! in a monorepo), never a directory that is itself a repository, which is
//! what a committed bare repository looks like. Anything it cannot read is
//! [`RepoFact::Unknown`], which shell analysis refuses.
//!
//! Cost: from the project root itself (no `cd`, no `-C`, no `cwd`) three
//! `stat`s; elsewhere the directory is resolved and each level up to the
//! root is looked at. Nothing is remembered, so every answer is today's disk.
//!
//! Known limits: git also reads `GIT_DIR`, `GIT_CEILING_DIRECTORIES`,
//! `GIT_DISCOVERY_ACROSS_FILESYSTEM` and `safe.bareRepository` from the
//! agent's environment and configuration; those can only make git stop
//! earlier or refuse, except `GIT_DIR`, which the agent would have to have
//! set outside toolgate. The disk is read when the call is judged: a
//! repository planted between the decision and the run is not seen.

use std::io::Read;
use std::path::{Path, PathBuf};

use toolgate_shell::{RepoFact, RepoOracle, RepoQuery};

/// The disk, as git discovers repositories on it, for one project root.
#[derive(Debug, Clone)]
pub struct DiskRepos {
    root: PathBuf,
}

impl DiskRepos {
    /// An oracle for the project at `root`.
    pub fn new(root: impl Into<PathBuf>) -> DiskRepos {
        DiskRepos { root: root.into() }
    }

    fn judge(&self, query: &RepoQuery) -> Result<RepoFact, String> {
        let own = match self.own()? {
            Own::Repository(dir) => Some(dir),
            Own::None => None,
            Own::Bare(dir) => {
                return Ok(RepoFact::Other(format!(
                    "the project's repository would be `{}`, a directory that is itself a repository rather than a `.git`",
                    dir.display()
                )))
            }
        };
        // From the project root itself git finds the project's repository:
        // the most common question needs no more looking.
        if query.chdirs.is_empty() && query.dir == self.root {
            return Ok(RepoFact::Own);
        }
        let root = canonical(&self.root)?;
        let mut dir = canonical(&query.dir)?;
        for c in &query.chdirs {
            // `chdir(2)` as git does for `-C`: relative to where it is, and
            // physically (`link/..` is the parent of the link's target).
            let next = if Path::new(c).is_absolute() {
                PathBuf::from(c)
            } else {
                dir.join(c)
            };
            dir = canonical(&next)?;
        }
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("`{}` is not a directory", dir.display())),
            Err(e) => return Err(format!("`{}` cannot be read: {e}", dir.display())),
        }
        if !dir.starts_with(&root) {
            return Ok(RepoFact::Other(format!(
                "`{}` is outside the project root",
                dir.display()
            )));
        }
        // Walk up to the project root (whose answer is the project's own).
        let mut at = dir;
        while at != root {
            if let Some(mut found) = at_level(&at)? {
                found.0 = canonical(&found.0)?;
                let own = own.as_deref().map(canonical).transpose()?;
                if own.as_ref() == Some(&found.0) {
                    return Ok(RepoFact::Own);
                }
                return Ok(RepoFact::Other(if found.1 {
                    format!(
                        "`{}` has its own `.git` (`{}`)",
                        shown(&at, &root),
                        shown(&found.0, &root)
                    )
                } else {
                    format!("`{}` is a repository", shown(&found.0, &root))
                }));
            }
            if !at.pop() {
                break;
            }
        }
        Ok(RepoFact::Own)
    }

    /// The repository git finds from the project root.
    fn own(&self) -> Result<Own, String> {
        // The usual case, `ROOT/.git`, without resolving the whole path.
        if let Some((repo, dotgit)) = at_level(&self.root)? {
            return Ok(if dotgit {
                Own::Repository(repo)
            } else {
                Own::Bare(repo)
            });
        }
        let mut at = canonical(&self.root)?;
        while at.pop() {
            if let Some((repo, dotgit)) = at_level(&at)? {
                return Ok(if dotgit {
                    Own::Repository(repo)
                } else {
                    Own::Bare(repo)
                });
            }
        }
        Ok(Own::None)
    }
}

/// What git finds from the project root.
enum Own {
    /// A `.git` directory or `gitdir:` file (the repository's path, unresolved).
    Repository(PathBuf),
    /// No repository: git commands fail, and run nothing of a repository's.
    None,
    /// A directory that is itself a repository, as a committed bare
    /// repository is: not trusted as the project's own.
    Bare(PathBuf),
}

impl RepoOracle for DiskRepos {
    fn repository(&self, query: &RepoQuery) -> RepoFact {
        self.judge(query).unwrap_or_else(RepoFact::Unknown)
    }
}

/// A path shown relative to the project root when it is inside it.
fn shown(path: &Path, root: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

fn canonical(path: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("`{}` cannot be resolved: {e}", path.display()))
}

/// Does `path` have an entry `name` (of any kind, a dangling symlink too)?
fn has(path: &Path, name: &str) -> Result<bool, String> {
    let p = path.join(name);
    match std::fs::symlink_metadata(&p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("`{}` cannot be read: {e}", p.display())),
    }
}

/// Could git take `path` for a repository? git wants `objects/` and `refs/`
/// (possibly through `commondir`) and a valid `HEAD`; this says yes to more.
fn looks_like_repository(path: &Path) -> Result<bool, String> {
    Ok(has(path, "HEAD")? && (has(path, "objects")? || has(path, "commondir")?))
}

/// The repository git takes at directory `dir`, if any: `dir/.git` (a
/// directory that looks like a repository, or a `gitdir:` file), else `dir`
/// itself when it looks like one (the path as found, not resolved). The flag
/// says it came through `.git`.
fn at_level(dir: &Path) -> Result<Option<(PathBuf, bool)>, String> {
    let dotgit = dir.join(".git");
    match std::fs::metadata(&dotgit) {
        Ok(m) if m.is_file() => return gitfile(dir, &dotgit).map(|r| Some((r, true))),
        Ok(m) if m.is_dir() => {
            if looks_like_repository(&dotgit)? {
                return Ok(Some((dotgit, true)));
            }
        }
        Ok(_) => {
            return Err(format!(
                "`{}` is neither a file nor a directory",
                dotgit.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("`{}` cannot be read: {e}", dotgit.display())),
    }
    if looks_like_repository(dir)? {
        return Ok(Some((dir.to_path_buf(), false)));
    }
    Ok(None)
}

/// The repository a `.git` file (`gitdir: PATH`) names.
fn gitfile(dir: &Path, dotgit: &Path) -> Result<PathBuf, String> {
    let mut text = String::new();
    std::fs::File::open(dotgit)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(|e| format!("`{}` cannot be read: {e}", dotgit.display()))?;
    let Some(target) = text.strip_prefix("gitdir: ") else {
        return Err(format!("`{}` is not a `gitdir:` file", dotgit.display()));
    };
    let target = Path::new(target.trim_end());
    Ok(dir.join(target))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;
    use std::fs;

    /// A bare repository as plain files, the way one survives `git clone`.
    fn bare(dir: &Path) {
        fs::create_dir_all(dir.join("objects")).unwrap();
        fs::create_dir_all(dir.join("refs/heads")).unwrap();
        fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(
            dir.join("config"),
            "[core]\n\tbare = true\n\tfsmonitor = touch /tmp/PWNED\n",
        )
        .unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("toolgate-repo-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        canonical(&dir).unwrap()
    }

    fn answer(oracle: &DiskRepos, dir: &Path, chdirs: &[&str]) -> String {
        let fact = oracle.repository(&RepoQuery {
            dir: dir.to_path_buf(),
            chdirs: chdirs.iter().map(|c| c.to_string()).collect(),
        });
        match fact {
            RepoFact::Own => "own".to_string(),
            RepoFact::Other(why) => format!("other: {why}"),
            RepoFact::Unknown(why) => format!("unknown: {why}"),
        }
    }

    #[test]
    fn discovers_like_git() {
        let base = scratch("discover");
        let outside = base.join("outside");
        fs::create_dir_all(&outside).unwrap();
        bare(&outside.join("far.git"));
        let root = base.join("proj");
        bare(&root.join(".git"));
        fs::create_dir_all(root.join("src/deep")).unwrap();
        bare(&root.join("vendor/evil.git"));
        fs::create_dir_all(root.join("vendor/evil.git/refs/tags")).unwrap();
        fs::create_dir_all(root.join("sub/x")).unwrap();
        bare(&root.join("sub/.git"));
        fs::create_dir_all(root.join("wt")).unwrap();
        fs::write(root.join("wt/.git"), "gitdir: ../vendor/evil.git\n").unwrap();
        fs::create_dir_all(root.join("same")).unwrap();
        fs::write(root.join("same/.git"), "gitdir: ../.git\n").unwrap();
        fs::create_dir_all(root.join("notrepo/.git")).unwrap(); // empty `.git`: git walks on
        std::os::unix::fs::symlink(root.join("vendor/evil.git"), root.join("src/link")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        let oracle = DiskRepos::new(&root);
        let rows: &[(&str, &[&str], &str)] = &[
            ("", &[], "own"),
            ("src/deep", &[], "own"),
            ("notrepo", &[], "own"),
            ("same", &[], "own"),
            ("", &["src", "deep", ".."], "own"),
            ("", &[".git"], "own"),
            (
                "vendor/evil.git",
                &[],
                "other: `vendor/evil.git` is a repository",
            ),
            (
                "vendor/evil.git/refs/tags",
                &[],
                "other: `vendor/evil.git` is a repository",
            ),
            (
                "",
                &["vendor", "evil.git"],
                "other: `vendor/evil.git` is a repository",
            ),
            ("sub/x", &[], "other: `sub` has its own `.git`"),
            ("wt", &[], "(`vendor/evil.git`)"),
            // A symlink into the bare repository, and out of the project.
            ("src/link", &[], "other: `vendor/evil.git` is a repository"),
            (
                "src",
                &["link/refs/.."],
                "other: `vendor/evil.git` is a repository",
            ),
            ("out", &[], "is outside the project root"),
            ("src", &["../out/far.git"], "is outside the project root"),
            ("", &["/tmp"], "is outside the project root"),
            ("missing", &[], "unknown: "),
            ("", &["missing"], "unknown: "),
        ];
        let mut bad = Vec::new();
        for (dir, chdirs, want) in rows {
            let got = answer(&oracle, &root.join(dir), chdirs);
            if !got.contains(want) || (*want == "own" && got != "own") {
                bad.push(format!("{dir} {chdirs:?}: {got}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn a_project_without_a_repository() {
        let base = scratch("norepo");
        let root = base.join("proj");
        fs::create_dir_all(root.join("src")).unwrap();
        bare(&root.join("data/evil.git"));
        let oracle = DiskRepos::new(&root);
        assert_eq!(answer(&oracle, &root.join("src"), &[]), "own");
        assert!(answer(&oracle, &root, &["data/evil.git"]).starts_with("other: "));
        // A project root that is itself a repository (a bare one committed
        // as files, unpacked from an archive) is not trusted, even at the root.
        let bare_root = base.join("bare-root");
        bare(&bare_root);
        fs::create_dir_all(bare_root.join("src")).unwrap();
        let oracle = DiskRepos::new(&bare_root);
        assert!(answer(&oracle, &bare_root, &[]).contains("itself a repository"));
        assert!(answer(&oracle, &bare_root.join("src"), &[]).contains("itself a repository"));
        // A project inside a larger repository (a monorepo) uses that one.
        let mono = base.join("mono");
        bare(&mono.join(".git"));
        let pkg = mono.join("packages/app");
        fs::create_dir_all(pkg.join("src")).unwrap();
        bare(&pkg.join("vendor/x.git"));
        let oracle = DiskRepos::new(&pkg);
        assert_eq!(answer(&oracle, &pkg, &[]), "own");
        assert_eq!(answer(&oracle, &pkg.join("src"), &[]), "own");
        assert!(answer(&oracle, &pkg, &[".."]).contains("outside the project root"));
        assert!(answer(&oracle, &pkg, &["vendor/x.git"]).contains("is a repository"));
        // A project root that does not exist: nothing can be known.
        let gone = DiskRepos::new(base.join("gone"));
        assert!(answer(&gone, &root, &[]).starts_with("unknown: "));
        let _ = fs::remove_dir_all(&base);
    }
}
