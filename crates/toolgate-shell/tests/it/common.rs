//! Loading the labelled corpus (shared by the test areas `corpus` and
//! `shells`, the benchmark `benches/classify.rs` and toolgate-policy's
//! `plan_corpus`, which include this file by path).
#![allow(dead_code)] // each of the binaries that include it uses part of this

/// The corpus files: `corpus.tsv` (the first wave) and one file per area of
/// the plan-mode attack review (issue 8), so each area's spellings live together.
pub const FILES: &[(&str, &str)] = &[
    ("corpus.tsv", include_str!("../corpus.tsv")),
    ("corpus/syntax.tsv", include_str!("../corpus/syntax.tsv")),
    (
        "corpus/programs.tsv",
        include_str!("../corpus/programs.tsv"),
    ),
    ("corpus/git.tsv", include_str!("../corpus/git.tsv")),
    (
        "corpus/gitlinks.tsv",
        include_str!("../corpus/gitlinks.tsv"),
    ),
    ("corpus/oracle.tsv", include_str!("../corpus/oracle.tsv")),
];

/// One line of a corpus file.
pub struct Case {
    /// The file it came from (one of [`FILES`]).
    pub file: &'static str,
    pub line: usize,
    pub label: String,
    pub source: String,
    pub reason: String,
    pub command: String,
}

/// Every case of every corpus file, with `⏎`, `⇥`, `␍` and `␀` turned back into characters.
pub fn corpus() -> Vec<Case> {
    FILES
        .iter()
        .flat_map(|(file, text)| parse(file, text))
        .collect()
}

fn parse(file: &'static str, text: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.splitn(4, '\t').collect();
        assert_eq!(
            cols.len(),
            4,
            "{file}:{}: expected 4 tab-separated columns",
            i + 1
        );
        assert!(
            matches!(cols[0], "ro" | "no" | "ro-refused"),
            "{file}:{}: bad label {:?}",
            i + 1,
            cols[0]
        );
        assert!(
            matches!(
                cols[1],
                "codex"
                    | "opencode"
                    | "claude-code"
                    | "gemini-cli"
                    | "qwen-code"
                    | "reasonix"
                    | "own"
            ),
            "{file}:{}: bad source {:?}",
            i + 1,
            cols[1]
        );
        out.push(Case {
            file,
            line: i + 1,
            label: cols[0].to_string(),
            source: cols[1].to_string(),
            reason: cols[2].to_string(),
            command: cols[3]
                .replace('⏎', "\n")
                .replace('⇥', "\t")
                .replace('␍', "\r")
                .replace('␀', "\0"),
        });
    }
    out
}

/// The options the corpus is labelled for: project `/work/proj` with the
/// repository layout of [`FakeRepos`].
pub fn options() -> toolgate_shell::Options {
    toolgate_shell::Options {
        project_root: "/work/proj".into(),
        repo_oracle: Some(std::sync::Arc::new(FakeRepos)),
        ..toolgate_shell::Options::default()
    }
}

/// A made-up disk for the corpus, judged lexically (the real oracle, in the
/// binary, follows symlinks): inside `/work/proj` every directory uses the
/// project's own repository, except a directory named `*.git` (a bare
/// repository committed as files) or `nested` (a directory with its own
/// `.git`) and everything below them; `missing` does not exist.
#[derive(Debug)]
pub struct FakeRepos;

impl toolgate_shell::RepoOracle for FakeRepos {
    fn repository(&self, query: &toolgate_shell::RepoQuery) -> toolgate_shell::RepoFact {
        use std::path::{Component, Path, PathBuf};
        use toolgate_shell::RepoFact;
        let mut dir = query.dir.clone();
        for c in &query.chdirs {
            dir = dir.join(c);
        }
        let mut norm = PathBuf::new();
        for c in dir.components() {
            match c {
                Component::ParentDir => {
                    norm.pop();
                }
                Component::CurDir => {}
                other => norm.push(other),
            }
        }
        if !norm.starts_with("/work/proj") {
            return RepoFact::Other(format!("`{}` is outside the project", norm.display()));
        }
        for c in norm.components() {
            let name = c.as_os_str().to_string_lossy();
            if name.ends_with(".git") && Path::new(&*name) != Path::new("/work/proj") {
                return RepoFact::Other(format!("`{name}` is a bare repository"));
            }
            if name == "nested" {
                return RepoFact::Other("`nested/.git`".to_string());
            }
            if name == "missing" {
                return RepoFact::Unknown(format!("`{}` does not exist", norm.display()));
            }
        }
        RepoFact::Own
    }
}

/// The shell commands of the benchmark corpus
/// (`crates/toolgate/examples/corpus-commands.txt`), of the given kinds
/// (`reads`, `changes`, `asks`): measured by the benchmark, and checked by
/// the tests like the corpus.
pub fn bench_commands(kinds: &[&str]) -> Vec<&'static str> {
    include_str!("../../../toolgate/examples/corpus-commands.txt")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('\t'))
        .filter(|(kind, _)| kinds.contains(kind))
        .map(|(_, command)| command)
        .collect()
}
