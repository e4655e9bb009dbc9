//! Turning command-line flags, the environment and the policy file into a
//! [`Policy`]. This is the only place that reads configuration from disk
//! (and where the policy gets [`DiskRepos`], which reads the disk to tell
//! which repository a git command would use). [`find_policy_file`] is the
//! one place that decides which policy file is in force (`--policy`, else
//! `toolgate.json` in `--project-root`, else the nearest `toolgate.json` from
//! the working directory up to the repository root); [`load`] reads it as a
//! toolgate policy or an OpenCode config and says which layers are in force.
//! What cannot be used is a [`ConfigError`], whose kind says where it is
//! (the policy file, a flag, the environment) and whose `Display` is the
//! text shown.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::disk::repo::DiskRepos;
use toolgate_policy::opencode::parse_policy_file;
use toolgate_policy::{normalize, parse_override, Mode, Policy, PolicyError, Sources, UnknownMode};

/// Why the configuration (the policy file, the flags, the environment)
/// cannot be used. The text shown is the `Display`.
#[derive(Debug)]
pub enum ConfigError {
    /// The policy file could not be read.
    Unreadable {
        /// The policy file's absolute path.
        file: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `--agent` names an agent, but no policy file (an OpenCode config)
    /// is in use.
    AgentWithoutConfig {
        /// The agent named.
        agent: String,
    },
    /// A value that cannot be used, in the policy file (its JSON included),
    /// `TOOLGATE_PERMISSION` or `--permission`: the policy crate's error,
    /// which names the file or flag and the key.
    Policy(PolicyError),
    /// `--mode` and `--permission-mode` name different modes.
    ModesDiffer {
        /// The mode `--mode` names.
        mode: Mode,
        /// The mode `--permission-mode` names.
        other: Mode,
    },
    /// An environment variable (`TOOLGATE_MODE`) names no mode.
    Environment {
        /// The variable.
        variable: &'static str,
        /// Why its value is no mode.
        source: ModeNameError,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Unreadable { file, source } => {
                write!(f, "{file}: cannot read the policy file: {source}")
            }
            ConfigError::AgentWithoutConfig { agent } => write!(
                f,
                "--agent: `{agent}` needs an OpenCode config as the policy file (--policy opencode.json), and no policy file is in use"
            ),
            ConfigError::Policy(err) => std::fmt::Display::fmt(err, f),
            ConfigError::ModesDiffer { mode, other } => write!(
                f,
                "--mode {mode} and --permission-mode {other} name different modes; give one"
            ),
            ConfigError::Environment { variable, source } => {
                write!(f, "invalid {variable}: {source}")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Unreadable { source, .. } => Some(source),
            ConfigError::Policy(err) => Some(err),
            ConfigError::Environment { source, .. } => Some(source),
            ConfigError::AgentWithoutConfig { .. } | ConfigError::ModesDiffer { .. } => None,
        }
    }
}

impl From<PolicyError> for ConfigError {
    fn from(err: PolicyError) -> ConfigError {
        ConfigError::Policy(err)
    }
}

/// A mode name (`--mode`, `--permission-mode`, `TOOLGATE_MODE`) that names
/// no mode. For Claude Code's `dontAsk`, the text says what to use instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeNameError(pub UnknownMode);

impl std::fmt::Display for ModeNameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 .0 == "dontAsk" {
            write!(
                f,
                "{}; for Claude Code's dontAsk (deny what would ask) use --on-ask deny",
                self.0
            )
        } else {
            std::fmt::Display::fmt(&self.0, f)
        }
    }
}

impl std::error::Error for ModeNameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A mode by name, or why the name is none.
pub fn parse_mode(name: &str) -> Result<Mode, ModeNameError> {
    name.parse::<Mode>().map_err(ModeNameError)
}

/// What the command line and environment say about the policy.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `--mode` (or `--permission-mode`), else `TOOLGATE_MODE`.
    pub mode: Option<Mode>,
    /// `--policy FILE`.
    pub policy: Option<PathBuf>,
    /// `--agent NAME`: the agent of an OpenCode config whose permission applies too.
    pub agent: Option<String>,
    /// `--permission JSON`.
    pub permission: Option<String>,
    /// `TOOLGATE_PERMISSION`.
    pub permission_env: Option<String>,
    /// `--project-root DIR`.
    pub project_root: Option<PathBuf>,
    /// `--ask-timeout SECS`.
    pub ask_timeout: Option<u64>,
    /// `--read-only-agents A,B`: the sub-agent types plan mode may launch.
    pub read_only_agents: Option<Vec<String>>,
    /// The process's working directory.
    pub cwd: PathBuf,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// Remember which paths cross no symbolic link while inotify reports no
    /// change (see `globs::watched`): for a process that judges many calls
    /// (`serve`, `mcp`, `replay`). A process that judges one (`hook`,
    /// `check`) asks the disk instead: watching a large directory, and
    /// closing the watches, cost more than the questions they save.
    pub remember_links: bool,
}

/// The policy, the warnings to log, and where the policy came from.
#[derive(Debug)]
pub struct Loaded {
    /// The policy.
    pub policy: Policy,
    /// Warnings to log (entries ignored, keys of an OpenCode config not used).
    pub warnings: Vec<String>,
    /// The layers in force, lowest first: `built-in`, the policy file's
    /// absolute path, `PATH#agent.NAME` for an OpenCode agent chosen with
    /// `--agent`, `TOOLGATE_PERMISSION`, `--permission` (what `ready`
    /// reports as `policySources`).
    pub sources: Vec<String>,
    /// The mode the user set: `--mode`/`--permission-mode`, else
    /// `TOOLGATE_MODE`, else the policy file's `mode`; `None` when the
    /// default (`ask`) applies.
    pub configured_mode: Option<toolgate_policy::Mode>,
}

/// The sources for a message: `built-in + /p/toolgate.json + --permission`.
pub fn describe_sources(sources: &[String]) -> String {
    sources.join(" + ")
}

/// The name of the policy file toolgate looks for.
pub const POLICY_FILE_NAME: &str = "toolgate.json";

/// The policy file to read, absolute, and whether it was found by searching
/// (rather than named by `--policy` or looked for in `--project-root`):
///
/// - `--policy FILE`: that file (it must exist);
/// - else with `--project-root DIR`: `DIR/toolgate.json` when it exists;
/// - else `toolgate.json` in the working directory or the nearest directory
///   above it that has one, looking no higher than the repository root (the
///   first directory on the way up that holds `.git`, a directory or a file)
///   or, outside a repository, the filesystem root. An `opencode.json` is
///   never picked up this way: name it with `--policy`.
///
/// A `toolgate.json` found by the search that belongs to another user than
/// the working directory's owner (`/tmp/toolgate.json` planted by someone
/// else, for a broker started in `/tmp/work`) is not used, and the search
/// stops there: a policy can loosen every answer, so only the user's own
/// files are picked up without being named. The warning says so.
pub fn find_policy_file(settings: &Settings) -> Option<(PathBuf, bool)> {
    find_policy_file_warning(settings, &mut Vec::new())
}

fn find_policy_file_warning(
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Option<(PathBuf, bool)> {
    let home = settings.home.as_deref();
    if let Some(path) = &settings.policy {
        return Some((
            normalize(&path.to_string_lossy(), &settings.cwd, home),
            false,
        ));
    }
    if let Some(root) = &settings.project_root {
        let root = normalize(&root.to_string_lossy(), &settings.cwd, home);
        let candidate = root.join(POLICY_FILE_NAME);
        return candidate.is_file().then_some((candidate, false));
    }
    let owner = owner_of(&settings.cwd);
    for dir in settings.cwd.ancestors() {
        let candidate = dir.join(POLICY_FILE_NAME);
        if candidate.is_file() {
            let found = owner_of(&candidate);
            if found != owner {
                let show =
                    |uid: Option<u32>| uid.map_or("unknown".to_string(), |uid| uid.to_string());
                warnings.push(format!(
                    "{} is not used: it belongs to user {}, not to the owner of the working directory (user {}); name it with --policy to use it",
                    candidate.display(),
                    show(found),
                    show(owner)
                ));
                return None;
            }
            return Some((candidate, true));
        }
        if dir.join(".git").symlink_metadata().is_ok() {
            break;
        }
    }
    None
}

/// The user id that owns a file (`None` where the platform has none).
fn owner_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|meta| meta.uid())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The policy, its warnings and its sources.
pub fn load(settings: &Settings) -> Result<Loaded, ConfigError> {
    let home = settings.home.as_deref();
    let absolute = |path: &Path, base: &Path| normalize(&path.to_string_lossy(), base, home);

    let explicit_root = settings
        .project_root
        .as_deref()
        .map(|root| absolute(root, &settings.cwd));
    let mut warnings = Vec::new();
    let found = find_policy_file_warning(settings, &mut warnings);
    let mut sources = vec!["built-in".to_string()];
    let file = match &found {
        Some((path, _)) => {
            let name = path.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
                file: name.clone(),
                source,
            })?;
            let file_name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (policy, warning) =
                parse_policy_file(&text, &name, &file_name, settings.agent.as_deref())?;
            warnings.extend(warning);
            sources.push(name.clone());
            if let Some((agent, _)) = &policy.agent {
                sources.push(format!("{name}#agent.{agent}"));
            }
            Some((name, policy))
        }
        None => {
            if let Some(agent) = &settings.agent {
                return Err(ConfigError::AgentWithoutConfig {
                    agent: agent.clone(),
                });
            }
            None
        }
    };

    // The project root: --project-root, else the file's projectRoot (relative to
    // the file's directory), else the directory of a policy file found by
    // searching upward, else the working directory.
    let project_root = match (&explicit_root, &file, &found) {
        (Some(root), _, _) => root.clone(),
        (None, Some((_, policy)), Some((path, _))) if policy.project_root.is_some() => {
            let base = path.parent().unwrap_or(Path::new("/"));
            normalize(policy.project_root.as_deref().unwrap_or("."), base, home)
        }
        (None, _, Some((path, true))) => path.parent().unwrap_or(Path::new("/")).to_path_buf(),
        _ => settings.cwd.clone(),
    };

    let mut overrides = Vec::new();
    if let Some(text) = &settings.permission_env {
        overrides.push((
            "TOOLGATE_PERMISSION".to_string(),
            parse_override(text, "TOOLGATE_PERMISSION")?,
        ));
    }
    if let Some(text) = &settings.permission {
        overrides.push((
            "--permission".to_string(),
            parse_override(text, "--permission")?,
        ));
    }
    if settings.permission_env.is_some() {
        sources.push("TOOLGATE_PERMISSION".to_string());
    }
    if settings.permission.is_some() {
        sources.push("--permission".to_string());
    }
    let (mut policy, built) = Policy::build(Sources {
        project_root,
        home: settings.home.clone(),
        mode: settings.mode,
        file: file.clone(),
        overrides,
        ask_timeout_seconds: settings.ask_timeout,
        read_only_agents: settings.read_only_agents.clone(),
    })?;
    // Shell analysis asks the disk which repository a git command would use.
    policy.shell.repo_oracle = Some(Arc::new(
        DiskRepos::new(policy.project_root.clone()).per_batch(),
    ));
    // Shell globs are judged by what they match on the disk.
    policy.glob_oracle = Some(Arc::new(if settings.remember_links {
        crate::disk::globs::DiskGlobs::per_call()
    } else {
        crate::disk::globs::DiskGlobs::new()
    }));
    policy.physical_root = toolgate_policy::GlobOracle::resolve(
        &crate::disk::globs::DiskGlobs::new(),
        &policy.project_root,
    );
    warnings.extend(built);
    let configured_mode = settings
        .mode
        .or(file.as_ref().and_then(|(_, policy)| policy.mode));
    Ok(Loaded {
        policy,
        warnings,
        sources,
        configured_mode,
    })
}
