//! Shell analysis for toolgate (placeholder until the analysis lands): every
//! command is one simple command and none is read-only, so shell commands ask
//! in ask mode and are denied in plan mode. Conservative, never permissive.
#![deny(missing_docs)]

use std::path::PathBuf;

/// Settings that change how commands are judged.
#[derive(Debug, Clone)]
pub struct Options {
    /// The project root.
    pub project_root: PathBuf,
    /// The directory the command runs in.
    pub cwd: Option<PathBuf>,
    /// When false, git is never read-only.
    pub trust_git_config: bool,
    /// Extra read-only token prefixes.
    pub extra_read_only: Vec<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options { project_root: PathBuf::from("/"), cwd: None, trust_git_config: true, extra_read_only: Vec::new() }
    }
}

/// A shell command as the agent sent it.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// Shell source text.
    Text(&'a str),
    /// An argv vector.
    Argv(&'a [String]),
}

/// Why a command is not read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One human phrase.
    pub reason: String,
}

/// One simple command of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words joined by single spaces.
    pub text: String,
    /// Texts after wrapper removal.
    pub inner: Vec<String>,
    /// `Ok` when this command only reads.
    pub verdict: Result<(), Refusal>,
    /// What an `always` answer grants.
    pub always: String,
}

/// The analysis of a whole script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command.
    pub commands: Vec<SimpleCommand>,
    /// The first reason it is not read-only.
    pub refusal: Option<Refusal>,
}

impl Analysis {
    /// True when every part is proven read-only.
    pub fn is_read_only(&self) -> bool {
        self.refusal.is_none()
    }
}

/// Analyse a script (placeholder: nothing is read-only).
pub fn analyze(script: Script<'_>, _options: &Options) -> Analysis {
    let text = match script {
        Script::Text(text) => text.trim().to_string(),
        Script::Argv(argv) => argv.join(" "),
    };
    let refusal = Refusal { reason: "shell commands are not analysed yet, so none counts as read-only".to_string() };
    Analysis {
        commands: vec![SimpleCommand { text: text.clone(), inner: Vec::new(), verdict: Err(refusal.clone()), always: text }],
        refusal: Some(refusal),
    }
}

/// Check a `planModeReadOnlyCommands` entry.
pub fn validate_read_only_extra(entry: &str) -> Result<Vec<String>, String> {
    let tokens: Vec<String> = entry.split_whitespace().map(str::to_string).collect();
    if tokens.len() < 2 {
        return Err(format!("`{entry}` must name a program and at least one more word"));
    }
    Ok(tokens)
}
