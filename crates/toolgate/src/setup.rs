//! Turning command-line flags, the environment and the policy file into a
//! [`Policy`]. This is the only place that reads configuration from disk
//! (and where the policy gets [`DiskRepos`], which reads the disk to tell
//! which repository a git command would use).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::repo::DiskRepos;
use toolgate_policy::{normalize, parse_override, Mode, Policy, PolicyError, PolicyFile, Sources};

/// What the command line and environment say about the policy.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `--mode`.
    pub mode: Option<Mode>,
    /// `--policy FILE`.
    pub policy: Option<PathBuf>,
    /// `--permission JSON`.
    pub permission: Option<String>,
    /// `TOOLGATE_PERMISSION`.
    pub permission_env: Option<String>,
    /// `--project-root DIR`.
    pub project_root: Option<PathBuf>,
    /// `--ask-timeout SECS`.
    pub ask_timeout: Option<u64>,
    /// The process's working directory.
    pub cwd: PathBuf,
    /// `HOME`.
    pub home: Option<PathBuf>,
}

/// Where the policy comes from, for a message: the policy file (or that there
/// is none) and the overrides.
pub fn describe_sources(settings: &Settings) -> String {
    let home = settings.home.as_deref();
    let file = match &settings.policy {
        Some(path) => Some(normalize(&path.to_string_lossy(), &settings.cwd, home)),
        None => {
            let root = settings
                .project_root
                .as_deref()
                .map(|root| normalize(&root.to_string_lossy(), &settings.cwd, home))
                .unwrap_or_else(|| settings.cwd.clone());
            Some(root.join("toolgate.json")).filter(|candidate| candidate.is_file())
        }
    };
    let mut parts = vec![match file {
        Some(file) => file.display().to_string(),
        None => "no policy file".to_string(),
    }];
    if settings.permission_env.is_some() {
        parts.push("TOOLGATE_PERMISSION".into());
    }
    if settings.permission.is_some() {
        parts.push("--permission".into());
    }
    parts.join(" + ")
}

/// The policy, and warnings to log.
pub fn load(settings: &Settings) -> Result<(Policy, Vec<String>), PolicyError> {
    let home = settings.home.as_deref();
    let absolute = |path: &Path, base: &Path| normalize(&path.to_string_lossy(), base, home);

    // The policy file: --policy, else toolgate.json in the project root.
    let explicit_root = settings
        .project_root
        .as_deref()
        .map(|root| absolute(root, &settings.cwd));
    let file_path: Option<PathBuf> = match &settings.policy {
        Some(path) => Some(absolute(path, &settings.cwd)),
        None => {
            let candidate = explicit_root
                .clone()
                .unwrap_or_else(|| settings.cwd.clone())
                .join("toolgate.json");
            candidate.is_file().then_some(candidate)
        }
    };
    let file = match &file_path {
        Some(path) => {
            let name = path.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).map_err(|err| {
                PolicyError::new(&name, "", &format!("cannot read the policy file: {err}"))
            })?;
            Some((name.clone(), PolicyFile::parse(&text, &name)?))
        }
        None => None,
    };

    // The project root: --project-root, else the file's projectRoot (relative to
    // the file's directory), else the working directory.
    let project_root = match (&explicit_root, &file, &file_path) {
        (Some(root), _, _) => root.clone(),
        (None, Some((_, policy)), Some(path)) if policy.project_root.is_some() => {
            let base = path.parent().unwrap_or(Path::new("/"));
            normalize(policy.project_root.as_deref().unwrap_or("."), base, home)
        }
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
    let (mut policy, warnings) = Policy::build(Sources {
        project_root,
        home: settings.home.clone(),
        mode: settings.mode,
        file,
        overrides,
        ask_timeout_seconds: settings.ask_timeout,
    })?;
    // Shell analysis asks the disk which repository a git command would use.
    policy.shell.repo_oracle = Some(Arc::new(
        DiskRepos::new(policy.project_root.clone()).per_batch(),
    ));
    // Shell globs are judged by what they match on the disk.
    policy.glob_oracle = Some(Arc::new(crate::globs::DiskGlobs));
    Ok((policy, warnings))
}
