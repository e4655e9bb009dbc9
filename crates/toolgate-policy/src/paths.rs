//! Lexical path handling: no file system access, ever.

use std::path::{Component, Path, PathBuf};

/// A relative path with no `.`, `..` or empty segment (so not empty
/// either): relative to the project root, it is its own subject.
pub(crate) fn is_plain(path: &str) -> bool {
    // By bytes: asked for every word of every command.
    !path.starts_with(['/', '~'])
        && path
            .as_bytes()
            .split(|&b| b == b'/')
            .all(|segment| !matches!(segment, b"" | b"." | b".."))
}

/// Resolve `path` against `base` and remove `.`, `..` and repeated `/`
/// without touching the file system. `~` and `~/...` expand to `home` when known.
pub fn normalize(path: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    let expanded: PathBuf = match (path, home) {
        ("~", Some(home)) => home.to_path_buf(),
        (path, Some(home)) if path.starts_with("~/") => home.join(&path[2..]),
        (path, _) => PathBuf::from(path),
    };
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        base.join(expanded)
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::Prefix(prefix) => out.push(prefix.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                // `..` at the root stays at the root, as the kernel does.
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    if out.as_os_str().is_empty() {
        out.push("/");
    }
    out
}

/// A path as rules see it: relative to the project root when inside it,
/// absolute (and external) when it leaves the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootedPath {
    /// The normalised absolute path.
    pub absolute: PathBuf,
    /// What patterns match: `src/main.rs`, `.` for the root itself, or the
    /// absolute path for an external one.
    pub subject: String,
    /// True when the path is outside the project root.
    pub external: bool,
}

impl RootedPath {
    /// Resolve `path` (relative to `base`) and place it relative to `root`.
    /// A plain relative path under the root (no `.`, `..`, `~` or empty
    /// segments) skips the component walk.
    pub fn resolve(path: &str, base: &Path, root: &Path, home: Option<&Path>) -> RootedPath {
        let plain = base == root && is_plain(path);
        if plain {
            return RootedPath {
                absolute: root.join(path),
                subject: path.to_string(),
                external: false,
            };
        }
        RootedPath::new(normalize(path, base, home), root)
    }

    /// Place an already normalised absolute path relative to `root`.
    pub fn new(absolute: PathBuf, root: &Path) -> RootedPath {
        match absolute.strip_prefix(root) {
            Ok(relative) => {
                let subject = if relative.as_os_str().is_empty() {
                    ".".to_string()
                } else {
                    relative.to_string_lossy().into_owned()
                };
                RootedPath {
                    absolute,
                    subject,
                    external: false,
                }
            }
            Err(_) => RootedPath {
                subject: absolute.to_string_lossy().into_owned(),
                absolute,
                external: true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &str, expected_subject: &str, expected_external: bool) {
        let root = Path::new("/work/project");
        let home = Path::new("/home/me");
        let rooted = RootedPath::resolve(path, root, root, Some(home));
        // The fast path and the component walk agree.
        assert_eq!(
            rooted,
            RootedPath::new(normalize(path, root, Some(home)), root),
            "{path}"
        );
        assert_eq!(
            (rooted.subject.as_str(), rooted.external),
            (expected_subject, expected_external),
            "{path}"
        );
    }

    #[test]
    fn lexical_normalisation() {
        let cases: &[(&str, &str, bool)] = &[
            ("src/main.rs", "src/main.rs", false),
            ("./src//main.rs", "src/main.rs", false),
            ("src/../README.md", "README.md", false),
            ("/work/project/a/b", "a/b", false),
            ("/work/project", ".", false),
            (".", ".", false),
            ("../outside/secret.txt", "/work/outside/secret.txt", true),
            ("/etc/passwd", "/etc/passwd", true),
            ("/work/project/../project2/x", "/work/project2/x", true),
            ("/work/projectx/y", "/work/projectx/y", true),
            ("../../../../../../etc/shadow", "/etc/shadow", true),
            ("~/.ssh/id_rsa", "/home/me/.ssh/id_rsa", true),
            ("src/./a/../../..", "/work", true),
            ("src/lib.rs/", "src/lib.rs", false),
            ("a b/c", "a b/c", false),
        ];
        for (path, subject, external) in cases {
            check(path, subject, *external);
        }
    }
}
