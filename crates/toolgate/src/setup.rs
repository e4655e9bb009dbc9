//! Turning command-line flags, the environment and the policy file into a
//! [`Policy`]. This is the only place that reads configuration from disk
//! (and where the policy gets [`DiskRepos`], which reads the disk to tell
//! which repository a git command would use). [`find_policy_file`] is the
//! one place that decides which policy file is in force (`--policy`, else
//! `toolgate.json` in `--project-root`, else the nearest `toolgate.json` from
//! the working directory up to the repository root); [`load`] reads it as a
//! toolgate policy or an OpenCode config and says which layers are in force.
//! [`managed_files`] decides which managed policies are in force (the
//! system's `/etc/toolgate/managed.json`, `TOOLGATE_MANAGED`, `--managed`:
//! every one of them, since each can only tighten); the system's is used
//! only when root alone can change it ([`Untrusted`] says who else could).
//! What cannot be used is a [`ConfigError`], whose kind says where it is
//! (the policy file, a managed policy, a flag, the environment) and whose
//! `Display` is the text shown.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::disk::repo::DiskRepos;
use toolgate_policy::opencode::{merge_opencode, parse_policy_file, ConfigText};
use toolgate_policy::{
    normalize, parse_override, Mode, Policy, PolicyError, PolicyFile, Sources, UnknownMode,
};

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
    /// A managed policy that exists (or was named) cannot be read: toolgate
    /// does not run without the rules an administrator set.
    ManagedUnreadable {
        /// The managed policy's absolute path.
        file: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The system's managed policy ([`SYSTEM_MANAGED`]) could be changed
    /// by someone other than root: toolgate does not run under rules that
    /// anyone might have rewritten.
    ManagedUntrusted {
        /// The managed policy's absolute path.
        file: String,
        /// Who else could change it, and through what.
        why: Untrusted,
    },
    /// `--opencode` with `--policy` (one given before the subcommand, the
    /// other after it).
    OpenCodeWithPolicy,
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
            ConfigError::ManagedUnreadable { file, source } => write!(
                f,
                "managed:{file}: cannot read the managed policy: {source}; toolgate does not run without the rules it sets"
            ),
            ConfigError::ManagedUntrusted { file, why } => write!(
                f,
                "managed:{file}: cannot trust the managed policy: {}; the system's managed policy, and every directory above it, must be owned by root and writable by no one else; toolgate does not run without the rules it sets",
                why.text(Path::new(file))
            ),
            ConfigError::OpenCodeWithPolicy => write!(
                f,
                "--opencode reads OpenCode's own configuration as the policy, and --policy names a policy file: give one"
            ),
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
            ConfigError::Unreadable { source, .. }
            | ConfigError::ManagedUnreadable { source, .. } => Some(source),
            ConfigError::Policy(err) => Some(err),
            ConfigError::Environment { source, .. } => Some(source),
            ConfigError::AgentWithoutConfig { .. }
            | ConfigError::ManagedUntrusted { .. }
            | ConfigError::ModesDiffer { .. }
            | ConfigError::OpenCodeWithPolicy => None,
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
    /// `--opencode`: OpenCode's own configuration is the policy, found and
    /// merged as OpenCode does, with the environment it reads.
    pub opencode: Option<OpenCodeEnv>,
    /// `--agent NAME`: the agent of an OpenCode config whose permission applies too.
    pub agent: Option<String>,
    /// `--permission JSON`.
    pub permission: Option<String>,
    /// `--managed FILE`: a managed policy, besides the system's and
    /// `TOOLGATE_MANAGED`'s (see [`managed_files`]).
    pub managed: Option<PathBuf>,
    /// `TOOLGATE_MANAGED` (not empty): a managed policy, besides the
    /// system's and `--managed`'s.
    pub managed_env: Option<PathBuf>,
    /// `TOOLGATE_PERMISSION`.
    pub permission_env: Option<String>,
    /// An agent's own override, read by a bridge from the agent's command
    /// line or environment (its origin, its JSON): after
    /// `TOOLGATE_PERMISSION`, before `--permission`.
    pub agent_permission: Option<(String, String)>,
    /// Tools an agent was told to disable, as an override that denies
    /// them (its origin, its JSON): the very last layer.
    pub denied_last: Option<(String, String)>,
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

/// The environment OpenCode reads its configuration from (for `--opencode`);
/// an empty variable counts as unset, as in OpenCode.
#[derive(Debug, Clone, Default)]
pub struct OpenCodeEnv {
    /// `OPENCODE_CONFIG`: one more config file, after the global ones.
    pub config: Option<PathBuf>,
    /// `OPENCODE_CONFIG_DIR`: one more directory whose `opencode.json[c]` is read.
    pub config_dir: Option<PathBuf>,
    /// `OPENCODE_CONFIG_CONTENT`: a config as text, after the files.
    pub config_content: Option<String>,
    /// `OPENCODE_PERMISSION`: JSON merged into the merged `permission`.
    pub permission: Option<String>,
    /// `OPENCODE_DISABLE_PROJECT_CONFIG` (`true` or `1`): no project files.
    pub disable_project_config: bool,
    /// `XDG_CONFIG_HOME`: where the global config directory is (else `~/.config`).
    pub xdg_config_home: Option<PathBuf>,
}

impl OpenCodeEnv {
    /// Read from the process's environment.
    pub fn from_env() -> OpenCodeEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        OpenCodeEnv {
            config: var("OPENCODE_CONFIG").map(PathBuf::from),
            config_dir: var("OPENCODE_CONFIG_DIR").map(PathBuf::from),
            config_content: var("OPENCODE_CONFIG_CONTENT"),
            permission: var("OPENCODE_PERMISSION"),
            disable_project_config: var("OPENCODE_DISABLE_PROJECT_CONFIG")
                .is_some_and(|value| matches!(value.to_lowercase().as_str(), "true" | "1")),
            xdg_config_home: var("XDG_CONFIG_HOME").map(PathBuf::from),
        }
    }
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
    /// `--agent`, `TOOLGATE_PERMISSION`, `--permission`, then
    /// `managed:PATH` for each managed policy (what `ready` reports as
    /// `policySources`). With `--opencode`, instead of the policy
    /// file: each OpenCode config read, in OpenCode's order
    /// (`OPENCODE_CONFIG_CONTENT` by that name), `OPENCODE_PERMISSION`, then
    /// `PATH#agent.NAME` for each config defining the agent.
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

/// The system's managed policy: applied whenever it exists.
pub const SYSTEM_MANAGED: &str = "/etc/toolgate/managed.json";

/// The managed policies in force, absolute, in the order they are layered:
///
/// 1. `system` ([`SYSTEM_MANAGED`] outside tests) when anything is at that
///    path: a file that exists but cannot be read (a dangling link, a
///    directory, no permission, or a directory above it that cannot be
///    searched) is an error, never skipped, and so is one that someone
///    other than root could change (see [`Untrusted`]);
/// 2. `TOOLGATE_MANAGED`, for containers and wrappers that cannot write
///    `/etc`;
/// 3. `--managed FILE`.
///
/// Each applies, whatever the others: a managed policy can only tighten, so
/// naming one more never switches off one an administrator installed (an
/// empty `TOOLGATE_MANAGED` names none, and leaves the system's in force). The
/// same file named twice counts once.
pub fn managed_files(settings: &Settings, system: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let home = settings.home.as_deref();
    let mut files: Vec<PathBuf> = Vec::new();
    match system.symlink_metadata() {
        Ok(_) => files.push(system.to_path_buf()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(ConfigError::ManagedUnreadable {
                file: system.to_string_lossy().into_owned(),
                source,
            })
        }
    }
    for named in [&settings.managed_env, &settings.managed]
        .into_iter()
        .flatten()
    {
        let path = normalize(&named.to_string_lossy(), &settings.cwd, home);
        if !files.contains(&path) {
            files.push(path);
        }
    }
    Ok(files)
}

/// Where the system's managed policy is, and who may own it and the
/// directories above it besides root: nobody for [`SYSTEM_MANAGED`] (`0`),
/// the user running them in tests.
#[derive(Debug, Clone, Copy)]
struct System<'a> {
    path: &'a Path,
    owner: u32,
}

/// Why the system's managed policy cannot be trusted: a file, directory or
/// link on the way to it that someone other than root could change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Untrusted {
    /// Owned by another user, who could rewrite or replace it.
    Owner {
        /// The file, directory or link.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// Writable by its group or by others. A directory with the sticky bit
    /// (`/tmp`) passes: no one can replace what root owns in it.
    Writable {
        /// The file or directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

impl Untrusted {
    /// What is wrong, about the managed policy `file`: `it is ...`, `its
    /// directory /etc/toolgate is ...`, or for the target of a link `/opt/m.json,
    /// where it leads, is ...`.
    fn text(&self, file: &Path) -> String {
        let (path, what) = match self {
            Untrusted::Owner { path, uid } => (path, format!("owned by uid {uid}, not root")),
            Untrusted::Writable { path, mode } => (
                path,
                format!("writable by its group or others (mode {mode:#o})"),
            ),
        };
        if path == file {
            format!("it is {what}")
        } else if file.starts_with(path) {
            format!("its directory {} is {what}", path.display())
        } else {
            format!("{}, where it leads, is {what}", path.display())
        }
    }
}

/// Whether only root (or `system.owner`) can change the system's managed
/// policy, as sudo asks of sudoers and OpenSSH of its keys: the file, every
/// directory above it and every link on the way, as named and as the links
/// resolve, owned by them; none of them writable by group or others (a
/// directory with the sticky bit excepted). `Err`: the way cannot be read.
#[cfg(unix)]
fn untrusted(system: System<'_>) -> std::io::Result<Option<Untrusted>> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(system.path)?;
    for path in [system.path, real.as_path()] {
        let steps: Vec<std::path::Component<'_>> = path.components().collect();
        let mut prefix = PathBuf::new();
        for (n, step) in steps.iter().enumerate() {
            prefix.push(step);
            let meta = std::fs::symlink_metadata(&prefix)?;
            if meta.uid() != 0 && meta.uid() != system.owner {
                return Ok(Some(Untrusted::Owner {
                    path: prefix,
                    uid: meta.uid(),
                }));
            }
            // A link's own mode means nothing; where it leads is checked.
            if meta.file_type().is_symlink() {
                continue;
            }
            let mode = meta.mode() & 0o7777;
            let sticky = meta.is_dir() && mode & 0o1000 != 0 && n + 1 < steps.len();
            if mode & 0o022 != 0 && !sticky {
                return Ok(Some(Untrusted::Writable { path: prefix, mode }));
            }
        }
    }
    Ok(None)
}

#[cfg(not(unix))]
fn untrusted(_system: System<'_>) -> std::io::Result<Option<Untrusted>> {
    Ok(None)
}

/// Each managed policy of [`managed_files`], read and checked, with its
/// origin (`managed:PATH`). The system's is read only when root alone can
/// change it ([`untrusted`]).
fn read_managed(
    settings: &Settings,
    system: System<'_>,
) -> Result<Vec<(String, PolicyFile)>, ConfigError> {
    managed_files(settings, system.path)?
        .into_iter()
        .map(|path| {
            let file = path.to_string_lossy().into_owned();
            let origin = format!("managed:{file}");
            if path == system.path {
                match untrusted(system) {
                    Ok(None) => {}
                    Ok(Some(why)) => return Err(ConfigError::ManagedUntrusted { file, why }),
                    Err(source) => return Err(ConfigError::ManagedUnreadable { file, source }),
                }
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|source| ConfigError::ManagedUnreadable { file, source })?;
            Ok((origin.clone(), PolicyFile::parse_managed(&text, &origin)?))
        })
        .collect()
}

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
    if settings.opencode.is_some() {
        return None;
    }
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

/// OpenCode's config files and `OPENCODE_CONFIG_CONTENT`, in the order
/// OpenCode merges them (lowest first), read. `start` is where OpenCode
/// would run (`--project-root`, else the working directory). See
/// docs/modes-and-policy.md, "OpenCode's own configuration (--opencode)":
///
/// 1. the global directory (`$XDG_CONFIG_HOME/opencode`, else
///    `~/.config/opencode`): `config.json`, `opencode.json`, `opencode.jsonc`;
/// 2. `OPENCODE_CONFIG`;
/// 3. unless `OPENCODE_DISABLE_PROJECT_CONFIG`: `opencode.json` then
///    `opencode.jsonc` of each directory from the worktree root (the first
///    directory upward holding `.git`, else `/`) down to `start`;
/// 4. `opencode.json` then `opencode.jsonc` of each `.opencode` directory
///    from the worktree root down to `start` (unless
///    `OPENCODE_DISABLE_PROJECT_CONFIG`), of `~/.opencode`, and of
///    `OPENCODE_CONFIG_DIR`, each directory once;
/// 5. `OPENCODE_CONFIG_CONTENT`;
/// 6. the managed directory (`/etc/opencode`; on macOS
///    `/Library/Application Support/opencode`).
///
/// A file found by the upward search (3 and the project's `.opencode`
/// directories) that belongs to another user than the working directory's
/// owner is skipped with a warning, as `toolgate.json` is. A file that
/// does not exist is skipped, as OpenCode skips it (a named
/// `OPENCODE_CONFIG` with a warning); one that cannot be read is an error.
fn opencode_configs(
    env: &OpenCodeEnv,
    start: &Path,
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Result<Vec<ConfigText>, ConfigError> {
    let home = settings.home.as_deref();
    let absolute = |path: &Path| normalize(&path.to_string_lossy(), &settings.cwd, home);
    let global = match (&env.xdg_config_home, home) {
        (Some(xdg), _) => absolute(xdg).join("opencode"),
        (None, Some(home)) => home.join(".config").join("opencode"),
        (None, None) => PathBuf::from("/.config/opencode"),
    };
    // The directories from `start` up to the worktree root, nearest first.
    let mut upward: Vec<&Path> = Vec::new();
    for dir in start.ancestors() {
        upward.push(dir);
        if dir.join(".git").symlink_metadata().is_ok() {
            break;
        }
    }
    let owner = owner_of(&settings.cwd);
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    let mut found = |path: PathBuf, searched: bool| files.push((path, searched));
    for name in ["config.json", "opencode.json", "opencode.jsonc"] {
        found(global.join(name), false);
    }
    if let Some(path) = &env.config {
        let path = absolute(path);
        if !path.exists() {
            warnings.push(format!(
                "{}: OPENCODE_CONFIG names no file; OpenCode skips it, and so does toolgate",
                path.display()
            ));
        }
        found(path, false);
    }
    if !env.disable_project_config {
        for dir in upward.iter().rev() {
            for name in ["opencode.json", "opencode.jsonc"] {
                found(dir.join(name), true);
            }
        }
    }
    let mut directories: Vec<(PathBuf, bool)> = Vec::new();
    if !env.disable_project_config {
        for dir in upward.iter().rev() {
            let candidate = dir.join(".opencode");
            if candidate.is_dir() {
                directories.push((candidate, true));
            }
        }
    }
    if let Some(home) = home {
        let candidate = home.join(".opencode");
        if candidate.is_dir() {
            directories.push((candidate, false));
        }
    }
    if let Some(dir) = &env.config_dir {
        directories.push((absolute(dir), false));
    }
    let mut seen: Vec<PathBuf> = vec![global.clone()];
    for (dir, searched) in directories {
        if seen.contains(&dir) {
            continue;
        }
        seen.push(dir.clone());
        for name in ["opencode.json", "opencode.jsonc"] {
            found(dir.join(name), searched);
        }
    }
    let managed = if cfg!(target_os = "macos") {
        PathBuf::from("/Library/Application Support/opencode")
    } else {
        PathBuf::from("/etc/opencode")
    };
    let mut configs = Vec::new();
    let mut read = |path: &Path,
                    searched: bool,
                    configs: &mut Vec<ConfigText>|
     -> Result<(), ConfigError> {
        if !path.is_file() {
            return Ok(());
        }
        let origin = path.to_string_lossy().into_owned();
        if searched {
            let found = owner_of(path);
            if found != owner {
                let show =
                    |uid: Option<u32>| uid.map_or("unknown".to_string(), |uid| uid.to_string());
                warnings.push(format!(
                    "{origin} is not used: it belongs to user {}, not to the owner of the working directory (user {}); OpenCode would read it, toolgate does not pick up another user's config",
                    show(found),
                    show(owner)
                ));
                return Ok(());
            }
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
            file: origin.clone(),
            source,
        })?;
        configs.push(ConfigText { origin, text });
        Ok(())
    };
    for (path, searched) in &files {
        read(path, *searched, &mut configs)?;
    }
    if let Some(text) = &env.config_content {
        configs.push(ConfigText {
            origin: "OPENCODE_CONFIG_CONTENT".to_string(),
            text: text.clone(),
        });
    }
    for name in ["opencode.json", "opencode.jsonc"] {
        read(&managed.join(name), false, &mut configs)?;
    }
    Ok(configs)
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

/// The policy, its warnings and its sources, with the system's managed
/// policy at [`SYSTEM_MANAGED`].
pub fn load(settings: &Settings) -> Result<Loaded, ConfigError> {
    load_with(
        settings,
        System {
            path: Path::new(SYSTEM_MANAGED),
            owner: 0,
        },
    )
}

/// [`load`] with the system's managed policy at `system.path`.
fn load_with(settings: &Settings, system: System<'_>) -> Result<Loaded, ConfigError> {
    let home = settings.home.as_deref();
    let absolute = |path: &Path, base: &Path| normalize(&path.to_string_lossy(), base, home);

    let explicit_root = settings
        .project_root
        .as_deref()
        .map(|root| absolute(root, &settings.cwd));
    if settings.opencode.is_some() && settings.policy.is_some() {
        return Err(ConfigError::OpenCodeWithPolicy);
    }
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
            if let (Some(agent), None) = (&settings.agent, &settings.opencode) {
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
    if let Some(env) = &settings.opencode {
        let start = explicit_root.as_deref().unwrap_or(&settings.cwd);
        let configs = opencode_configs(env, start, settings, &mut warnings)?;
        let merged = merge_opencode(
            &configs,
            env.permission.as_deref(),
            settings.agent.as_deref(),
        )?;
        warnings.extend(merged.warnings);
        sources.extend(merged.sources);
        overrides.extend(merged.layers);
    }
    if let Some(text) = &settings.permission_env {
        overrides.push((
            "TOOLGATE_PERMISSION".to_string(),
            parse_override(text, "TOOLGATE_PERMISSION")?,
        ));
    }
    if let Some((from, text)) = &settings.agent_permission {
        overrides.push((from.clone(), parse_override(text, from)?));
    }
    if let Some(text) = &settings.permission {
        overrides.push((
            "--permission".to_string(),
            parse_override(text, "--permission")?,
        ));
    }
    if let Some((from, text)) = &settings.denied_last {
        overrides.push((from.clone(), parse_override(text, from)?));
    }
    if settings.permission_env.is_some() {
        sources.push("TOOLGATE_PERMISSION".to_string());
    }
    if let Some((from, _)) = &settings.agent_permission {
        sources.push(from.clone());
    }
    if settings.permission.is_some() {
        sources.push("--permission".to_string());
    }
    if let Some((from, _)) = &settings.denied_last {
        sources.push(from.clone());
    }
    let managed = read_managed(settings, system)?;
    sources.extend(managed.iter().map(|(origin, _)| origin.clone()));
    let (mut policy, built) = Policy::build(Sources {
        project_root,
        home: settings.home.clone(),
        mode: settings.mode,
        file: file.clone(),
        overrides,
        ask_timeout_seconds: settings.ask_timeout,
        read_only_agents: settings.read_only_agents.clone(),
        managed,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("toolgate-setup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Writable by no one else whatever the umask: a system managed
        // policy in it is trusted (see `untrusted`).
        set_mode(&dir, 0o755);
        dir
    }

    /// Write `text` to `path`, writable by its owner alone.
    fn write_private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        set_mode(path, 0o644);
    }

    fn set_mode(path: &Path, mode: u32) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        #[cfg(not(unix))]
        let _ = (path, mode);
    }

    fn settings(cwd: &Path) -> Settings {
        Settings {
            cwd: cwd.to_path_buf(),
            ..Settings::default()
        }
    }

    /// The system's managed policy at `path`, which the user running the
    /// tests may own (as root may).
    fn system_at(path: &Path) -> System<'_> {
        System {
            path,
            owner: rustix::process::geteuid().as_raw(),
        }
    }

    #[test]
    fn every_managed_policy_applies_and_the_system_one_cannot_be_switched_off() {
        let dir = scratch("managed");
        let system = dir.join("etc-managed.json");
        write_private(&system, r#"{"permission":{"bash":{"rm *":"deny"}}}"#);
        std::fs::write(dir.join("env.json"), r#"{"mode":"ask"}"#).unwrap();
        std::fs::write(dir.join("flag.json"), r#"{"permission":{"edit":"ask"}}"#).unwrap();
        let mut given = settings(&dir);
        // Nothing named: the system's alone.
        assert_eq!(
            managed_files(&given, &system).unwrap(),
            vec![system.clone()]
        );
        // Naming others adds them; the system's stays, first.
        given.managed_env = Some(PathBuf::from("env.json"));
        given.managed = Some(dir.join("flag.json"));
        assert_eq!(
            managed_files(&given, &system).unwrap(),
            vec![system.clone(), dir.join("env.json"), dir.join("flag.json")]
        );
        // The same file twice counts once.
        given.managed = Some(system.clone());
        assert_eq!(
            managed_files(&given, &system).unwrap(),
            vec![system.clone(), dir.join("env.json")]
        );
        let loaded = load_with(&given, system_at(&system)).unwrap();
        let origin = |path: &Path| format!("managed:{}", path.display());
        assert_eq!(
            loaded.sources,
            vec![
                "built-in".to_string(),
                origin(&system),
                origin(&dir.join("env.json"))
            ]
        );
        assert_eq!(
            loaded.policy.mode_floor,
            Some((Mode::Ask, origin(&dir.join("env.json"))))
        );
        // No system file: nothing unless named.
        let none = dir.join("absent.json");
        assert!(managed_files(&settings(&dir), &none).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_managed_policy_that_cannot_be_used_stops_the_load() {
        let dir = scratch("unusable");
        let given = settings(&dir);
        // A dangling link, a directory, a file that is not a policy.
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(dir.join("nowhere.json"), &link).unwrap();
        let text = |path: &Path| {
            load_with(&given, system_at(path))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert!(
            text(&link).starts_with(&format!(
                "managed:{}: cannot read the managed policy: No such file or directory",
                link.display()
            )),
            "{}",
            text(&link)
        );
        assert!(
            text(&dir).contains("cannot read the managed policy"),
            "{}",
            text(&dir)
        );
        let bad = dir.join("bad.json");
        write_private(&bad, r#"{"tools":{}}"#);
        assert_eq!(
            text(&bad),
            format!(
                "managed:{}: tools: not taken in a managed policy; a managed policy takes only `mode` (a floor) and `permission`",
                bad.display()
            )
        );
        // A named one that does not exist.
        let named = Settings {
            managed: Some(dir.join("missing.json")),
            ..given.clone()
        };
        let err = load_with(&named, system_at(&dir.join("absent.json")))
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::ManagedUnreadable { .. }),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    /// The system's managed policy is refused, never skipped, when someone
    /// other than root could change it: the file, a directory above it, or
    /// what a link leads to. (Owners other than the user running the tests
    /// need root to set up: those cases are skipped otherwise.)
    #[cfg(unix)]
    #[test]
    fn a_system_managed_policy_others_could_change_stops_the_load() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("untrusted");
        let given = settings(&dir);
        let etc = dir.join("etc");
        std::fs::create_dir(&etc).unwrap();
        set_mode(&etc, 0o755);
        let file = etc.join("managed.json");
        write_private(&file, r#"{"mode":"ask"}"#);
        let load = |path: &Path| load_with(&given, system_at(path)).map(|loaded| loaded.sources);
        let said = |path: &Path| load(path).map(|_| ()).unwrap_err().to_string();
        let refused = |why: &str| {
            format!(
                "managed:{}: cannot trust the managed policy: {why}; the system's managed policy, and every directory above it, must be owned by root and writable by no one else; toolgate does not run without the rules it sets",
                file.display()
            )
        };
        // Owned by its user, writable by no one else: used.
        assert_eq!(
            load(&file).unwrap().last(),
            Some(&format!("managed:{}", file.display()))
        );
        // Writable by others, or by its group.
        for mode in [0o666, 0o646, 0o664] {
            set_mode(&file, mode);
            assert_eq!(
                said(&file),
                refused(&format!(
                    "it is writable by its group or others (mode {mode:#o})"
                ))
            );
            let err = load(&file).unwrap_err();
            assert!(
                matches!(
                    &err,
                    ConfigError::ManagedUntrusted {
                        why: Untrusted::Writable { .. },
                        ..
                    }
                ),
                "{err}"
            );
        }
        set_mode(&file, 0o444);
        assert!(load(&file).is_ok());
        // Its directory writable by others: anyone could put another file
        // in its place. With the sticky bit (as `/tmp`) no one can.
        set_mode(&etc, 0o777);
        assert_eq!(
            said(&file),
            refused(&format!(
                "its directory {} is writable by its group or others (mode 0o777)",
                etc.display()
            ))
        );
        set_mode(&etc, 0o1777);
        assert!(load(&file).is_ok());
        set_mode(&etc, 0o755);
        // A link to a file that is writable by others: where it leads counts.
        let target = dir.join("real.json");
        write_private(&target, r#"{"mode":"ask"}"#);
        let link = etc.join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(load(&link).is_ok());
        set_mode(&target, 0o666);
        assert_eq!(
            load(&link).unwrap_err().to_string(),
            format!(
                "managed:{}: cannot trust the managed policy: {}, where it leads, is writable by its group or others (mode 0o666); the system's managed policy, and every directory above it, must be owned by root and writable by no one else; toolgate does not run without the rules it sets",
                link.display(),
                target.display()
            )
        );
        set_mode(&target, 0o644);
        // Another owner: only root can hand a file to someone else.
        if rustix::process::geteuid().is_root() {
            let nobody = 65534;
            std::os::unix::fs::lchown(&file, Some(nobody), None).unwrap();
            assert_eq!(std::fs::metadata(&file).unwrap().uid(), nobody);
            assert_eq!(said(&file), refused("it is owned by uid 65534, not root"));
            std::os::unix::fs::lchown(&file, Some(0), None).unwrap();
            std::os::unix::fs::lchown(&etc, Some(nobody), None).unwrap();
            assert_eq!(
                said(&file),
                refused(&format!(
                    "its directory {} is owned by uid 65534, not root",
                    etc.display()
                ))
            );
            std::os::unix::fs::lchown(&etc, Some(0), None).unwrap();
            // A link on the way must be root's too.
            std::os::unix::fs::lchown(&link, Some(nobody), None).unwrap();
            assert_eq!(
                load(&link).unwrap_err().to_string(),
                format!(
                    "managed:{}: cannot trust the managed policy: it is owned by uid 65534, not root; the system's managed policy, and every directory above it, must be owned by root and writable by no one else; toolgate does not run without the rules it sets",
                    link.display()
                )
            );
        } else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the cases of another owner need root"
            );
        }
        // `--managed` and `TOOLGATE_MANAGED` name a file the user chose:
        // not checked.
        set_mode(&target, 0o666);
        let named = Settings {
            managed: Some(target.clone()),
            ..given.clone()
        };
        assert!(load_with(&named, system_at(&dir.join("absent.json"))).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
