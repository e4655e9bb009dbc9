//! The execution oracle: run what toolgate allows and see whether it only read.
//!
//! A [`World`] is a hostile project built from code (`oracle_world.sh`): planted
//! programs (`0/ls`, `11/ls`, `./rg`, `./git`, ...), a committed bare repository and
//! nested repositories whose configuration runs programs, guarded files, files named
//! like flags. [`World::execute`] runs one command in it under `bash -c`, `dash -c` or
//! as an argv, inside fresh user, network, mount, pid and UTS namespaces when the
//! machine allows it (`oracle_wrapper.sh` checks the network counters, the host name,
//! scratch directories and left-over processes there), with `HOME` inside the project,
//! stdin from `/dev/null`, a timeout that kills the process group, and output capped.
//! Afterwards the whole world is compared with its snapshot (every file's type, mode,
//! owner, size, inode, link count, mtime, ctime and content) and the markers the
//! planted programs leave are collected: any difference is a violation, and the world
//! is rebuilt before the next command.
//!
//! [`Candidates`] come from the labelled shell corpus and from a seeded grammar over
//! the read-only table's programs, their flags (dangerous ones included), quoting,
//! redirections, wrappers, `cd` prefixes and argv forms. [`ask_broker`] sends them to
//! the real binary in plan mode and keeps those it allows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)] // test support

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hasher};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::Broker;

const WORLD_SCRIPT: &str = include_str!("oracle_world.sh");
const WRAPPER_SCRIPT: &str = include_str!("oracle_wrapper.sh");

/// The most output kept from one execution (the rest is drained and dropped).
const OUTPUT_CAP: usize = 16 * 1024;
/// Output beyond this ends the execution (not a violation).
const OUTPUT_LIMIT: usize = 4 * 1024 * 1024;

/// How commands are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sandbox {
    /// `unshare -rnmpfu --mount-proc`: no network, own /tmp, own pids and host name.
    Full,
    /// No namespaces could be made: commands that may use the network are skipped.
    None,
}

/// Find out which sandbox this machine allows (`ORACLE_NO_SANDBOX=1` pretends none,
/// to try the fallback).
pub fn detect_sandbox() -> Sandbox {
    if std::env::var_os("ORACLE_NO_SANDBOX").is_some_and(|v| v == "1") {
        return Sandbox::None;
    }
    let ok = Command::new("unshare")
        .args(unshare_args())
        .args(["/bin/sh", "-c", "mount -t tmpfs oracle /tmp && exit 0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Sandbox::Full
    } else {
        Sandbox::None
    }
}

fn unshare_args() -> [&'static str; 9] {
    [
        "--map-root-user",
        "--net",
        "--mount",
        "--pid",
        "--fork",
        "--uts",
        "--mount-proc",
        "--kill-child",
        "--",
    ]
}

/// How a command is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Runner {
    Bash,
    Dash,
    /// An argv run directly (as Codex runs `["ls", "-la"]`).
    Argv,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::Bash => "bash",
            Runner::Dash => "dash",
            Runner::Argv => "argv",
        }
    }
}

/// A command as the agent sends it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Form {
    Text(String),
    Argv(Vec<String>),
}

/// One command to try.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Candidate {
    pub form: Form,
    /// The call's `cwd`, relative to the project root (`""` is the root itself).
    pub cwd: Option<String>,
    /// Where it came from (`corpus.tsv:12`, `grammar`).
    pub origin: String,
}

impl Candidate {
    pub fn text(command: &str) -> Candidate {
        Candidate {
            form: Form::Text(command.to_string()),
            cwd: None,
            origin: "test".to_string(),
        }
    }

    /// The runners this candidate is executed with.
    pub fn runners(&self) -> &'static [Runner] {
        match self.form {
            Form::Text(_) => &[Runner::Bash, Runner::Dash],
            Form::Argv(_) => &[Runner::Argv],
        }
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        let what = match &self.form {
            Form::Text(t) => format!("{t:?}"),
            Form::Argv(a) => format!("argv {a:?}"),
        };
        match &self.cwd {
            Some(cwd) => format!("{what} (cwd {:?}) [{}]", display_cwd(cwd), self.origin),
            None => format!("{what} [{}]", self.origin),
        }
    }

    /// Whether the command mentions something network-like (skipped without a sandbox).
    fn may_use_network(&self) -> bool {
        let text = match &self.form {
            Form::Text(t) => t.clone(),
            Form::Argv(a) => a.join(" "),
        };
        [
            "tcp", "udp", "http", "ftp", "://", "~", "$", "curl", "wget", "nc", "ssh", "git",
        ]
        .iter()
        .any(|w| text.contains(w))
    }
}

fn display_cwd(cwd: &str) -> &str {
    if cwd.is_empty() {
        "."
    } else {
        cwd
    }
}

/// The metadata of one file of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    ino: u64,
    nlink: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    /// Access time of a guarded file (`.env`, `secrets/`): a read moves it (relatime,
    /// and the world's files have old times). Not compared by [`same`].
    atime: Option<(i64, i64)>,
    digest: u64,
}

/// Files the broker guards by default or by the oracle's policy (`read` asks for
/// `*.env`, `*.env.*` except `*.env.example`; `secrets/**` is denied): reading them
/// in plan mode is not allowed without a question.
fn guarded(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let env = (name.ends_with(".env") || name.contains(".env.")) && !name.ends_with(".env.example");
    let secret = path
        .parent()
        .is_some_and(|p| p.file_name().is_some_and(|n| n == "secrets"));
    env || secret
}

type Snapshot = BTreeMap<PathBuf, Entry>;

/// The hostile project and everything around it.
pub struct World {
    /// Holds everything of this world.
    pub work: PathBuf,
    /// The snapshot root: the project and a neighbour directory.
    pub world: PathBuf,
    /// The project root.
    pub proj: PathBuf,
    /// Where planted programs leave their markers (outside the world).
    pub markers: PathBuf,
    hooks: PathBuf,
    reports: PathBuf,
    wrapper: PathBuf,
    baseline: Snapshot,
    pub sandbox: Sandbox,
    pub timeout: Duration,
    /// How many times the world was rebuilt after a violation.
    pub rebuilds: usize,
    serial: u64,
    executions: u64,
}

/// What one execution did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Everything that changed or ran besides output; empty when it only read.
    pub violations: Vec<String>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub notes: Vec<String>,
    /// Guarded files the command read (not a change, but not allowed without asking).
    pub guarded_reads: Vec<String>,
}

impl World {
    /// Build a world under `work` (removed first).
    pub fn build(work: &Path, sandbox: Sandbox) -> World {
        let _ = std::fs::remove_dir_all(work);
        std::fs::create_dir_all(work).unwrap();
        let work = work.canonicalize().unwrap();
        let wrapper = work.join("wrapper.sh");
        std::fs::write(&wrapper, WRAPPER_SCRIPT).unwrap();
        let world_script = work.join("world.sh");
        std::fs::write(&world_script, WORLD_SCRIPT).unwrap();
        let mut world = World {
            world: work.join("world"),
            proj: work.join("world").join("proj"),
            markers: work.join("markers"),
            hooks: work.join("hooks"),
            reports: work.join("reports"),
            wrapper,
            baseline: Snapshot::new(),
            sandbox,
            timeout: Duration::from_secs(3),
            rebuilds: 0,
            serial: 0,
            executions: 0,
            work,
        };
        world.rebuild();
        world
    }

    /// Build the template from scratch (`oracle_world.sh`), then the world from it.
    pub fn rebuild(&mut self) {
        let template = self.work.join("template");
        let out = Command::new("/bin/sh")
            .arg(self.work.join("world.sh"))
            .arg(&template)
            .arg(&self.hooks)
            .arg(&self.markers)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.work.join("nohome"))
            .env("LANG", "C.UTF-8")
            .env(
                "ORACLE_GITLINKS",
                std::env::var("ORACLE_GITLINKS").unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the hostile project failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.restore();
    }

    /// Put a fresh copy of the template in place and take its snapshot.
    pub fn restore(&mut self) {
        self.clear_side_dirs();
        let _ = std::fs::remove_dir_all(&self.world);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(self.work.join("template"))
            .arg(&self.world)
            .status()
            .unwrap();
        assert!(ok.success(), "copying the hostile project failed");
        self.settle();
    }

    fn clear_side_dirs(&self) {
        let _ = std::fs::remove_dir_all(&self.markers);
        std::fs::create_dir_all(&self.markers).unwrap();
        let _ = std::fs::remove_dir_all(&self.reports);
        std::fs::create_dir_all(&self.reports).unwrap();
    }

    /// Refresh the project's index and take the snapshot. A copied file has a new
    /// inode and ctime, so the index is refreshed here (otherwise the next `git
    /// status` would rewrite it). The harness's own git never looks into
    /// submodules: with `ORACLE_GITLINKS=1` that would run their planted hooks.
    fn settle(&mut self) {
        let out = Command::new("git")
            .args(["status", "--porcelain", "--ignore-submodules=all"])
            .current_dir(&self.proj)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "git status in the fresh copy failed");
        // Guarded files get an old access time again (a copy keeps the template's, which
        // the copy itself moved), so that the next read moves it.
        let guarded_files: Vec<PathBuf> = snapshot(&self.world, false)
            .into_iter()
            .filter(|(_, e)| e.atime.is_some())
            .map(|(p, _)| p)
            .collect();
        if !guarded_files.is_empty() {
            let ok = Command::new("touch")
                .args(["-a", "-h", "-d", "2020-01-01 00:00:00"])
                .args(&guarded_files)
                .status()
                .unwrap();
            assert!(ok.success(), "touch -a on the guarded files failed");
        }
        let ran = std::fs::read_dir(&self.markers).unwrap().count();
        assert_eq!(ran, 0, "a planted program ran while the world was restored");
        self.baseline = snapshot(&self.world, true);
    }

    /// Undo what one execution changed: remove what it created, copy back from
    /// the template what it removed or modified. Falls back to a whole copy.
    fn repair(&mut self, now: &Snapshot) {
        let changed: Vec<&PathBuf> = self
            .baseline
            .iter()
            .filter(|(p, b)| {
                now.get(*p)
                    .is_none_or(|a| !same(a, b) || a.atime != b.atime)
            })
            .map(|(p, _)| p)
            .collect();
        let created: Vec<&PathBuf> = now
            .keys()
            .filter(|p| !self.baseline.contains_key(*p))
            .collect();
        if changed.len() + created.len() > 40 {
            return self.restore();
        }
        self.clear_side_dirs();
        let template = self.work.join("template");
        let mut ok = true;
        for p in created.iter().rev() {
            let gone = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
            ok &= gone.is_ok() || std::fs::symlink_metadata(p).is_err();
        }
        for p in changed {
            let Ok(rel) = p.strip_prefix(&self.world) else {
                ok = false;
                continue;
            };
            let from = template.join(rel);
            let Ok(meta) = std::fs::symlink_metadata(&from) else {
                ok = false;
                continue;
            };
            if meta.is_dir() {
                // Its entries are repaired one by one; here only its own mode.
                if std::fs::symlink_metadata(p).is_err() {
                    ok &= std::fs::create_dir_all(p).is_ok();
                }
                ok &= std::fs::set_permissions(p, meta.permissions()).is_ok();
                continue;
            }
            let _ = std::fs::remove_file(p);
            let status = Command::new("cp")
                .arg("-a")
                .arg("-T")
                .arg(&from)
                .arg(p)
                .status();
            ok &= status.is_ok_and(|s| s.success());
        }
        if !ok {
            return self.restore();
        }
        self.settle();
        // The repaired world must have exactly the template's files.
        let template_files = snapshot(&template, false);
        let now_files = snapshot(&self.world, false);
        let rel = |s: &Snapshot, root: &Path| -> BTreeSet<PathBuf> {
            s.keys()
                .filter_map(|p| p.strip_prefix(root).ok().map(Path::to_path_buf))
                .collect()
        };
        if rel(&template_files, &template) != rel(&now_files, &self.world) {
            self.restore();
        }
    }

    /// The environment commands run with: HOME and TMPDIR inside the project.
    fn env(&self) -> Vec<(String, String)> {
        let proj = self.proj.display().to_string();
        vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("HOME".into(), format!("{proj}/home")),
            ("TMPDIR".into(), format!("{proj}/tmp")),
            ("USER".into(), "oracle".into()),
            ("LOGNAME".into(), "oracle".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TERM".into(), "dumb".into()),
        ]
    }

    /// Run one candidate with one runner and report what it changed; the world is
    /// rebuilt when anything did.
    pub fn execute(&mut self, candidate: &Candidate, runner: Runner) -> Outcome {
        self.serial += 1;
        let report = self.reports.join(format!("r{}", self.serial));
        let cwd = match &candidate.cwd {
            Some(c) if !c.is_empty() => self.proj.join(c),
            _ => self.proj.clone(),
        };
        let sandbox = match self.sandbox {
            Sandbox::Full => "full",
            Sandbox::None => "none",
        };
        let mut command = match self.sandbox {
            Sandbox::Full => {
                let mut c = Command::new("unshare");
                c.args(unshare_args()).arg("/bin/dash");
                c
            }
            Sandbox::None => Command::new("/bin/dash"),
        };
        command
            .arg(&self.wrapper)
            .arg(&report)
            .arg(sandbox)
            .arg(runner.name())
            .arg(&cwd);
        match (&candidate.form, runner) {
            (Form::Text(t), Runner::Bash | Runner::Dash) => {
                command.arg(t);
            }
            (Form::Argv(a), Runner::Argv) => {
                command.args(a);
            }
            _ => panic!("runner {runner:?} does not fit {candidate:?}"),
        }
        command
            .env_clear()
            .envs(self.env())
            .current_dir(&self.proj)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut outcome = Outcome::default();
        let started = Instant::now();
        let mut child = command.spawn().expect("spawn the oracle wrapper");
        let pgid = child.id();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let readers = [
            spawn_reader(Box::new(stdout), tx.clone()),
            spawn_reader(Box::new(stderr), tx),
        ];
        let deadline = Instant::now() + self.timeout;
        let mut total = 0usize;
        loop {
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(n) => total += n,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if total > OUTPUT_LIMIT {
                outcome.notes.push("output limit reached".into());
                kill_group(pgid);
                break;
            }
            if Instant::now() > deadline {
                outcome.timed_out = true;
                kill_group(pgid);
                break;
            }
        }
        let _ = child.wait();
        let [out, err] = readers;
        outcome.stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
        outcome.stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();

        let report_text = std::fs::read_to_string(&report).unwrap_or_default();
        let _ = std::fs::remove_file(&report);
        for line in report_text.lines() {
            if let Some(v) = line.strip_prefix("violation: ") {
                outcome.violations.push(v.to_string());
            } else if let Some(n) = line.strip_prefix("note: ") {
                outcome.notes.push(n.to_string());
            }
        }
        let cut_short =
            outcome.timed_out || outcome.notes.iter().any(|n| n == "output limit reached");
        if !cut_short && !report_text.contains("status: ") {
            outcome
                .violations
                .push("the wrapper did not finish (killed by the command?)".into());
        }
        // Refused by the sandbox: the command tried to change something outside it
        // (the clock, a mount, a protected file).
        for line in outcome.stderr.lines() {
            if line.contains("Operation not permitted") || line.contains("Read-only file system") {
                outcome
                    .violations
                    .push(format!("the sandbox refused an operation: {line}"));
            }
        }
        // Planted programs that ran.
        if let Ok(entries) = std::fs::read_dir(&self.markers) {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    format!(
                        "planted program ran: {} ({})",
                        e.file_name().to_string_lossy(),
                        text.lines().next().unwrap_or("").trim()
                    )
                })
                .collect();
            names.sort();
            outcome.violations.extend(names);
        }
        let trace = std::env::var_os("ORACLE_TRACE").is_some();
        let ran = started.elapsed();
        self.executions += 1;
        let now = snapshot(&self.world, self.executions.is_multiple_of(50));
        outcome
            .violations
            .extend(diff(&self.world, &self.baseline, &now));
        outcome.guarded_reads = guarded_reads(&self.world, &self.baseline, &now);
        let checked = started.elapsed();
        if !outcome.violations.is_empty() || !outcome.guarded_reads.is_empty() {
            self.rebuilds += 1;
            self.repair(&now);
        }
        if trace {
            println!(
                "trace: ran {ran:?}, checked {checked:?}, restored {:?}",
                started.elapsed()
            );
        }
        outcome
    }
}

fn spawn_reader(
    mut pipe: Box<dyn Read + Send>,
    tx: std::sync::mpsc::Sender<usize>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    if tx.send(n).is_err() {
                        // The execution is over; keep draining so nothing blocks.
                    }
                }
            }
        }
        kept
    })
}

/// Kill a whole process group (the wrapper, unshare and whatever they started; in
/// the sandbox the pid namespace dies with its first process).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Every file under `root`, with its metadata and (when `content`) a digest of its
/// content. Without the content a change is still seen: writing a file changes its
/// ctime, which no program can set back (the sandbox cannot change the clock).
fn snapshot(root: &Path, content: bool) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let ft = meta.file_type();
        let (kind, digest) = if ft.is_symlink() {
            let target = std::fs::read_link(&path).unwrap_or_default();
            ('l', hash_bytes(target.as_os_str().as_encoded_bytes()))
        } else if ft.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                for e in entries.filter_map(Result::ok) {
                    stack.push(e.path());
                }
            }
            ('d', 0)
        } else if ft.is_file() {
            let digest = if content && !guarded(&path) {
                hash_bytes(&std::fs::read(&path).unwrap_or_default())
            } else {
                0
            };
            ('f', digest)
        } else {
            ('o', 0)
        };
        let atime = (kind == 'f' && guarded(&path)).then(|| (meta.atime(), meta.atime_nsec()));
        out.insert(
            path,
            Entry {
                kind,
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                size: if kind == 'd' { 0 } else { meta.size() },
                ino: meta.ino(),
                nlink: meta.nlink(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
                atime,
                digest,
            },
        );
    }
    out
}

/// Whether an entry is unchanged. A directory's times change when a file is
/// created and removed again (git's `index.lock`): only the entries that remain
/// count, so they are not compared. Digests are compared when both were taken.
fn same(a: &Entry, b: &Entry) -> bool {
    if a.kind == 'd' && b.kind == 'd' {
        return (a.mode, a.uid, a.gid, a.ino) == (b.mode, b.uid, b.gid, b.ino);
    }
    let digest = a.digest == b.digest || a.digest == 0 || b.digest == 0;
    digest
        && (
            a.kind, a.mode, a.uid, a.gid, a.size, a.ino, a.nlink, a.mtime, a.ctime,
        ) == (
            b.kind, b.mode, b.uid, b.gid, b.size, b.ino, b.nlink, b.mtime, b.ctime,
        )
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// Guarded files whose access time moved: something read them.
fn guarded_reads(root: &Path, before: &Snapshot, after: &Snapshot) -> Vec<String> {
    before
        .iter()
        .filter(|(p, b)| b.atime.is_some() && after.get(*p).is_some_and(|a| a.atime != b.atime))
        .map(|(p, _)| {
            p.strip_prefix(root)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.display().to_string())
        })
        .collect()
}

/// What differs between two snapshots, one line per file.
fn diff(root: &Path, before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let show = |p: &Path| {
        p.strip_prefix(root)
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.display().to_string())
    };
    let mut out = Vec::new();
    for (path, b) in before {
        match after.get(path) {
            None => out.push(format!("removed {}", show(path))),
            Some(a) if !same(a, b) => {
                let mut what = Vec::new();
                if a.kind != b.kind {
                    what.push("type");
                }
                if (a.digest != b.digest && a.digest != 0 && b.digest != 0) || a.size != b.size {
                    what.push("content");
                }
                if a.mode != b.mode {
                    what.push("mode");
                }
                if (a.uid, a.gid) != (b.uid, b.gid) {
                    what.push("owner");
                }
                if a.mtime != b.mtime {
                    what.push("mtime");
                }
                if a.ino != b.ino {
                    what.push("inode (replaced)");
                }
                if a.nlink != b.nlink {
                    what.push("link count");
                }
                if a.ctime != b.ctime {
                    what.push("ctime");
                }
                out.push(format!("modified {} ({})", show(path), what.join(", ")));
            }
            Some(_) => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            out.push(format!("created {}", show(path)));
        }
    }
    out
}

/// A seeded generator (splitmix64): the same seed gives the same candidates.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Every line of the labelled shell corpus (`corpus.tsv` and `corpus/*.tsv`), whatever
/// its label: only what the broker allows is run.
pub fn corpus_candidates() -> Vec<Candidate> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolgate-shell/tests");
    let mut files = vec![dir.join("corpus.tsv")];
    let mut area: Vec<PathBuf> = std::fs::read_dir(dir.join("corpus"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "tsv"))
                .collect()
        })
        .unwrap_or_default();
    area.sort();
    files.extend(area);
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file
            .strip_prefix(&dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(command) = line.splitn(4, '\t').nth(3) else {
                continue;
            };
            let command = command
                .replace('⏎', "\n")
                .replace('⇥', "\t")
                .replace('␍', "\r")
                .replace('␀', "\0");
            out.push(Candidate {
                form: Form::Text(command),
                cwd: None,
                origin: format!("{name}:{}", i + 1),
            });
        }
    }
    out
}

/// The programs of the grammar, with the flags they are tried with (the dangerous
/// ones included: the broker must refuse those) and what their arguments look like.
const PROGRAMS: &[(&str, &[&str])] = &[
    ("cat", &["-n", "-A", "-v"]),
    ("head", &["-n 3", "-c 10", "-5"]),
    ("tail", &["-n 3", "-c 10", "-1"]),
    ("ls", &["-la", "-R", "-1", "-d", "--color=never"]),
    ("wc", &["-l", "-c", "--files0-from=list.txt"]),
    ("grep", &["-rn", "-i", "-l", "-c", "-e x", "-f list.txt"]),
    (
        "rg",
        &[
            "-n",
            "-l",
            "--files",
            "--pre=sh",
            "--pre sh",
            "-z",
            "--search-zip",
            "--hostname-bin=sh",
            "-uu",
            "-g '*.rs'",
            "--pre-glob '*'",
        ],
    ),
    (
        "find",
        &[
            "-name '*.rs'",
            "-type f",
            "-delete",
            "-exec touch {} +",
            "-fprint out",
            "-fls out",
            "-ok touch {} ;",
            "-maxdepth 1",
            "-newer README.md",
            "-fprintf out %p",
        ],
    ),
    (
        "sed",
        &[
            "-n 1p",
            "-n '1,2p'",
            "-i 1d",
            "-n 'w out'",
            "-n 1e\\ touch\\ x",
            "-n '/a/p'",
            "--in-place=.bak 1d",
            "-n -e 1p",
            "-ni 1p",
            "-s -n 1p",
        ],
    ),
    (
        "sort",
        &[
            "-u",
            "-r",
            "-o out",
            "--output=out",
            "-ooout",
            "--outp=out",
            "--compress-program=sh",
            "-k1",
        ],
    ),
    ("uniq", &["-c", "-d"]),
    (
        "tree",
        &["-a", "-L 1", "-o out", "-R", "--output=out", "-fi"],
    ),
    ("file", &["-b", "-i", "-m x", "-C", "-z", "-f list.txt"]),
    (
        "date",
        &[
            "+%F",
            "-u",
            "-s 2020-01-01",
            "--set=2020-01-01",
            "0101000030",
            "-d @0",
            "-I",
        ],
    ),
    ("base64", &["-w 0", "-o out", "--output=out", "-d"]),
    (
        "printf",
        &["'%s\\n'", "'%n'", "-v PATH 0", "'x%n'", "'%s%n'"],
    ),
    ("echo", &["-n", "-e", "-E"]),
    ("stat", &["-c %s", "-L"]),
    ("du", &["-sh", "-a"]),
    ("tr", &["a-z A-Z", "-d x"]),
    ("cut", &["-d: -f1", "-c1-3"]),
    ("jq", &[".", "-r .name", "-n 'input'", "--arg x y ."]),
    ("test", &["-f", "-d", "-v PATH", "-e"]),
    ("expr", &["1 + 1", "length x"]),
    ("diff", &["-u", "-r", "--to-file=a.txt"]),
    ("tac", &[""]),
    ("nl", &["-ba"]),
    ("rev", &[""]),
    ("seq", &["3", "1 2 5"]),
    ("readlink", &["-f"]),
    ("realpath", &["-m"]),
    ("basename", &["-a"]),
    ("dirname", &[""]),
    ("cmp", &["-l"]),
    ("comm", &["-12"]),
    ("paste", &["-s"]),
    ("hostname", &["", "-f", "pwned", "-F list.txt"]),
    ("uname", &["-a"]),
    ("id", &["-u"]),
    ("pwd", &["-P"]),
    ("which", &["ls", "-a git"]),
    ("true", &[""]),
    ("column", &["-t"]),
    ("xxd", &["", "-r", "-l 16"]),
    ("od", &["-c"]),
    ("hexdump", &["-C"]),
    ("strings", &["-n 3"]),
    ("sha256sum", &["", "-c"]),
    ("md5sum", &[""]),
    ("cksum", &[""]),
    ("nproc", &[""]),
    ("ps", &["aux", "-ef"]),
    ("type", &["ls", "-a git"]),
    ("locale", &["", "-a"]),
    ("free", &["-m"]),
];

/// git subcommands with their flags, safe and dangerous.
const GIT: &[(&str, &[&str])] = &[
    (
        "status",
        &["", "--short", "-s", "--porcelain", "--ignored", "-uall"],
    ),
    (
        "log",
        &[
            "--oneline -3",
            "-p -1",
            "--stat -2",
            "--format=%H",
            "--format=%G?",
            "--show-signature -1",
            "--pretty=%GS",
            "--output=out -1",
            "--ext-diff -p -1",
            "-1 --textconv -p",
            "-p",
            "--graph --all",
        ],
    ),
    (
        "diff",
        &[
            "",
            "--stat",
            "HEAD~1",
            "--ext-diff",
            "--output=out",
            "--textconv",
            "--no-ext-diff",
            "--cached",
            "--no-index a.txt b.txt",
        ],
    ),
    (
        "show",
        &[
            "",
            "--stat",
            "HEAD:README.md",
            "--show-signature",
            "--format=%GK",
            "--ext-diff",
        ],
    ),
    (
        "branch",
        &["", "-a", "-v", "--list", "new", "-D x", "--show-current"],
    ),
    ("tag", &["", "-l", "new", "-n"]),
    ("remote", &["", "-v", "add x y", "get-url origin"]),
    ("blame", &["README.md", "-L1,2 README.md"]),
    (
        "grep",
        &[
            "-n TODO",
            "-O TODO",
            "--open-files-in-pager=sh TODO",
            "-e x",
        ],
    ),
    ("ls-files", &["", "-s", "--others"]),
    ("ls-tree", &["HEAD", "-r HEAD"]),
    ("rev-parse", &["HEAD", "--show-toplevel", "--git-dir"]),
    ("rev-list", &["--count HEAD", "--all"]),
    ("describe", &["--always", "--tags"]),
    ("reflog", &["", "expire --all", "delete HEAD@{0}", "show"]),
    ("shortlog", &["-sn HEAD"]),
    (
        "cat-file",
        &["-p HEAD", "-t HEAD", "--batch-all-objects --batch-check"],
    ),
    ("for-each-ref", &["", "--format=%(refname)"]),
    ("name-rev", &["HEAD"]),
    ("merge-base", &["HEAD HEAD~1"]),
    ("stash", &["list", "show", "", "push", "drop"]),
    ("worktree", &["list", "add x", "prune"]),
    (
        "config",
        &[
            "--get user.name",
            "--list",
            "-l",
            "user.name x",
            "--get-regexp core",
            "--unset core.bare",
            "core.pager",
        ],
    ),
    ("show-ref", &[""]),
    ("count-objects", &["-v"]),
    ("check-ignore", &["home", "-v tmp"]),
    ("cherry", &["HEAD"]),
    ("verify-commit", &["HEAD"]),
    ("fsck", &[""]),
    ("gc", &["--auto"]),
];

/// Arguments: project files, guarded files, globs, flag-named files, paths outside.
const ARGS: &[&str] = &[
    "README.md",
    "src/main.rs",
    "src",
    ".",
    "log.txt",
    "file.txt",
    "a.txt b.txt",
    "data.json",
    ".env",
    ".en?",
    ".env*",
    "secrets/key",
    "secret?/key",
    "secret[s]",
    "*",
    "*.md",
    "-- -rf",
    "./-i",
    "~sys/tcp/127.0.0.1/9",
    "~root",
    "~/.gitconfig",
    "~+/README.md",
    "$HOME",
    "../neighbour/file.txt",
    "evil.git/config",
    "0/.gitconfig",
    "'README.md'",
    "\"src/main.rs\"",
];

/// Redirections, harmless and not.
const REDIRECTIONS: &[&str] = &[
    ">/dev/null",
    "2>/dev/null",
    "2>&1",
    "<README.md",
    "<~sys/tcp/127.0.0.1/9 1<&0",
    "<~sys/udp/127.0.0.1/9 1<&0",
    "1<&0",
    "{fd}>x",
    "{PATH}<README.md",
    "{HOME}<README.md",
    ">&3",
    "3>x",
    "<>x",
    ">|x",
    ">out",
    ">>README.md",
    "<<<x",
    "&>/dev/null",
    "<&-",
    ">&-",
    "2>&-",
    "<.env",
    "</dev/stdin",
    "<$HOME/.gitconfig",
];

/// Wrappers put in front of a command.
const WRAPPERS: &[&str] = &[
    "env",
    "env -i",
    "env -u PATH",
    "env --ignore-environment",
    "env --unset=HOME",
    "env -- ",
    "timeout 5",
    "timeout -k 1 5",
    "nice",
    "nice -n 5",
    "command",
    "command -p",
    "builtin",
    "time",
    "nohup",
    "stdbuf -o0",
    "xargs",
    "xargs -0",
    "xargs --process-slot-var=PATH",
    "xargs -I{}",
    "sudo",
];

/// Commands that may change what later commands run (variables, directories).
const SETTERS: &[&str] = &[
    "printf %n PATH",
    "printf 'x%n' PATH",
    "printf '%s%n' '' PATH",
    "printf -v PATH 0",
    "true {PATH}<README.md",
    "true {HOME}<README.md",
    "echo ~sys >/dev/null",
    "LC_ALL=C",
    "cd 0",
    "cd 11",
    "cd evil.git",
    "cd sub",
    "cd hooked",
    "cd -",
    "cd ~",
    "printf %n HOME",
    "printf x%n HOME",
    "true {GIT_DIR}<README.md",
];

/// Commands that run a planted program when PATH, HOME or the directory changed.
const FOLLOWERS: &[&str] = &[
    "ls",
    "rg x",
    "tree",
    "git status",
    "git diff",
    "git log -1",
    "git lg",
    "git st",
    "cat README.md",
    "head -1 README.md",
    "wc -l README.md",
    "grep x README.md",
];

/// Whole commands where the bash and POSIX readings differ, or that reach another
/// user's home, another repository or an emptied environment.
pub const SPECIAL: &[&str] = &[
    "echo $'\\' ;touch pwned #'",
    "echo $'\\'' ;touch pwned #'",
    "sh -c \"echo \\$'\\\\' ;touch pwned #'\"",
    "dash -c \"echo \\$'\\\\' ;touch pwned #'\"",
    "/bin/sh -c \"echo \\$'\\\\' ;touch pwned #'\"",
    "echo $\"x\" ;touch pwned #\"",
    "echo ~sys >/dev/null; cat README.md <${_}/tcp/127.0.0.1/9 1<&0",
    "cat README.md <~sys/tcp/127.0.0.1/9 1<&0",
    "LC_ALL=zh_CN.GBK\necho '\u{20ac}\\';touch x #'",
    "LANG=C\nls",
    "git -C evil.git status",
    "git -C evil.git diff",
    "git -C ./evil.git/ log -1",
    "git --git-dir=evil.git status",
    "git -C sub status",
    "git -C hooked status",
    "git -C evil.git/refs status",
    "env -i bash -c tree",
    "env -u PATH bash -c tree",
    "env --ignore-environment bash -c 'rg x'",
    "env -i sh -c tree",
    "true {PATH}<README.md; ls",
    "true {PATH}>&-; ls",
    "printf %n PATH; ls",
    "printf -- %n PATH; ls",
    "printf '%*n' 1 PATH; ls",
    "printf %b%n '' PATH; ls",
    "date 0101000030",
    "date -- 0101000030",
    "date 01010000",
    "git log --show-signature -1",
    "git log --format=%G? -1",
    "git verify-commit HEAD",
    "cat .en?",
    "head -c 999 .env*",
    "cat secret?/key",
    "ls ~root",
    "cat ~+/README.md",
    "cat $HOME/.gitconfig",
];

/// Directories a `cd DIR &&` prefix or the call's `cwd` may name.
const DIRS: &[&str] = &[
    "",
    "src",
    "evil.git",
    "sub",
    "hooked",
    "0",
    "11",
    "home",
    ".husky",
    "evil.git/refs",
];

/// Quote a flag or word another way: `'-de'lete`, `\-o`, `"-"o`, `-'o'`.
fn requote(rng: &mut Rng, word: &str) -> String {
    if word.is_empty()
        || word.contains([
            '\'', '"', '\\', ' ', '$', '{', '<', '>', '&', '*', '?', '[', '~', ';',
        ])
    {
        return word.to_string();
    }
    let chars: Vec<char> = word.chars().collect();
    let cut = 1 + rng.below(chars.len().max(2) - 1).min(chars.len() - 1);
    let (a, b): (String, String) = (chars[..cut].iter().collect(), chars[cut..].iter().collect());
    match rng.below(5) {
        0 => format!("'{a}'{b}"),
        1 => format!("\\{word}"),
        2 => format!("\"{a}\"{b}"),
        3 => format!("{a}'{b}'"),
        _ => format!("{a}\"\"{b}"),
    }
}

/// Maybe requote some words of a flag string.
fn maybe_requote(rng: &mut Rng, flags: &str) -> String {
    if !rng.chance(25) {
        return flags.to_string();
    }
    flags
        .split(' ')
        .map(|w| {
            if rng.chance(50) {
                requote(rng, w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One simple command of the grammar.
fn simple(rng: &mut Rng) -> String {
    if rng.chance(30) {
        let (sub, flags) = rng.pick(GIT);
        let flag = rng.clone_pick(flags);
        let flag = maybe_requote(rng, flag);
        let pre = match rng.below(10) {
            0 => "-C evil.git ",
            1 => "-C sub ",
            2 => "-C hooked ",
            3 => "-C . ",
            4 => "--no-pager ",
            5 => "-p ",
            6 => "-c core.pager=cat ",
            _ => "",
        };
        return format!("git {pre}{sub} {flag}").trim_end().to_string();
    }
    let (prog, flags) = rng.pick(PROGRAMS);
    let flag = rng.clone_pick(flags);
    let flag = maybe_requote(rng, flag);
    let mut cmd = format!("{prog} {flag}");
    let args = rng.below(3);
    for _ in 0..args {
        cmd.push(' ');
        cmd.push_str(rng.pick::<&str>(ARGS));
    }
    cmd.trim_end().to_string()
}

impl Rng {
    fn clone_pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Lists a `for` loop walks (plain words, globs, substitutions).
const LOOP_WORDS: &[&str] = &[
    "*",
    ".*",
    "lib/*",
    "docs/*",
    "README.md .env",
    "$(find lib)",
    "$(find . -maxdepth 1 -name '.e*')",
    "$(git ls-files)",
    "$(ls -a)",
    "$(find lib -name '*.rs')",
];

/// Commands whose output becomes another command's words.
const PRODUCERS: &[&str] = &[
    "find lib",
    "find lib -name '*.rs'",
    "find . -maxdepth 1",
    "find lib -print0",
    "find lib -type f | sort",
    "find . -name '*.md' | grep -v x",
    "git ls-files",
    "git ls-files '*.rs'",
    "ls -a",
    "echo .env",
];

/// One generated candidate.
pub fn generate(rng: &mut Rng) -> Candidate {
    let mut cmd = if rng.chance(8) {
        rng.pick(SPECIAL).to_string()
    } else {
        simple(rng)
    };
    if rng.chance(25) {
        let redirection = rng.pick(REDIRECTIONS);
        cmd = match cmd.split_once(' ') {
            // Also in the middle: `ls &>/dev/null x` is `ls &` then `>/dev/null x` in dash.
            Some((program, rest)) if rng.chance(30) => format!("{program} {redirection} {rest}"),
            _ => format!("{cmd} {redirection}"),
        };
    }
    if rng.chance(20) {
        let w = rng.pick(WRAPPERS);
        cmd = if w.starts_with("xargs") {
            format!("echo README.md | {w} {cmd}")
        } else {
            format!("{w} {cmd}")
        };
    }
    match rng.below(12) {
        0 | 1 => cmd = format!("{}; {}", rng.pick(SETTERS), rng.pick(FOLLOWERS)),
        2 => cmd = format!("{} && {cmd}", rng.pick(SETTERS)),
        3 => cmd = format!("cd {} && {cmd}", rng.pick(&DIRS[1..])),
        4 => {
            cmd = format!(
                "{cmd} | {}",
                ["head -n 3", "wc -l", "sort", "grep x", "cat"][rng.below(5)]
            )
        }
        5 => cmd = format!("{cmd}; {}", rng.pick(FOLLOWERS)),
        // Words from a producer: a loop, a substitution, xargs, while-read.
        6 => cmd = format!("for f in {}; do {cmd} \"$f\"; done", rng.pick(LOOP_WORDS)),
        7 => cmd = format!("for f in {}; do {cmd} $f; done", rng.pick(LOOP_WORDS)),
        8 => cmd = format!("{} | xargs {cmd}", rng.pick(PRODUCERS)),
        9 => cmd = format!("{cmd} $({})", rng.pick(PRODUCERS)),
        10 => {
            cmd = format!(
                "{} | while read -r f; do {cmd} \"$f\"; done",
                rng.pick(PRODUCERS)
            )
        }
        _ => {}
    }
    let form = match rng.below(14) {
        0 => Form::Argv(vec!["bash".into(), "-lc".into(), cmd]),
        1 => Form::Argv(vec!["sh".into(), "-c".into(), cmd]),
        2 => Form::Argv(vec!["dash".into(), "-c".into(), cmd]),
        3 => Form::Argv(split_plain(&cmd)),
        4 => Form::Text(format!("bash -c {}", single_quote(&cmd))),
        5 => Form::Text(format!("sh -c {}", single_quote(&cmd))),
        _ => Form::Text(cmd),
    };
    let cwd = if rng.chance(15) {
        Some(rng.pick(DIRS).to_string())
    } else {
        None
    };
    Candidate {
        form,
        cwd,
        origin: "grammar".to_string(),
    }
}

/// Split on spaces (argv forms are taken as written, quotes included).
fn split_plain(cmd: &str) -> Vec<String> {
    cmd.split(' ')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

fn single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The special commands as they are, each once (with no `cwd`).
pub fn special() -> Vec<Candidate> {
    SPECIAL
        .iter()
        .map(|s| Candidate {
            origin: "special".to_string(),
            ..Candidate::text(s)
        })
        .collect()
}

/// `count` distinct generated candidates from `seed`.
pub fn generated(seed: u64, count: usize) -> Vec<Candidate> {
    let mut rng = Rng::new(seed);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut tries = 0;
    while out.len() < count && tries < count * 20 {
        tries += 1;
        let c = generate(&mut rng);
        if seen.insert((c.form.clone(), c.cwd.clone())) {
            out.push(c);
        }
    }
    out
}

/// Ask the real binary (plan mode, never asking) about every candidate; returns the
/// allowed ones and the number refused.
pub fn ask_broker(world: &World, candidates: &[Candidate]) -> (Vec<Candidate>, usize) {
    let mut allowed = Vec::new();
    let mut refused = 0;
    for chunk in candidates.chunks(400) {
        let mut broker = Broker::start(
            &world.proj,
            &[
                "--mode".into(),
                "plan".into(),
                "--on-ask".into(),
                "deny".into(),
                "--project-root".into(),
                world.proj.display().to_string(),
                "--permission".into(),
                r#"{"read":{"secrets/**":"deny"}}"#.into(),
            ],
            &[("HOME".into(), world.proj.join("home").display().to_string())],
        );
        let mut ids = HashMap::new();
        for (i, c) in chunk.iter().enumerate() {
            let id = format!("c{i}");
            let (tool, command) = match &c.form {
                Form::Text(t) => ("Bash", json!(t)),
                Form::Argv(a) => ("shell", json!(a)),
            };
            let mut frame = json!({
                "type": "tool_call",
                "sessionID": format!("s{i}"),
                "callID": id,
                "tool": tool,
                "input": {"command": command},
            });
            if let Some(cwd) = &c.cwd {
                frame["cwd"] = json!(if cwd.is_empty() {
                    world.proj.clone()
                } else {
                    world.proj.join(cwd)
                });
            }
            broker.send(&frame.to_string());
            ids.insert(id, c);
        }
        let (_, lines, stderr) = broker.finish();
        let mut decided = 0;
        for line in lines {
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["type"] != "decision" {
                continue;
            }
            decided += 1;
            let c = ids[v["callID"].as_str().unwrap()];
            if v["decision"] == "allow" {
                allowed.push(c.clone());
            } else {
                refused += 1;
            }
        }
        assert_eq!(
            decided,
            chunk.len(),
            "every call gets one decision; stderr:\n{stderr}"
        );
    }
    (allowed, refused)
}

/// The totals of a run.
#[derive(Debug, Default)]
pub struct Tally {
    pub candidates: usize,
    pub allowed: usize,
    pub refused: usize,
    pub skipped: usize,
    pub executions: BTreeMap<&'static str, usize>,
    pub timeouts: usize,
    pub violations: Vec<String>,
    /// How often each kind of violation was seen (the first violation of an
    /// execution, up to its first parenthesis).
    pub kinds: BTreeMap<String, usize>,
    /// Executions that read a guarded file (reported, not failed: recursive searches
    /// such as `grep -r x .` read `.env` by design today).
    pub guarded_reads: Vec<String>,
}

impl Tally {
    pub fn executed(&self) -> usize {
        self.executions.values().sum()
    }

    /// The report line: easy to quote.
    pub fn line(&self, seed: u64, sandbox: Sandbox) -> String {
        let per: Vec<String> = self
            .executions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "oracle (seed {seed}): {} executions ({}) of {} allowed commands; broker allowed {} and refused {} of {} candidates; {} timeouts; {} skipped; {} violations; {} guarded reads; sandbox: {}",
            self.executed(),
            per.join(", "),
            self.allowed - self.skipped,
            self.allowed,
            self.refused,
            self.candidates,
            self.timeouts,
            self.skipped,
            self.violations.len(),
            self.guarded_reads.len(),
            match sandbox {
                Sandbox::Full => "user+network+mount+pid+uts namespaces (unshare -rnmpfu)",
                Sandbox::None => "NONE (unshare not permitted; network-like commands skipped)",
            }
        )
    }
}

impl Tally {
    /// Add another tally to this one.
    pub fn add(&mut self, more: Tally) {
        self.candidates += more.candidates;
        self.allowed += more.allowed;
        self.refused += more.refused;
        self.skipped += more.skipped;
        self.timeouts += more.timeouts;
        for (k, v) in more.executions {
            *self.executions.entry(k).or_default() += v;
        }
        for (k, v) in more.kinds {
            *self.kinds.entry(k).or_default() += v;
        }
        self.violations.extend(more.violations);
        self.guarded_reads.extend(more.guarded_reads);
    }

    /// The kinds of violation, most frequent first.
    pub fn kinds_report(&self) -> String {
        let mut kinds: Vec<(&String, &usize)> = self.kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds
            .iter()
            .map(|(k, v)| format!("  {v:6}  {k}\n"))
            .collect()
    }
}

/// Execute every allowed candidate under each of its runners, adding to `tally`.
pub fn run_allowed(world: &mut World, allowed: &[Candidate], tally: &mut Tally) {
    for c in allowed {
        if world.sandbox == Sandbox::None && c.may_use_network() {
            tally.skipped += 1;
            continue;
        }
        for &runner in c.runners() {
            let outcome = world.execute(c, runner);
            *tally.executions.entry(runner.name()).or_default() += 1;
            if !outcome.guarded_reads.is_empty() {
                let msg = format!(
                    "{} under {}: {}",
                    c.describe(),
                    runner.name(),
                    outcome.guarded_reads.join(", ")
                );
                println!("GUARDED READ {msg}");
                tally.guarded_reads.push(msg);
            }
            if outcome.timed_out {
                tally.timeouts += 1;
                println!("timeout: {} under {}", c.describe(), runner.name());
            }
            if !outcome.violations.is_empty() {
                let mut msg = format!("{} under {}:", c.describe(), runner.name());
                for v in &outcome.violations {
                    let _ = write!(msg, "\n    {v}");
                }
                let err = outcome.stderr.trim();
                if !err.is_empty() {
                    let err: String = err.chars().take(300).collect();
                    let _ = write!(msg, "\n    stderr: {}", err.replace('\n', "\n            "));
                }
                println!("VIOLATION {msg}");
                tally.violations.push(msg);
                let kind = outcome.violations[0]
                    .split(" (")
                    .next()
                    .unwrap_or_default()
                    .to_string();
                *tally.kinds.entry(kind).or_default() += 1;
            }
        }
    }
}

/// A work directory for one test under cargo's target tmp, unless that lies
/// under `/tmp`, `/var/tmp` or `/dev/shm` (a checkout in /tmp): those are
/// replaced by empty tmpfs mounts inside the sandbox, so the work directory
/// goes under `$HOME/.cache/toolgate-oracle` then.
pub fn work_dir(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let resolved = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
    let scratch = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .any(|d| resolved.starts_with(d));
    let base = match std::env::var_os("HOME") {
        Some(home) if scratch => {
            let base = Path::new(&home).join(".cache").join("toolgate-oracle");
            std::fs::create_dir_all(&base).unwrap();
            // Work directories are kept after a run for inspection; outside
            // the target directory, those of runs that have ended are removed.
            for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
                let file_name = entry.file_name();
                let name = file_name.to_string_lossy();
                let pid = name
                    .strip_prefix("oracle-")
                    .and_then(|rest| rest.split('-').next());
                if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
            base
        }
        _ => target.to_path_buf(),
    };
    base.join(format!("oracle-{}-{name}", std::process::id()))
}

/// Print once which sandbox is used.
pub fn say_sandbox(sandbox: Sandbox) {
    match sandbox {
        Sandbox::Full => println!(
            "oracle: commands run in fresh user, network, mount, pid and UTS namespaces (unshare -rnmpfu)"
        ),
        Sandbox::None => println!(
            "oracle: WARNING: this machine does not allow unshare; commands run without a network namespace, and those that look like network use are skipped"
        ),
    }
}
