//! Shell globs expanded on the disk, for the policy's
//! [`toolgate_policy::GlobOracle`]: a word like `src/*.rs` is judged by the
//! files it really matches (`src/a.rs`, `src/b.rs`) instead of by every
//! guarded file it could match (`src/x.env.rs` under the built-in
//! `*.env.*` guard).
//!
//! [`DiskGlobs`] expands the way bash and dash do when the command runs, made
//! larger wherever the user's shell options could make the shell find more:
//!
//! - each segment with `*`, `?` or `[...]` (`[!...]`, `[^...]`) is matched
//!   against the names in its directory; a literal segment is joined as is,
//!   and a match's last segment, when literal, must exist (`lstat`);
//! - a leading dot is matched like any other character (`shopt -s dotglob`
//!   may be set in a `.bashrc` a login shell reads), case either way
//!   (`nocaseglob`), a bracket with a range or a class as any character;
//! - a segment that is exactly `**` matches any number of directories
//!   (`globstar`) as well as one name, without entering a symbolic link to a
//!   directory (bash 4.3 and later, zsh and `find` without `-L` do not);
//! - `.` and `..` are never listed: the policy adds them for segments such as
//!   `.*` itself (old bash, dash).
//!
//! The answer is [`GlobExpansion::Unknown`] (the policy then keeps its
//! glob-vs-glob over-approximation) when a directory cannot be read for any
//! reason but its absence, a name is not UTF-8, more than
//! [`DiskGlobs::MAX_VISITED`] entries would be visited or
//! [`DiskGlobs::MAX_MATCHES`] paths matched, or the pattern holds syntax this
//! does not follow (quotes, backslashes, extglob groups, an unterminated
//! bracket).
//!
//! The disk is read when the call is judged. In plan mode nothing can create
//! a file between the decision and the run; in other modes a file created in
//! between (by another process) is not seen, as with the repository probe.
//! Symlinks are followed like the shell follows them; matches are judged by
//! their lexical path, like every other word.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use toolgate_policy::{
    has_glob_chars, unsupported_glob, GlobExpansion, GlobOracle, SegmentPattern,
};

/// Expands globs on the real disk; see the module documentation.
///
/// [`DiskGlobs::per_call`] also remembers which paths cross no symbolic link
/// (see the module `watched`), for as long as inotify reports no change in any
/// directory those answers looked in; the policy tells it when a call's
/// judgement begins ([`GlobOracle::begin_call`]), and the first question of
/// each call reads the changes reported since.
#[derive(Debug, Default, Clone, Copy)]
pub struct DiskGlobs {
    remember: bool,
}

impl DiskGlobs {
    /// The most directory entries one expansion reads.
    pub const MAX_VISITED: usize = 10_000;
    /// The most paths one expansion returns.
    pub const MAX_MATCHES: usize = 1_000;

    /// An oracle that asks the disk every time.
    pub fn new() -> DiskGlobs {
        DiskGlobs { remember: false }
    }

    /// An oracle that remembers link answers while inotify reports no
    /// change, for a caller that calls [`GlobOracle::begin_call`] before
    /// each judgement.
    pub fn per_call() -> DiskGlobs {
        DiskGlobs { remember: true }
    }
}

/// Too much, or not readable: the policy keeps its over-approximation.
struct Unknown;

#[cfg(target_os = "linux")]
mod watched;
#[cfg(target_os = "linux")]
pub use watched::{confirm, deferred, epoch};

/// See the Linux version: without inotify nothing is remembered.
#[cfg(not(target_os = "linux"))]
pub fn epoch() -> u64 {
    0
}

/// See the Linux version: without inotify nothing is remembered.
#[cfg(not(target_os = "linux"))]
pub fn deferred<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// See the Linux version: without inotify nothing is remembered.
#[cfg(not(target_os = "linux"))]
pub fn confirm() -> u64 {
    0
}

impl GlobOracle for DiskGlobs {
    fn expand(&self, pattern: &Path) -> GlobExpansion {
        match expand(pattern) {
            Ok(matches) => GlobExpansion::Matches(matches),
            Err(Unknown) => GlobExpansion::Unknown,
        }
    }

    fn begin_call(&self) {
        #[cfg(target_os = "linux")]
        if self.remember {
            watched::begin_call();
        }
    }

    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        #[cfg(target_os = "linux")]
        if self.remember && path.is_absolute() {
            return watched::resolve(path).ok();
        }
        resolve(Path::new("/"), path, &mut |_| {}).ok()
    }

    fn links_below(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        #[cfg(target_os = "linux")]
        if self.remember {
            return watched::links_below(dir).ok();
        }
        links_below(dir, &mut |_| {}).ok()
    }

    fn exists(&self, path: &Path) -> Option<bool> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => Some(true),
            Err(err) if absent(&err) => Some(false),
            Err(_) => None,
        }
    }

    fn leaves_through_link(&self, base: &Path, relative: &Path) -> bool {
        !no_link_below(base, relative, self.remember)
            && resolve(base, relative, &mut |_| {}).map_or(true, |real| real != base.join(relative))
    }

    fn resolve_below(&self, base: &Path, relative: &Path) -> Option<PathBuf> {
        if no_link_below(base, relative, self.remember) {
            // The kernel walked every existing component without meeting a
            // link: the path is what it says.
            return Some(base.join(relative));
        }
        resolve(base, relative, &mut |_| {}).ok()
    }
}

/// One `openat2(RESOLVE_NO_SYMLINKS)` from a descriptor of `base` (kept per
/// thread): true when the kernel walks `relative` without meeting a symbolic
/// link, up to its end or to the first component that does not exist. False
/// when it meets one, or cannot tell (an older kernel, `..`, an error): the
/// caller then walks component by component. With `remember`, a true answer
/// is kept while inotify reports no change in the directories it looked in
/// (see [`watched`]).
#[cfg(target_os = "linux")]
fn no_link_below(base: &Path, relative: &Path, remember: bool) -> bool {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;

    if relative.as_os_str().is_empty() || relative.is_absolute() {
        return false;
    }
    watched::with_base(base, remember, |dir, mut memory| {
        let Some(dir) = dir else {
            return false;
        };
        let key = relative.as_os_str().as_encoded_bytes();
        let mut keep = false;
        if let Some(memory) = memory.as_deref_mut() {
            if memory.knows(key) {
                return true;
            }
            keep = memory.watch_below(relative);
        }
        let opened = openat2(
            dir,
            relative,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
        );
        let clear = match opened {
            Ok(_) => true,
            Err(e) => e == Errno::NOENT || e == Errno::NOTDIR,
        };
        if let (true, true, Some(memory)) = (clear, keep, memory) {
            memory.remember(key);
        }
        clear
    })
}

#[cfg(not(target_os = "linux"))]
fn no_link_below(_base: &Path, _relative: &Path, _remember: bool) -> bool {
    false
}

/// Where the links met below `dir` lead, walking the tree as `grep -R`
/// does (links to directories entered, each real directory once): see
/// [`GlobOracle::links_below`]. Bounded by [`DiskGlobs::MAX_VISITED`]
/// entries and [`DiskGlobs::MAX_MATCHES`] links. `looking_in` is told each
/// directory before it is read or a name is looked up in it.
fn links_below(dir: &Path, looking_in: &mut dyn FnMut(&Path)) -> Result<Vec<PathBuf>, Unknown> {
    let start = resolve(Path::new("/"), dir, looking_in)?;
    let mut reached = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut pending = vec![start];
    let mut visited = 0usize;
    while let Some(dir) = pending.pop() {
        if !seen.insert(dir.clone()) {
            continue;
        }
        looking_in(&dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if absent(&err) => continue,
            Err(_) => return Err(Unknown),
        };
        for entry in entries {
            let entry = entry.map_err(|_| Unknown)?;
            visited += 1;
            if visited > DiskGlobs::MAX_VISITED {
                return Err(Unknown);
            }
            let kind = entry.file_type().map_err(|_| Unknown)?;
            if kind.is_symlink() {
                let real = resolve(Path::new("/"), &entry.path(), looking_in)?;
                if std::fs::symlink_metadata(&real).is_ok_and(|meta| meta.is_dir()) {
                    pending.push(real.clone());
                }
                reached.push(real);
                if reached.len() > DiskGlobs::MAX_MATCHES {
                    return Err(Unknown);
                }
            } else if kind.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(reached)
}

/// The most symbolic links followed in one resolution (Linux's limit).
const MAX_LINKS: usize = 40;

/// Resolve `path` as the kernel does (see [`GlobOracle::resolve`]): each
/// component in turn; a symbolic link's target replaces it (an absolute
/// target restarts at `/`), `..` goes up from where the walk physically is,
/// and once a component does not exist the rest is joined lexically.
/// `looking_in` is told each directory before a name is looked up in it.
fn resolve(
    base: &Path,
    path: &Path,
    looking_in: &mut dyn FnMut(&Path),
) -> Result<PathBuf, Unknown> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::path::Component;

    fn push_components(into: &mut VecDeque<OsString>, path: &Path, front: bool) {
        let parts: Vec<OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .collect();
        if front {
            for p in parts.into_iter().rev() {
                into.push_front(p);
            }
        } else {
            into.extend(parts);
        }
    }

    if !base.is_absolute() {
        return Err(Unknown);
    }
    let mut pending = VecDeque::new();
    push_components(&mut pending, path, false);
    let mut out = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    let mut links = 0usize;
    let mut exists = true;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&part);
        if !exists {
            out = next;
            continue;
        }
        looking_in(&out);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Unknown);
                }
                let target = std::fs::read_link(&next).map_err(|_| Unknown)?;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_components(&mut pending, &target, true);
            }
            Ok(_) => out = next,
            Err(err) if absent(&err) => {
                exists = false;
                out = next;
            }
            Err(_) => return Err(Unknown),
        }
    }
    Ok(out)
}

fn expand(pattern: &Path) -> Result<Vec<PathBuf>, Unknown> {
    let text = pattern.to_str().ok_or(Unknown)?;
    if !text.starts_with('/') || unsupported_glob(text) {
        return Err(Unknown);
    }
    let segments: Vec<&str> = text.split('/').filter(|s| !s.is_empty()).collect();
    let mut visited = 0usize;
    let mut current = vec![PathBuf::from("/")];
    for (index, segment) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        let mut next = Vec::new();
        if !has_glob_chars(segment) {
            for dir in current {
                let path = dir.join(segment);
                if last {
                    match std::fs::symlink_metadata(&path) {
                        Ok(_) => next.push(path),
                        Err(err) if absent(&err) => {}
                        Err(_) => return Err(Unknown),
                    }
                } else {
                    next.push(path);
                }
            }
        } else {
            let recursive = *segment == "**";
            for dir in current {
                if recursive {
                    // `globstar`: this directory and every name below it.
                    next.push(dir.clone());
                    walk(&dir, !last, &mut visited, &mut next)?;
                } else {
                    let pattern = SegmentPattern::new(segment).ok_or(Unknown)?;
                    list(&dir, &mut visited, |name| {
                        if pattern.matches(name) {
                            next.push(dir.join(name));
                        }
                    })?;
                }
                if next.len() > DiskGlobs::MAX_MATCHES {
                    return Err(Unknown);
                }
            }
        }
        current = next;
    }
    // By bytes: comparing paths by components is several times slower.
    current.sort_unstable_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    current.dedup_by(|a, b| a.as_os_str() == b.as_os_str());
    Ok(current)
}

/// Absent: the shell finds nothing there.
fn absent(err: &std::io::Error) -> bool {
    matches!(err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// Calls `each` with the name of every entry of `dir` (nothing when `dir` is
/// absent or not a directory).
fn list(dir: &Path, visited: &mut usize, mut each: impl FnMut(&str)) -> Result<(), Unknown> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if absent(&err) => return Ok(()),
        Err(_) => return Err(Unknown),
    };
    for entry in entries {
        let entry = entry.map_err(|_| Unknown)?;
        *visited += 1;
        if *visited > DiskGlobs::MAX_VISITED {
            return Err(Unknown);
        }
        let name = entry.file_name();
        each(name.to_str().ok_or(Unknown)?);
    }
    Ok(())
}

/// Every path below `dir` (directories followed through symlinks, bounded by
/// the visit budget, which also ends symlink loops).
/// Every name below `dir` (only directories when `dirs_only`: a `**` that
/// more segments follow). A symbolic link to a directory is listed but not
/// entered, as bash (4.3 and later) and zsh walk `**`, and as `find` does
/// without `-L`.
fn walk(
    dir: &Path,
    dirs_only: bool,
    visited: &mut usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), Unknown> {
    let mut below = Vec::new();
    list(dir, visited, |name| below.push(dir.join(name)))?;
    for path in below {
        let meta = std::fs::symlink_metadata(&path);
        let is_dir = meta.as_ref().is_ok_and(|meta| meta.is_dir());
        let is_link_to_dir = meta.is_ok_and(|meta| meta.file_type().is_symlink())
            && std::fs::metadata(&path).is_ok_and(|meta| meta.is_dir());
        if !dirs_only || is_dir || is_link_to_dir {
            out.push(path.clone());
        }
        if out.len() > DiskGlobs::MAX_MATCHES {
            return Err(Unknown);
        }
        if is_dir {
            walk(&path, dirs_only, visited, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("toolgate-globs-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree(name: &str) -> Scratch {
        let dir = Scratch::new(name);
        let root = dir.path();
        for file in [
            "src/a.rs",
            "src/b.rs",
            "src/x.env.rs",
            "src/sub/c.rs",
            "src/sub/deep/d.rs",
            ".env",
            ".envrc",
            "README.md",
            "crates/one/Cargo.toml",
            "crates/two/Cargo.toml",
            "crates/three/src/lib.rs",
            "lit*eral",
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        std::fs::create_dir_all(root.join(".hidden")).unwrap();
        std::fs::write(root.join(".hidden/k.rs"), "x").unwrap();
        dir
    }

    fn check(root: &Path, pattern: &str, expected: Option<&[&str]>) {
        let got = DiskGlobs::new().expand(&root.join(pattern));
        let expected = match expected {
            Some(names) => {
                let mut paths: Vec<PathBuf> = names.iter().map(|n| root.join(n)).collect();
                paths.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
                GlobExpansion::Matches(paths)
            }
            None => GlobExpansion::Unknown,
        };
        assert_eq!(got, expected, "{pattern}");
    }

    #[test]
    fn expansions() {
        let dir = tree("expansions");
        let root = dir.path();
        let table: &[(&str, Option<&[&str]>)] = &[
            ("src/*.rs", Some(&["src/a.rs", "src/b.rs", "src/x.env.rs"])),
            ("src/[ab].rs", Some(&["src/a.rs", "src/b.rs"])),
            ("src/[!ab].rs", Some(&[])),
            ("src/[^a].rs", Some(&["src/b.rs"])),
            ("src/?.rs", Some(&["src/a.rs", "src/b.rs"])),
            (
                "crates/*/Cargo.toml",
                Some(&["crates/one/Cargo.toml", "crates/two/Cargo.toml"]),
            ),
            // dotglob is over-approximated: `*` and `?` also reach dotfiles.
            (".en?", Some(&[".env"])),
            (".env*", Some(&[".env", ".envrc"])),
            ("*env", Some(&[".env"])),
            ("*/k.rs", Some(&[".hidden/k.rs"])),
            // nocaseglob is over-approximated.
            ("READ*.MD", Some(&["README.md"])),
            // globstar is over-approximated: `**` also descends.
            (
                "src/**/*.rs",
                Some(&[
                    "src/a.rs",
                    "src/b.rs",
                    "src/x.env.rs",
                    "src/sub/c.rs",
                    "src/sub/deep/d.rs",
                ]),
            ),
            (
                "src/sub/**",
                Some(&[
                    "src/sub",
                    "src/sub/c.rs",
                    "src/sub/deep",
                    "src/sub/deep/d.rs",
                ]),
            ),
            // Nothing matches: the shell passes the word as written.
            ("src/*.py", Some(&[])),
            ("missing/*.rs", Some(&[])),
            ("src/a.rs/*", Some(&[])),
            ("lit[*]eral", Some(&["lit*eral"])),
            // Syntax not followed: unknown.
            ("src/[ab.rs", None),
            ("src/@(a).rs", None),
            ("src/\\*.rs", None),
            ("'src'/*.rs", None),
        ];
        for (pattern, expected) in table {
            check(root, pattern, *expected);
        }
    }

    #[test]
    fn unreadable_directory_is_unknown() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tree("unreadable");
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("k.rs"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        // root reads every directory anyway: nothing to check then.
        let readable = std::fs::read_dir(&locked).is_ok();
        if !readable {
            check(dir.path(), "locked/*.rs", None);
            check(dir.path(), "*/*.rs", None);
        }
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
        check(dir.path(), "locked/*.rs", Some(&["locked/k.rs"]));
        // Unreadable even for root: a symlink to itself (ELOOP).
        std::os::unix::fs::symlink("selfloop", dir.path().join("selfloop")).unwrap();
        check(dir.path(), "selfloop/*.rs", None);
        check(dir.path(), "*/*.rs", None);
        check(dir.path(), "selfloop/k.rs/*", None);
    }

    #[test]
    fn too_many_entries_is_unknown() {
        let dir = Scratch::new("many");
        let many = dir.path().join("many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..=DiskGlobs::MAX_VISITED {
            std::fs::write(many.join(format!("f{i}")), "").unwrap();
        }
        check(dir.path(), "many/*.rs", None);
        // A literal path into it lists nothing.
        check(dir.path(), "many/f7", Some(&["many/f7"]));
        // Too many matches, under the visit budget.
        let some = dir.path().join("some");
        std::fs::create_dir(&some).unwrap();
        for i in 0..=DiskGlobs::MAX_MATCHES {
            std::fs::write(some.join(format!("f{i}")), "").unwrap();
        }
        check(dir.path(), "some/f*", None);
        check(dir.path(), "some/f1000?", Some(&[]));
    }

    /// Remembered link answers are dropped when a directory they looked in
    /// changes, reported at the next call's first question.
    #[cfg(target_os = "linux")]
    #[test]
    fn remembered_answers_see_changes() {
        use std::os::unix::fs::symlink;
        let dir = tree("remembered");
        let root = dir.path().canonicalize().unwrap();
        let oracle = DiskGlobs::per_call();
        let plain = Path::new("src/sub/deep/d.rs");
        for _ in 0..2 {
            oracle.begin_call();
            assert!(!oracle.leaves_through_link(&root, plain));
            assert!(!oracle.leaves_through_link(&root, Path::new("new/x")));
        }
        // A file replaced by a link, deep down.
        std::fs::remove_file(root.join(plain)).unwrap();
        symlink("../../../.env", root.join(plain)).unwrap();
        oracle.begin_call();
        assert!(oracle.leaves_through_link(&root, plain));
        std::fs::remove_file(root.join(plain)).unwrap();
        std::fs::write(root.join(plain), "x").unwrap();
        oracle.begin_call();
        assert!(!oracle.leaves_through_link(&root, plain));
        // A directory moved away and replaced by a link: the watches below
        // it named another directory, they are made again.
        std::fs::rename(root.join("src/sub"), root.join("old")).unwrap();
        symlink("/etc", root.join("src/sub")).unwrap();
        oracle.begin_call();
        assert_eq!(
            oracle.resolve_below(&root, Path::new("src/sub/deep/d.rs")),
            Some(PathBuf::from("/etc/deep/d.rs"))
        );
        std::fs::remove_file(root.join("src/sub")).unwrap();
        std::fs::rename(root.join("old"), root.join("src/sub")).unwrap();
        oracle.begin_call();
        assert!(!oracle.leaves_through_link(&root, plain));
        std::fs::remove_file(root.join(plain)).unwrap();
        symlink("/etc/passwd", root.join(plain)).unwrap();
        oracle.begin_call();
        assert!(oracle.leaves_through_link(&root, plain));
        // A name that did not exist, created as a link.
        symlink(".env", root.join("new")).unwrap();
        oracle.begin_call();
        assert!(oracle.leaves_through_link(&root, Path::new("new/x")));
        // Absolute paths.
        let outside = root.join("out/x");
        oracle.begin_call();
        assert_eq!(oracle.resolve(&outside), Some(outside.clone()));
        oracle.begin_call();
        assert_eq!(oracle.resolve(&outside), Some(outside.clone()));
        symlink("/etc", root.join("out")).unwrap();
        oracle.begin_call();
        assert_eq!(oracle.resolve(&outside), Some(PathBuf::from("/etc/x")));
    }

    /// Deferred judgements do not look at the queue; the confirmation
    /// that follows them sees a change made meanwhile.
    #[cfg(target_os = "linux")]
    #[test]
    fn deferred_answers_are_confirmed() {
        use std::os::unix::fs::symlink;
        let dir = tree("deferred");
        let root = dir.path().canonicalize().unwrap();
        let oracle = DiskGlobs::per_call();
        let plain = Path::new("src/a.rs");
        oracle.begin_call();
        assert!(!oracle.leaves_through_link(&root, plain));
        let before = confirm();
        std::fs::remove_file(root.join(plain)).unwrap();
        symlink("../.env", root.join(plain)).unwrap();
        // Whatever a deferred question answers, the confirmation tells.
        let _ = deferred(|| {
            oracle.begin_call();
            oracle.leaves_through_link(&root, plain)
        });
        assert_ne!(confirm(), before);
        // Judged again, the link is seen.
        let again = epoch();
        let leaves = deferred(|| {
            oracle.begin_call();
            oracle.leaves_through_link(&root, plain)
        });
        if confirm() == again {
            assert!(leaves);
        }
    }

    #[test]
    fn symlink_loops_end() {
        let dir = Scratch::new("loop");
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("d/up")).unwrap();
        // `**` lists the link but does not enter it: the walk ends.
        check(dir.path(), "d/**/x", Some(&[]));
        std::fs::write(dir.path().join("d/x"), "x").unwrap();
        check(dir.path(), "d/**/x", Some(&["d/x"]));
    }
}
