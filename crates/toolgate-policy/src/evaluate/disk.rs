//! What the disk says about the paths of a call: where symbolic links lead
//! (tool paths, shell words),
//! what a glob matches, whether a name a consumer reads may split or become
//! an option, and the files a command's verdict rests on. The rest of the
//! judgement is lexical ([`super`]); these methods are the ones that ask the
//! [`crate::GlobOracle`].

use std::path::{Path, PathBuf};

use crate::paths::{normalize, RootedPath};
use crate::shell_words::Marks;
use crate::Policy;

impl Policy {
    /// The paths a word's readings name, each with whether it is still a
    /// glob: with a [`crate::GlobOracle`], a glob reading becomes the real
    /// files it matches on the disk (literal paths), or its own literal text
    /// when it matches none (the shell passes the word as written); when the
    /// oracle cannot tell, or without one, it stays a glob, judged by every
    /// guarded file it could match. Only when `disk_settled`: no command of
    /// the script can create or rename a file before the glob is expanded.
    pub(super) fn expand_globs(
        &self,
        path: PathBuf,
        glob: bool,
        disk_settled: bool,
    ) -> Vec<(PathBuf, bool)> {
        let oracle = match &self.glob_oracle {
            Some(oracle) if glob && disk_settled => oracle,
            _ => return vec![(path, glob)],
        };
        if !crate::has_glob_chars(&path.to_string_lossy()) {
            // A reading whose only glob was a `.*` taken as `.` or `..`.
            return vec![(path, false)];
        }
        match oracle.expand(&path) {
            crate::GlobExpansion::Matches(matches) if matches.is_empty() => vec![(path, false)],
            // The oracle's paths are judged lexically, like every word.
            crate::GlobExpansion::Matches(matches) => matches
                .into_iter()
                .map(|found| {
                    (
                        crate::normalize(&found.to_string_lossy(), &path, None),
                        false,
                    )
                })
                .collect(),
            crate::GlobExpansion::Unknown => vec![(path, true)],
        }
    }

    /// Where `path` (as written, relative to `base`) leads once symbolic
    /// links are followed on the disk, placed against the project root, when
    /// that is not where its lexical form `rooted` points; `None` without a
    /// disk oracle. The disk is read when the call is judged: a link made or
    /// changed between the decision and the run is not seen (in plan mode
    /// nothing the agent runs can make one).
    pub(super) fn linked_path(
        &self,
        path: &str,
        base: &Path,
        rooted: &RootedPath,
    ) -> Option<RootedPath> {
        let oracle = self.glob_oracle.as_ref()?;
        if let Some(root_real) = &self.physical_root {
            if base == self.project_root
                && crate::paths::is_plain(path)
                && !oracle.leaves_through_link(root_real, Path::new(path))
            {
                return None;
            }
        }
        let raw = match (path, self.home.as_deref()) {
            ("~", Some(home)) => home.to_path_buf(),
            (p, Some(home)) if p.starts_with("~/") => home.join(&p[2..]),
            (p, _) => base.join(p),
        };
        self.linked(oracle.as_ref(), &raw, rooted)
    }

    /// Does `text` (a plain word, relative to `base` or absolute) lead
    /// somewhere else once links are followed?
    pub(super) fn crosses_link(&self, text: &str, base: &Path) -> bool {
        // The usual word: plain, relative, from the project root.
        if let (Some(oracle), Some(root_real)) = (&self.glob_oracle, &self.physical_root) {
            if base == self.project_root && crate::paths::is_plain(text) {
                return oracle.leaves_through_link(root_real, Path::new(text));
            }
        }
        let lexical = RootedPath::new(
            normalize(text, base, self.home.as_deref()),
            &self.project_root,
        );
        self.linked_path(text, base, &lexical).is_some()
    }

    pub(super) fn linked(
        &self,
        oracle: &dyn crate::GlobOracle,
        raw: &Path,
        rooted: &RootedPath,
    ) -> Option<RootedPath> {
        let root_real = self.physical_root.as_deref().unwrap_or(&self.project_root);
        // Below the project root (and not climbing out of it), only the
        // components under the root need the disk: the root's own are known.
        let below = raw.strip_prefix(&self.project_root).ok().filter(|rest| {
            !rest
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        });
        let real = match below {
            Some(rest) if self.physical_root.is_some() => {
                let Some(real) = oracle.resolve_below(root_real, rest) else {
                    return Some(unresolved(raw));
                };
                // The usual answer: no link, the path is itself.
                if real.strip_prefix(root_real).is_ok_and(|r| r == rest) {
                    return None;
                }
                real
            }
            _ => match oracle.resolve(raw) {
                // No link, and nothing to normalize (a resolved path has no
                // `.` or `..`): the path is where its lexical form points.
                Some(real) if real == raw => return None,
                Some(real) => real,
                None => return Some(unresolved(raw)),
            },
        };
        let placed = match real.strip_prefix(root_real) {
            Ok(relative) => RootedPath::new(
                normalize(&relative.to_string_lossy(), &self.project_root, None),
                &self.project_root,
            ),
            Err(_) => RootedPath::new(real, &self.project_root),
        };
        // Outside the project either way: the lexical path already asks,
        // and a link between two outside places reaches no project file.
        let both_outside = rooted.external && placed.external;
        (placed.absolute != rooted.absolute && !both_outside).then_some(placed)
    }

    /// The first disk fact a read-only verdict rests on that does not hold
    /// (or cannot be told: no disk oracle, a `cd` in the script), as the
    /// refusal to give.
    pub(super) fn unmet_requirement(
        &self,
        requires: &[toolgate_shell::Requirement],
        base: &Path,
        moves: bool,
    ) -> Option<String> {
        for requirement in requires {
            let toolgate_shell::Requirement::AbsentUpward { name, why } = requirement else {
                return Some("a condition on the disk that toolgate cannot check".to_string());
            };
            let Some(oracle) = self.glob_oracle.as_ref().filter(|_| !moves) else {
                return Some(format!(
                    "a `{name}` in the working directory or above it {why}, and the disk cannot be checked here"
                ));
            };
            for dir in base.ancestors() {
                let path = dir.join(name);
                match oracle.exists(&path) {
                    Some(false) => {}
                    Some(true) => return Some(format!("`{}` {why}", path.display())),
                    None => {
                        return Some(format!(
                            "whether `{}` exists cannot be told, and such a file {why}",
                            path.display()
                        ))
                    }
                }
            }
        }
        None
    }

    /// Could a consumer split one of the names matching `glob` (printed by
    /// `find`, `git ls-files`) into other words? Only the disk can say: when
    /// some match's path (from `base`) has a blank, quote, backslash or glob
    /// character, or the disk cannot be read, or the script may change it
    /// first.
    pub(super) fn names_may_split(
        &self,
        glob: &str,
        base: &Path,
        changes_directory: bool,
        disk_settled: bool,
    ) -> bool {
        let oracle = match &self.glob_oracle {
            Some(oracle) if !changes_directory && disk_settled => oracle,
            _ => return true,
        };
        let odd = |path: &Path| {
            let rel = path.strip_prefix(base).unwrap_or(path);
            rel.to_string_lossy().contains([
                ' ', '\t', '\n', '\'', '"', '\\', '*', '?', '[', ']', '{', '}', '$', '`',
            ])
        };
        if !crate::has_glob_chars(glob) {
            return odd(Path::new(glob));
        }
        match oracle.expand(&base.join(glob)) {
            crate::GlobExpansion::Matches(found) => found.iter().any(|p| odd(p)),
            crate::GlobExpansion::Unknown => true,
        }
    }

    /// Can `word` (a glob or expansion where a program reads options) become
    /// a word starting with `-` or `@`? Only a glob in the directory the
    /// command starts in, whose matches the disk shows, can be told apart;
    /// an expansion, or a glob without the disk, may become anything.
    pub(super) fn may_become_options(
        &self,
        word: &str,
        base: &Path,
        changes_directory: bool,
        disk_settled: bool,
    ) -> bool {
        let marks = Marks::guessed(word);
        let oracle = match &self.glob_oracle {
            Some(oracle)
                if marks.glob && !marks.expansion && !changes_directory && disk_settled =>
            {
                oracle
            }
            _ => return true,
        };
        if word.starts_with(['-', '@']) {
            return true;
        }
        match oracle.expand(&base.join(word)) {
            // What the program sees starts as the match's path from `base`.
            crate::GlobExpansion::Matches(found) => found.iter().any(|path| {
                path.strip_prefix(base)
                    .map(|rel| rel.to_string_lossy().starts_with(['-', '@']))
                    .unwrap_or(true)
            }),
            crate::GlobExpansion::Unknown => true,
        }
    }
}

/// A path whose links could not be followed (a loop, a directory that
/// cannot be searched): it may lead anywhere, so it is judged as a place
/// outside the project.
fn unresolved(raw: &Path) -> RootedPath {
    RootedPath {
        absolute: raw.to_path_buf(),
        subject: raw.to_string_lossy().into_owned(),
        external: true,
    }
}
