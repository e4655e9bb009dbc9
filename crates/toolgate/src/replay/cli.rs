//! `toolgate replay FILE…`: the files found, read, replayed and reported.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolgate_policy::Policy;
use toolgate_protocol::ServerFrame;

use super::report::{self, Answers, Comparison, Summary};
use super::{run, Format};

/// What to do with the replays.
#[derive(Debug, Default)]
pub struct Options {
    /// The format of every file; detected per file when `None`.
    pub from: Option<Format>,
    /// Print the summary table instead of the frames.
    pub summary: bool,
    /// Compare with the decisions the files hold; exit 1 on a difference.
    pub check: bool,
    /// Replay under two policy files and report the calls answered
    /// differently; exit 1 when there are some.
    pub compare: Option<(PathBuf, PathBuf)>,
    /// The mode given on the command line: it holds for the whole replay,
    /// the recorded modes set aside.
    pub mode: Option<toolgate_policy::Mode>,
    /// Whether the project root was given (`--project-root`): else an
    /// agent's recording is judged with the directory it recorded as the
    /// root.
    pub root_given: bool,
}

/// Every file to replay: the files named (a pipe too: `<(zcat x.gz)`),
/// and the regular `*.jsonl` files under the directories named (sorted,
/// recursively; links to files followed, links to directories not), with
/// a warning for each `*.jsonl` found there that is not a regular file (a
/// FIFO would block the replay forever). `Err` names a path that cannot be
/// read.
pub fn files(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<String>), String> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found, &mut warnings)?;
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok((out, warnings))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, warnings: &mut Vec<String>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| format!("cannot read {}: {err}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|err| format!("cannot read {}: {err}", dir.display()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        if kind.is_dir() {
            walk(&path, out, warnings)?;
        } else if path.extension().is_some_and(|ext| ext == "jsonl") {
            // What the name leads to (a link is followed): only a regular
            // file is read; a FIFO or a device would block or never end.
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_file() => out.push(path),
                Ok(meta) => warnings.push(format!(
                    "skipped {}: not a regular file ({})",
                    path.display(),
                    kind_name(&meta.file_type())
                )),
                Err(err) => warnings.push(format!("skipped {}: {err}", path.display())),
            }
        }
    }
    Ok(())
}

/// What a file that is not a regular one is, for a warning.
fn kind_name(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// A progress line on stderr when it is a terminal.
struct Progress {
    on: bool,
    calls: usize,
    files: usize,
}

impl Progress {
    fn tick(&mut self, file: usize) {
        self.calls += 1;
        if self.on && self.calls.is_multiple_of(65_536) {
            crate::display::progress(&format!(
                "\rtoolgate replay: {} calls, file {} of {}",
                self.calls, file, self.files
            ));
        }
    }

    fn done(&self) {
        if self.on && self.calls >= 65_536 {
            crate::display::progress(&format!(
                "\rtoolgate replay: {} calls in {} file{}          \n",
                self.calls,
                self.files,
                if self.files == 1 { "" } else { "s" }
            ));
        }
    }
}

/// A policy built, and the layers it came from.
type Built = (Arc<Policy>, Vec<String>);

/// The policy (and the layers it came from) for the flags, with another
/// policy file when given, and another project root when given; `None`
/// when it cannot be built (said on stderr).
pub type PolicyFor<'a> = dyn Fn(Option<&Path>, Option<&Path>) -> Option<Built> + 'a;

/// Replay `paths` under the policy `policy(None)` (or, with `--compare`,
/// `policy(Some(A))` and `policy(Some(B))`). The exit code: 0, 1 for
/// differences (`--check`, `--compare`), 2 for input that cannot be used.
pub fn main(paths: &[PathBuf], options: &Options, policy: &PolicyFor<'_>) -> u8 {
    let files = match files(paths) {
        Ok((files, warnings)) => {
            for warning in &warnings {
                crate::say!("toolgate replay: {warning}");
            }
            if files.is_empty() {
                crate::say!("toolgate replay: no .jsonl files to replay");
                return 2;
            }
            files
        }
        Err(err) => {
            crate::say!("toolgate replay: {err}");
            return 2;
        }
    };
    // The policies for a project root (`None`: the flags' own).
    let policies_for = |root: Option<&Path>| match &options.compare {
        None => policy(None, root).map(|policy| vec![policy]),
        Some((a, b)) => match (policy(Some(a), root), policy(Some(b), root)) {
            (Some(a), Some(b)) => Some(vec![a, b]),
            _ => None,
        },
    };
    let Some(flag_policies) = policies_for(None) else {
        return 2;
    };
    let mut rooted: std::collections::HashMap<String, Vec<Built>> =
        std::collections::HashMap::new();
    let mut roots: Vec<String> = Vec::new();
    let mut notes = super::Notes::default();
    let print_frames = !options.summary && !options.check && options.compare.is_none();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut progress = Progress {
        on: std::io::stderr().is_terminal(),
        calls: 0,
        files: files.len(),
    };
    let mut summary = Summary::default();
    let mut comparison = Comparison::default();
    let mut differences = Vec::new();
    let mut failed = None;
    // Every file read first: a Claude Code transcript and its sub-agents'
    // transcripts (files of the same session, the main one first in sorted
    // order) are replayed as one recording, through one broker.
    let mut recordings: Vec<(String, super::record::Recording, Format)> = Vec::new();
    for file in &files {
        let name = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(err) => {
                crate::say!("toolgate replay: cannot read {name}: {err}");
                return 2;
            }
        };
        if text
            .lines()
            .map(str::trim)
            .all(|line| line.is_empty() || line.starts_with('#'))
        {
            crate::say!("toolgate replay: warning: {name} holds nothing to replay; skipped");
            continue;
        }
        let Some(format) = options.from.or_else(|| Format::detect(&text)) else {
            crate::say!("toolgate replay: {name}: not a recording toolgate can read (give --from)");
            return 2;
        };
        let recording = format.read(&text, &name);
        for warning in &recording.warnings {
            crate::say!("toolgate replay: warning: {warning}");
        }
        if let Some((_, last, Format::Claude)) = recordings.last_mut() {
            if format == Format::Claude
                && recording.root_session().is_some()
                && recording.root_session() == last.root_session()
            {
                last.merge(recording);
                continue;
            }
        }
        recordings.push((name, recording, format));
    }
    progress.files = recordings.len();
    for (index, (name, recording, format)) in recordings.iter().enumerate() {
        let name = name.clone();
        // An agent's recording is judged where the agent ran: its recorded
        // working directory is the project root, unless one was given.
        let recorded_root = match (format, &recording.cwd) {
            (Format::Claude | Format::Codex, Some(cwd)) if !options.root_given => Some(cwd),
            _ => None,
        };
        let policies = match recorded_root {
            None => &flag_policies,
            Some(root) => {
                if !rooted.contains_key(root) {
                    let Some(built) = policies_for(Some(Path::new(root))) else {
                        return 2;
                    };
                    rooted.insert(root.clone(), built);
                    roots.push(root.clone());
                }
                match rooted.get(root) {
                    Some(policies) => policies,
                    None => &flag_policies,
                }
            }
        };
        let calls = if print_frames {
            Default::default()
        } else {
            report::calls(recording)
        };
        let mut answers: Vec<Answers> = Vec::new();
        for (policy, sources) in policies {
            let mut seen = Answers::default();
            let mut sink = |frame: &ServerFrame| {
                if let ServerFrame::Decision(_) = frame {
                    progress.tick(index + 1);
                }
                if !print_frames {
                    seen.see(frame);
                }
                if print_frames && failed.is_none() {
                    let written = serde_json::to_writer(&mut out, frame)
                        .map_err(std::io::Error::other)
                        .and_then(|()| out.write_all(b"\n"));
                    if let Err(err) = written {
                        failed = Some(err);
                    }
                }
            };
            let replayed = run(policy.clone(), sources, recording, options.mode, &mut sink);
            if answers.is_empty() {
                notes.add(&replayed);
            }
            answers.push(seen);
        }
        if let Some(err) = failed.take() {
            crate::say!("toolgate replay: cannot write the frames: {err}");
            return 2;
        }
        match answers.as_slice() {
            [a, b] => comparison.add(&calls, a, b),
            [answers] => {
                summary.add(&calls, answers);
                if options.check {
                    differences.extend(report::differences(recording, &calls, answers, &name));
                }
            }
            _ => {}
        }
    }
    progress.done();
    let mut code = 0;
    let mut text = String::new();
    if options.summary {
        text.push_str(&summary.render());
        let read_from = recordings
            .iter()
            .fold((0, 0), |(fields, text), (_, recording, _)| {
                (
                    fields + recording.read_from.fields,
                    text + recording.read_from.text,
                )
            });
        text.push_str(&report::replay_notes(
            &notes,
            options.mode,
            &roots,
            read_from,
        ));
    }
    if options.check {
        if differences.is_empty() {
            crate::say!("toolgate replay: every recorded decision was replayed alike");
        } else {
            code = 1;
            for line in &differences {
                text.push_str(line);
                text.push('\n');
            }
            crate::say!(
                "toolgate replay: {} {} from the recording",
                differences.len(),
                if differences.len() == 1 {
                    "decision differs"
                } else {
                    "decisions differ"
                }
            );
        }
    }
    if let Some((a, b)) = &options.compare {
        text.push_str(&comparison.render(&a.display().to_string(), &b.display().to_string()));
        if comparison.differs() {
            code = 1;
        }
    }
    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        crate::say!("toolgate replay: cannot write: {err}");
        return 2;
    }
    code
}
