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
//! Submodules: in the project's own repository `git status`, `git diff` and
//! others recurse into every populated gitlink (a mode 160000 entry of the
//! index whose directory has a `.git`), running git there with THAT
//! repository's `config`. A submodule checked out by git (`git clone
//! --recurse-submodules`, `git submodule update`) has a `gitdir:` file into
//! the superproject's `.git/modules/`, written locally by git: it is the
//! project's own (git run inside it too), and its own index is looked at
//! the same way. A `.git` directory (what `git add` of a nested repository
//! records, or what an archive carries) or a `gitdir:` file pointing
//! anywhere else makes the answer [`RepoFact::Other`] for every git command in the project, not
//! only the recursing ones: which commands recurse depends on options and
//! on configuration (`submodule.recurse`, `diff.submodule`,
//! `status.submoduleSummary`, `--recurse-submodules`). The index is parsed
//! here (versions 2, 3 and 4, SHA-1 or SHA-256); one git would need more to
//! read (a split index, a sparse index, any other required extension) is
//! [`RepoFact::Unknown`]. A `.gitmodules` entry without a gitlink is not
//! recursed into (checked with git 2.47, `submodule.recurse=true` too).
//!
//! Cost: from the project root itself (no `cd`, no `-C`, no `cwd`) four
//! `stat`s (three for discovery, one for the index); elsewhere the
//! directory is resolved and each level up to the root is looked at. The
//! gitlinks of an index are remembered keyed on the index file's device,
//! inode, size and times, so an unchanged index costs its `stat`; each
//! gitlink then costs a `stat` of its `.git` (and reading a `gitdir:`
//! file). Everything else is read again on every question.
//!
//! Known limits: git also reads `GIT_DIR`, `GIT_CEILING_DIRECTORIES`,
//! `GIT_DISCOVERY_ACROSS_FILESYSTEM` and `safe.bareRepository` from the
//! agent's environment and configuration; those can only make git stop
//! earlier or refuse, except `GIT_DIR`, which the agent would have to have
//! set outside toolgate. The disk is read when the call is judged: a
//! repository planted between the decision and the run is not seen.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use toolgate_shell::{RepoFact, RepoOracle, RepoQuery};

/// The disk, as git discovers repositories on it, for one project root.
#[derive(Debug, Clone)]
pub struct DiskRepos {
    root: PathBuf,
    /// The gitlinks of each index file read so far, keyed on the file's
    /// identity, so that an unchanged index costs one `stat`. Shared by
    /// clones; the broker asks from several threads.
    indexes: Arc<Mutex<HashMap<PathBuf, (IndexKey, Gitlinks)>>>,
    /// With [`DiskRepos::per_batch`]: the answers given while the current
    /// batch of input lines is decided (see [`next_batch`]).
    answers: Option<Arc<Mutex<Answers>>>,
}

/// Answers remembered for one batch: the batch number and the answers.
type Answers = (u64, HashMap<(PathBuf, Vec<String>), RepoFact>);

/// The batch of input lines being decided, counted by the transport.
static BATCH: AtomicU64 = AtomicU64::new(0);

/// A new batch of input lines is about to be decided: answers remembered by a
/// [`DiskRepos::per_batch`] oracle are forgotten. Within one batch nothing the
/// broker allowed has run yet (its decisions are written together when the
/// batch ends), so the disk can only change as it could between any decision
/// and its run; remembering the answer for that long adds no window, and
/// spares the `stat`s of asking again for every git command of the batch.
pub fn next_batch() {
    BATCH.fetch_add(1, Ordering::Relaxed);
}

/// The paths of an index's gitlinks, or why the index cannot be read.
type Gitlinks = Arc<Result<Vec<Vec<u8>>, String>>;

/// What identifies one version of an index file: git writes a new index to
/// `index.lock` and renames it over the old one, so a new index is a new
/// inode, and an index changed in place changes its size or times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// How many index files are remembered (the project's and its submodules').
const INDEXES_REMEMBERED: usize = 64;

/// How deep submodules of submodules are followed before giving up.
const SUBMODULE_DEPTH: usize = 8;

impl DiskRepos {
    /// An oracle for the project at `root`.
    pub fn new(root: impl Into<PathBuf>) -> DiskRepos {
        DiskRepos {
            root: root.into(),
            indexes: Arc::default(),
            answers: None,
        }
    }

    /// The same oracle, remembering its answers until the transport starts
    /// the next batch of input lines ([`next_batch`]).
    pub fn per_batch(self) -> DiskRepos {
        DiskRepos {
            answers: Some(Arc::default()),
            ..self
        }
    }

    fn judge(&self, query: &RepoQuery) -> Result<RepoFact, String> {
        let own = match self.own()? {
            Own::Repository(dir, top) => Some((dir, top)),
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
            return self.own_gitlinks(own.as_ref());
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
                let own_dir = own.as_ref().map(|o| canonical(&o.0)).transpose()?;
                if own_dir.as_ref() == Some(&found.0) {
                    // The project's repository with the work tree git
                    // gives a `gitdir:` file: the directory holding it.
                    return self.gitlinks(&at, &found.0, 0);
                }
                // A submodule checked out by git: its repository is in the
                // project's `.git/modules/`, with a `config` git wrote.
                if let Some(own_dir) = own_dir.filter(|_| found.1) {
                    let modules = modules_dirs(&own_dir);
                    if modules
                        .iter()
                        .any(|m| found.0.starts_with(m) && found.0 != *m)
                    {
                        return self.gitlinks(&at, &found.0, 1);
                    }
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
        self.own_gitlinks(own.as_ref())
    }

    /// [`DiskRepos::gitlinks`] for the project's own repository, if any.
    fn own_gitlinks(&self, own: Option<&(PathBuf, PathBuf)>) -> Result<RepoFact, String> {
        match own {
            Some((dir, top)) => self.gitlinks(top, dir, 0),
            None => Ok(RepoFact::Own),
        }
    }

    /// Does git, working in the repository `gitdir` with the work tree
    /// `top`, stay in repositories the project owns? `git status`, `git
    /// diff` and others recurse into every populated submodule (a gitlink,
    /// mode 160000, in the index whose directory has a `.git`), running git
    /// there with that repository's `config` (`core.fsmonitor`,
    /// `core.hooksPath`, `diff.external`, ...). A submodule checked out by
    /// git has a `gitdir:` file into the superproject's `.git/modules/`,
    /// which git wrote locally; its own submodules are looked at the same
    /// way. A `.git` directory (what `git add` of a nested repository
    /// records) or a `gitdir:` file pointing elsewhere is a repository the
    /// project's files brought.
    fn gitlinks(&self, top: &Path, gitdir: &Path, depth: usize) -> Result<RepoFact, String> {
        let parsed = self.index_gitlinks(&gitdir.join("index"))?;
        let links = match &*parsed {
            Ok(links) => links,
            Err(why) => return Err(why.clone()),
        };
        if links.is_empty() {
            return Ok(RepoFact::Own);
        }
        if depth >= SUBMODULE_DEPTH {
            return Err(format!(
                "submodules are nested more than {SUBMODULE_DEPTH} deep (`{}`)",
                shown(top, &self.root)
            ));
        }
        let mut modules: Option<Vec<PathBuf>> = None;
        for link in links.iter() {
            let rel = Path::new(std::ffi::OsStr::from_bytes(link));
            let plain = rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !plain || rel.as_os_str().is_empty() {
                return Err(format!(
                    "the index of `{}` has a gitlink with an unusual path `{}`",
                    gitdir.display(),
                    rel.display()
                ));
            }
            let sub = top.join(rel);
            let dotgit = sub.join(".git");
            let name = shown(&sub, &self.root);
            let meta = match std::fs::metadata(&dotgit) {
                Ok(m) => m,
                // Not populated: git does not go in.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(format!("`{}` cannot be read: {e}", dotgit.display())),
            };
            if meta.is_dir() {
                return Ok(RepoFact::Other(format!(
                    "`{name}` is a submodule with its own repository, a `.git` directory: git recurses into it"
                )));
            }
            if !meta.is_file() {
                return Err(format!(
                    "`{}` is neither a file nor a directory",
                    dotgit.display()
                ));
            }
            let target = canonical(&gitfile(&sub, &dotgit)?)?;
            let modules = modules.get_or_insert_with(|| modules_dirs(gitdir));
            if !modules
                .iter()
                .any(|m| target.starts_with(m) && target != *m)
            {
                return Ok(RepoFact::Other(format!(
                    "`{name}` is a submodule with its own repository, `{}`, outside the project's `.git/modules`: git recurses into it",
                    shown(&target, &self.root)
                )));
            }
            match self.gitlinks(&sub, &target, depth + 1)? {
                RepoFact::Own => {}
                other => return Ok(other),
            }
        }
        Ok(RepoFact::Own)
    }

    /// The gitlinks of the index file `index` (none when there is no
    /// index), read again only when the file changed.
    fn index_gitlinks(&self, index: &Path) -> Result<Gitlinks, String> {
        let meta = match std::fs::metadata(index) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Arc::new(Ok(Vec::new())))
            }
            Err(e) => return Err(format!("`{}` cannot be read: {e}", index.display())),
        };
        let key = IndexKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        };
        // A thread that panicked holding the lock left a whole map: use it.
        {
            let map = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((k, links)) = map.get(index) {
                if *k == key {
                    return Ok(links.clone());
                }
            }
        }
        let mut data = Vec::new();
        std::fs::File::open(index)
            .and_then(|f| f.take(meta.size()).read_to_end(&mut data))
            .map_err(|e| format!("`{}` cannot be read: {e}", index.display()))?;
        let links = Arc::new(
            parse_index(&data)
                .map_err(|why| format!("the index `{}` cannot be read: {why}", index.display())),
        );
        let mut map = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= INDEXES_REMEMBERED {
            map.clear();
        }
        map.insert(index.to_path_buf(), (key, links.clone()));
        Ok(links)
    }

    /// The repository git finds from the project root.
    fn own(&self) -> Result<Own, String> {
        // The usual case, `ROOT/.git`, without resolving the whole path.
        if let Some((repo, dotgit)) = at_level(&self.root)? {
            return Ok(if dotgit {
                Own::Repository(repo, self.root.clone())
            } else {
                Own::Bare(repo)
            });
        }
        let mut at = canonical(&self.root)?;
        while at.pop() {
            if let Some((repo, dotgit)) = at_level(&at)? {
                return Ok(if dotgit {
                    Own::Repository(repo, at)
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
    /// A `.git` directory or `gitdir:` file (the repository's path,
    /// unresolved), and the work tree: the directory holding that `.git`.
    Repository(PathBuf, PathBuf),
    /// No repository: git commands fail, and run nothing of a repository's.
    None,
    /// A directory that is itself a repository, as a committed bare
    /// repository is: not trusted as the project's own.
    Bare(PathBuf),
}

impl RepoOracle for DiskRepos {
    fn repository(&self, query: &RepoQuery) -> RepoFact {
        let Some(answers) = &self.answers else {
            return self.judge(query).unwrap_or_else(RepoFact::Unknown);
        };
        let lock = || answers.lock().unwrap_or_else(PoisonError::into_inner);
        let batch = BATCH.load(Ordering::Relaxed);
        let key = (query.dir.clone(), query.chdirs.clone());
        {
            let mut answers = lock();
            if answers.0 != batch {
                *answers = (batch, HashMap::new());
            }
            if let Some(fact) = answers.1.get(&key) {
                return fact.clone();
            }
        }
        let fact = self.judge(query).unwrap_or_else(RepoFact::Unknown);
        let mut answers = lock();
        if answers.0 == batch {
            answers.1.insert(key, fact.clone());
        }
        fact
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

/// Where the submodules of the repository `gitdir` keep their
/// repositories, resolved: `modules/` in it (`git rev-parse --git-path
/// modules`, per worktree in a linked worktree) and in its common directory
/// (which a linked worktree's `commondir` names), when they exist.
fn modules_dirs(gitdir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::canonicalize(gitdir.join("modules"))
        .ok()
        .into_iter()
        .collect();
    if let Ok(text) = std::fs::read_to_string(gitdir.join("commondir")) {
        let common = gitdir.join(text.trim_end_matches(['\n', '\r']));
        dirs.extend(std::fs::canonicalize(common.join("modules")).ok());
    }
    dirs
}

/// The paths of the gitlinks (mode 160000 entries, any stage) in the bytes
/// of an index file: versions 2, 3 and 4 (prefix-compressed paths), with
/// SHA-1 or SHA-256 object names (whichever reading accounts for every byte
/// of the file). An index git would need something else to read (a split
/// index's `link`, a sparse index's `sdir`, any other required extension)
/// is an error: its gitlinks cannot be known from this file alone.
fn parse_index(data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if data.len() < 12 || &data[..4] != b"DIRC" {
        return Err("not a git index".to_string());
    }
    let version = be32(data, 4).unwrap_or(0);
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version} is not known"));
    }
    let mut readings = [20, 32]
        .into_iter()
        .filter_map(|hash| parse_entries(data, version, hash));
    let reading = match (readings.next(), readings.next()) {
        (Some(one), None) => one,
        (Some(one), Some(two)) if one == two => one,
        (Some(_), Some(_)) => return Err("its object name length is ambiguous".to_string()),
        (None, _) => return Err("its entries are malformed".to_string()),
    };
    match reading {
        (links, None) => Ok(links),
        (_, Some(why)) => Err(why),
    }
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// One reading of an index with `hash`-byte object names: the gitlinks and
/// what git would need that this reading does not have, or `None` when the
/// bytes do not add up (entries, then extensions, then a `hash`-byte
/// checksum, exactly).
#[allow(clippy::type_complexity)]
fn parse_entries(data: &[u8], version: u32, hash: usize) -> Option<(Vec<Vec<u8>>, Option<String>)> {
    let end = data.len().checked_sub(hash)?;
    let count = be32(data, 8)?;
    let mut at = 12usize;
    let mut links = Vec::new();
    let mut path: Vec<u8> = Vec::new();
    for _ in 0..count {
        // ctime, mtime (8 each), dev, ino, mode, uid, gid, size (4 each).
        let mode = be32(data, at + 24)?;
        let flags_at = at.checked_add(40 + hash)?;
        let flags = u16::from_be_bytes(data.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let mut name_at = flags_at + 2;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            name_at += 2;
        }
        if version == 4 {
            // The path is the previous one less N bytes, plus this suffix.
            let (strip, after) = varint(data, name_at)?;
            let strip = usize::try_from(strip).ok()?;
            let keep = path.len().checked_sub(strip)?;
            path.truncate(keep);
            let len = data.get(after..end)?.iter().position(|&b| b == 0)?;
            path.extend_from_slice(&data[after..after + len]);
            at = after + len + 1;
        } else {
            let len = data.get(name_at..end)?.iter().position(|&b| b == 0)?;
            let short = usize::from(flags & 0xfff);
            if short != 0xfff && short != len {
                return None;
            }
            path.clear();
            path.extend_from_slice(&data[name_at..name_at + len]);
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            let size = (name_at - at + len + 8) & !7;
            if data.get(name_at + len..at + size)?.iter().any(|&b| b != 0) {
                return None;
            }
            at += size;
        }
        if at > end {
            return None;
        }
        if mode & 0o170000 == 0o160000 {
            links.push(path.clone());
        }
    }
    // Extensions: a 4-byte signature and a 4-byte size each. One whose
    // signature does not start with `A`..`Z` is one git must understand.
    let mut unreadable = None;
    while at < end {
        let sig = data.get(at..at + 4)?;
        let size = usize::try_from(be32(data, at + 4)?).ok()?;
        at = at.checked_add(8)?.checked_add(size)?;
        if at > end {
            return None;
        }
        if unreadable.is_none() && !sig[0].is_ascii_uppercase() {
            unreadable = Some(match sig {
                b"link" => "it is a split index (`core.splitIndex`)".to_string(),
                b"sdir" => "it is a sparse index (`index.sparse`)".to_string(),
                _ => format!(
                    "it has the index extension `{}`",
                    String::from_utf8_lossy(sig)
                ),
            });
        }
    }
    (at == end).then_some((links, unreadable))
}

/// git's offset varint (varint.c) at `at`: the value and where it ends.
fn varint(data: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut c = *data.get(at)?;
    at += 1;
    let mut val = u64::from(c & 127);
    while c & 128 != 0 {
        val = val.checked_add(1)?;
        if val >> 57 != 0 {
            return None;
        }
        c = *data.get(at)?;
        at += 1;
        val = (val << 7) + u64::from(c & 127);
    }
    Some((val, at))
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

    /// A per-batch oracle answers from memory within a batch and reads the
    /// disk again in the next one; a plain oracle always reads the disk.
    #[test]
    fn per_batch_answers_last_one_batch() {
        let root = scratch("per-batch").join("proj");
        bare(&root.join(".git"));
        fs::create_dir_all(root.join("sub")).unwrap();
        let remembering = DiskRepos::new(&root).per_batch();
        let plain = DiskRepos::new(&root);
        next_batch();
        assert_eq!(answer(&remembering, &root.join("sub"), &[]), "own");
        bare(&root.join("sub/.git"));
        // Same batch: nothing decided in it has run yet, the answer stands.
        assert_eq!(answer(&remembering, &root.join("sub"), &[]), "own");
        assert!(answer(&plain, &root.join("sub"), &[]).starts_with("other"));
        next_batch();
        assert!(answer(&remembering, &root.join("sub"), &[]).starts_with("other"));
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

    /// Runs real git in `dir` (no user or system configuration).
    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A repository at `dir` with one commit of `f`.
    fn repo(dir: &Path, extra: &[&str]) {
        fs::create_dir_all(dir).unwrap();
        let mut init = vec!["init", "-q", "-b", "main"];
        init.extend(extra);
        git(dir, &init);
        fs::write(dir.join("f"), "x\n").unwrap();
        git(dir, &["add", "f"]);
        git(dir, &["commit", "-q", "-m", "c"]);
    }

    /// The answer from the root and from a subdirectory, which must agree.
    fn both(oracle: &DiskRepos, root: &Path) -> String {
        let at_root = answer(oracle, root, &[]);
        let in_src = answer(oracle, &root.join("src"), &[]);
        assert_eq!(at_root, in_src, "root and src/ disagree");
        at_root
    }

    const EMBEDDED: &str =
        "other: `sub` is a submodule with its own repository, a `.git` directory: git recurses into it";

    #[test]
    fn gitlinks_to_embedded_repositories_are_not_own() {
        for version in ["2", "3", "4"] {
            let base = scratch(&format!("gitlinks-v{version}"));
            let root = base.join("proj");
            repo(&root, &[]);
            fs::create_dir_all(root.join("src")).unwrap();
            let oracle = DiskRepos::new(&root);
            git(&root, &["update-index", "--index-version", version]);
            assert_eq!(
                both(&oracle, &root),
                "own",
                "v{version}: a clean repository"
            );
            // Many entries, so that v4's prefix compression is exercised.
            for n in 0..40 {
                fs::write(root.join(format!("src/file-{n:02}.rs")), "\n").unwrap();
            }
            git(&root, &["add", "src"]);
            // What `git add` of a nested repository records: a gitlink
            // whose directory keeps its own `.git` directory.
            repo(&root.join("sub"), &[]);
            git(&root, &["add", "sub"]);
            if version == "3" {
                // An intent-to-add entry has extended flags.
                fs::write(root.join("src/zz-later.rs"), "\n").unwrap();
                git(&root, &["add", "-N", "src/zz-later.rs"]);
            }
            git(&root, &["update-index", "--index-version", version]);
            let data = fs::read(root.join(".git/index")).unwrap();
            assert_eq!(be32(&data, 4), Some(version.parse().unwrap()));
            assert_eq!(both(&oracle, &root), EMBEDDED, "v{version}");
            assert!(answer(&oracle, &root, &["src"]).starts_with("other: `sub` is a submodule"));
            // Not populated: git does not go in.
            fs::rename(root.join("sub"), base.join("away")).unwrap();
            assert_eq!(both(&oracle, &root), "own", "v{version}: not populated");
            fs::create_dir(root.join("sub")).unwrap();
            assert_eq!(
                both(&oracle, &root),
                "own",
                "v{version}: an empty directory"
            );
            fs::remove_dir(root.join("sub")).unwrap();
            fs::rename(base.join("away"), root.join("sub")).unwrap();
            assert_eq!(both(&oracle, &root), EMBEDDED);
            // A `gitdir:` file pointing at a repository of the project's
            // files is the same.
            fs::rename(root.join("sub/.git"), root.join("elsewhere.git")).unwrap();
            fs::write(root.join("sub/.git"), "gitdir: ../elsewhere.git\n").unwrap();
            assert!(
                both(&oracle, &root).contains(
                    ", `elsewhere.git`, outside the project's `.git/modules`: git recurses into it"
                ),
                "v{version}"
            );
            // The index changes: the remembered reading is not used.
            git(&root, &["rm", "-q", "--cached", "sub"]);
            assert_eq!(both(&oracle, &root), "own", "v{version}: gitlink removed");
            let _ = fs::remove_dir_all(&base);
        }
    }

    #[test]
    fn normal_submodules_are_own_and_looked_into() {
        let base = scratch("submodules");
        let upstream = base.join("upstream");
        repo(&upstream, &[]);
        let root = base.join("proj");
        repo(&root, &[]);
        fs::create_dir_all(root.join("src")).unwrap();
        let url = upstream.display().to_string();
        git(
            &root,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                &url,
                "lib/up",
            ],
        );
        git(&root, &["commit", "-q", "-m", "sub"]);
        let oracle = DiskRepos::new(&root);
        assert_eq!(both(&oracle, &root), "own");
        git(&root, &["update-index", "--index-version", "4"]);
        assert_eq!(both(&oracle, &root), "own");
        // git inside the submodule uses its repository in `.git/modules/`.
        assert_eq!(answer(&oracle, &root.join("lib/up"), &[]), "own");
        assert_eq!(answer(&oracle, &root, &["lib", "up"]), "own");
        // A `gitdir:` file pointing elsewhere in the project is not.
        fs::create_dir_all(root.join("lib/other")).unwrap();
        fs::write(root.join("lib/other/.git"), "gitdir: ../../.git/modules\n").unwrap();
        assert!(answer(&oracle, &root.join("lib/other"), &[])
            .starts_with("other: `lib/other` has its own `.git`"));
        fs::remove_dir_all(root.join("lib/other")).unwrap();
        // A linked worktree of the project as the project root: its
        // submodules live in `.git/worktrees/NAME/modules/`.
        let wt = base.join("wt");
        git(&root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
        git(
            &wt,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "update",
                "--init",
                "-q",
            ],
        );
        assert!(fs::read_to_string(wt.join("lib/up/.git"))
            .unwrap()
            .contains("/worktrees/wt/modules/"));
        fs::create_dir_all(wt.join("src")).unwrap();
        let in_wt = DiskRepos::new(&wt);
        assert_eq!(both(&in_wt, &wt), "own");
        repo(&wt.join("sub"), &[]);
        git(&wt, &["add", "sub"]);
        assert_eq!(both(&in_wt, &wt), EMBEDDED);
        // A nested repository added inside the submodule: `git status` in
        // the project recurses into `lib/up`, which recurses into it.
        repo(&root.join("lib/up/inner"), &[]);
        git(&root.join("lib/up"), &["add", "inner"]);
        assert!(answer(&oracle, &root.join("lib/up"), &[])
            .starts_with("other: `lib/up/inner` is a submodule"));
        assert_eq!(
            both(&oracle, &root),
            "other: `lib/up/inner` is a submodule with its own repository, a `.git` directory: git recurses into it"
        );
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn indexes_that_cannot_be_read_are_unknown() {
        let base = scratch("unreadable");
        let root = base.join("proj");
        repo(&root, &[]);
        fs::create_dir_all(root.join("src")).unwrap();
        let oracle = DiskRepos::new(&root);
        git(&root, &["update-index", "--split-index"]);
        assert!(both(&oracle, &root).starts_with("unknown: the index "));
        assert!(both(&oracle, &root).contains("split index"));
        git(&root, &["update-index", "--no-split-index"]);
        assert_eq!(both(&oracle, &root), "own");
        let index = root.join(".git/index");
        let good = fs::read(&index).unwrap();
        for (what, bytes) in [
            ("truncated", good[..good.len() - 3].to_vec()),
            ("garbage", b"DIRC\0\0\0\x02\0\0\0\x09garbage".to_vec()),
            ("version 5", [&b"DIRC\0\0\0\x05"[..], &good[8..]].concat()),
        ] {
            fs::write(&index, bytes).unwrap();
            assert!(
                both(&oracle, &root).starts_with("unknown: the index "),
                "{what}"
            );
        }
        fs::write(&index, &good).unwrap();
        assert_eq!(both(&oracle, &root), "own");
        // SHA-256 object names.
        let sha = base.join("sha256");
        repo(&sha, &["--object-format=sha256"]);
        fs::create_dir_all(sha.join("src")).unwrap();
        let oracle = DiskRepos::new(&sha);
        assert_eq!(both(&oracle, &sha), "own");
        repo(&sha.join("sub"), &["--object-format=sha256"]);
        git(&sha, &["add", "sub"]);
        assert_eq!(both(&oracle, &sha), EMBEDDED);
        let _ = fs::remove_dir_all(&base);
    }
}
