//! `toolgate replay FILE…`: the files found, looked at, then streamed
//! through the replays and reported.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolgate_policy::Policy;
use toolgate_protocol::ServerFrame;

use super::driver::Replay;
use super::read::{self, Step, Unread};
use super::record::ReadFrom;
use super::report::{self, Tally};
use super::source::{self, Look, Source};
use super::Format;

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

/// Where the frames the replays write go: the output (the frames, for a
/// plain replay), the reports, the progress line.
struct Outlet<'a> {
    out: std::io::BufWriter<std::io::StdoutLock<'a>>,
    /// One frame's line, as `serve` writes it
    /// ([`toolgate_protocol::write_line`]), then written whole to `out`.
    line: Vec<u8>,
    print_frames: bool,
    failed: Option<std::io::Error>,
    tally: Tally,
    progress: Progress,
    /// Which file (or session) is replayed, for the progress line.
    file: usize,
}

impl Outlet<'_> {
    fn frame(&mut self, side: usize, frame: &ServerFrame) {
        if let ServerFrame::Decision(_) = frame {
            self.progress.tick(self.file);
        }
        if !self.print_frames {
            self.tally.see(side, frame);
        } else if self.failed.is_none() {
            self.line.clear();
            let written = toolgate_protocol::write_line(&mut self.line, frame)
                .map_err(std::io::Error::other)
                .and_then(|()| self.out.write_all(&self.line));
            if let Err(err) = written {
                self.failed = Some(err);
            }
        }
    }
}

/// Every file looked at, grouped into recordings: a Claude Code transcript
/// and its sub-agents' transcripts (files of the same session, the main
/// one first in sorted order) are one recording, replayed through one
/// broker. `Err` is the exit code, said on stderr.
fn recordings(files: &[PathBuf], from: Option<Format>) -> Result<Vec<Vec<Source>>, u8> {
    let mut groups: Vec<Vec<Source>> = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let source = match source::look(file, from) {
            Ok(Look::Replay(source)) => source,
            Ok(Look::Empty) => {
                crate::say!("toolgate replay: warning: {name} holds nothing to replay; skipped");
                continue;
            }
            Ok(Look::Unknown) => {
                crate::say!(
                    "toolgate replay: {name}: not a recording toolgate can read (give --from)"
                );
                return Err(2);
            }
            Err(err) => {
                crate::say!("toolgate replay: cannot read {name}: {err}");
                return Err(2);
            }
        };
        if let Some(last) = groups.last_mut().and_then(|group| group.first()) {
            if last.format == Format::Claude
                && source.format == Format::Claude
                && source.session.is_some()
                && source.session == last.session
            {
                if let Some(group) = groups.last_mut() {
                    group.push(source);
                }
                continue;
            }
        }
        groups.push(vec![source]);
    }
    Ok(groups)
}

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
    // Every file looked at first (its opening lines only): what cannot be
    // read stops the replay before anything is written.
    let groups = match recordings(&files, options.from) {
        Ok(groups) => groups,
        Err(code) => return code,
    };
    let mut rooted: HashMap<String, Vec<Built>> = HashMap::new();
    let mut roots: Vec<String> = Vec::new();
    let mut notes = super::Notes::default();
    let mut read_from = (0, 0);
    let print_frames = !options.summary && !options.check && options.compare.is_none();
    let stdout = std::io::stdout();
    let mut outlet = Outlet {
        out: std::io::BufWriter::with_capacity(1 << 16, stdout.lock()),
        line: Vec::with_capacity(512),
        print_frames,
        failed: None,
        tally: Tally::new(if options.compare.is_some() { 2 } else { 1 }, options.check),
        progress: Progress {
            on: std::io::stderr().is_terminal(),
            calls: 0,
            files: groups.len(),
        },
        file: 0,
    };
    for (index, mut group) in groups.into_iter().enumerate() {
        let Some(first) = group.first() else {
            continue;
        };
        let name = first.name.clone();
        let format = first.format;
        // An agent's recording is judged where the agent ran: its recorded
        // working directory is the project root, unless one was given.
        let recorded_root = match format {
            Format::Claude if !options.root_given => group.iter().find_map(|s| s.cwd.clone()),
            _ => None,
        };
        let policies = match recorded_root {
            None => &flag_policies,
            Some(root) => {
                if !rooted.contains_key(&root) {
                    let Some(built) = policies_for(Some(Path::new(&root))) else {
                        return 2;
                    };
                    rooted.insert(root.clone(), built);
                    roots.push(root.clone());
                }
                match rooted.get(&root) {
                    Some(policies) => policies,
                    None => &flag_policies,
                }
            }
        };
        outlet.file = index + 1;
        outlet.tally.begin(&name);
        let replayed = match replay(&mut group, format, policies, options.mode, &mut outlet) {
            Ok(replayed) => replayed,
            Err(code) => return code,
        };
        notes.add(&replayed.0);
        read_from.0 += replayed.1.fields;
        read_from.1 += replayed.1.text;
        outlet.tally.end();
        if let Some(err) = outlet.failed.take() {
            crate::say!("toolgate replay: cannot write the frames: {err}");
            return 2;
        }
    }
    outlet.progress.done();
    let mut code = 0;
    let mut text = String::new();
    if options.summary {
        text.push_str(&outlet.tally.summary.render());
        text.push_str(&report::replay_notes(
            &notes,
            options.mode,
            &roots,
            read_from,
        ));
    }
    if options.check {
        let differences = outlet.tally.differences();
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
        let comparison = &outlet.tally.comparison;
        text.push_str(&comparison.render(&a.display().to_string(), &b.display().to_string()));
        if comparison.differs() {
            code = 1;
        }
    }
    let out = &mut outlet.out;
    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        crate::say!("toolgate replay: cannot write: {err}");
        return 2;
    }
    code
}

/// Replay one recording (a file, or a Claude Code session's files) under
/// each of `policies` side by side, the lines read once (on a thread of
/// their own, see [`super::read`]): the notes of the first replay and
/// where the outcomes were read from. `Err` is the exit code (a file that
/// could not be read to the end, said on stderr).
fn replay(
    group: &mut [Source],
    format: Format,
    policies: &[Built],
    mode: Option<toolgate_policy::Mode>,
    outlet: &mut Outlet<'_>,
) -> Result<(super::Notes, ReadFrom), u8> {
    let mut replays: Vec<Replay> = Vec::new();
    for (side, (policy, sources)) in policies.iter().enumerate() {
        let replay = Replay::new(policy.clone(), sources, mode, &mut |frame: &ServerFrame| {
            outlet.frame(side, frame)
        });
        replays.push(replay);
    }
    let judged: Vec<Arc<Policy>> = policies.iter().map(|(policy, _)| policy.clone()).collect();
    let (to, batches) = std::sync::mpsc::sync_channel::<Vec<Step>>(read::BATCHES);
    let (back, returned) = std::sync::mpsc::channel::<Vec<Step>>();
    let first = group
        .first()
        .map(|source| source.name.clone())
        .unwrap_or_default();
    let in_flight = read::InFlight::default();
    let read = std::thread::scope(|scope| {
        let judged = &judged;
        let in_flight = &in_flight;
        let reading = std::thread::Builder::new()
            .name("replay-read".to_string())
            .spawn_scoped(scope, move || {
                read::read(group, format, judged, to, returned, in_flight)
            });
        let reading = match reading {
            Ok(reading) => reading,
            Err(err) => {
                return Err(Unread {
                    name: first,
                    error: format!("could not start a thread to read it: {err}"),
                });
            }
        };
        for mut batch in &batches {
            in_flight.taken();
            // The calls of the batch were prepared before it was sent:
            // what the disk's link answers they used said is confirmed
            // once (one look at each inotify queue), as `serve` does.
            let epoch = crate::disk::globs::confirm();
            for step in batch.iter_mut() {
                apply(step, epoch, &mut replays, outlet);
            }
            // Back to the reading thread, which frees what it allocated
            // (see `read::Prepared`). It may be done and gone: then the
            // batch is freed here.
            let _ = back.send(batch);
        }
        match reading.join() {
            Ok(read) => read,
            Err(_) => Err(Unread {
                name: first,
                error: "the thread reading it failed".to_string(),
            }),
        }
    });
    let read_from = match read {
        Ok(read_from) => read_from,
        Err(Unread { name, error }) => {
            crate::say!("toolgate replay: cannot read {name}: {error}");
            return Err(2);
        }
    };
    let mut notes = None;
    for (side, replay) in replays.into_iter().enumerate() {
        let replayed = replay.finish(&mut |frame: &ServerFrame| outlet.frame(side, frame));
        notes.get_or_insert(replayed);
    }
    Ok((notes.unwrap_or_default(), read_from))
}

/// Do one step the reading thread found, in its order: a frame fed to
/// every replay, what the recording says of a call given to them, the
/// reports told.
fn apply(step: &mut Step, epoch: u64, replays: &mut [Replay], outlet: &mut Outlet<'_>) {
    match step {
        Step::Line => outlet.tally.line(),
        Step::Feed {
            frame,
            done,
            decoded,
        } => {
            let (frame, decoded) = (&*frame, &*decoded);
            if !outlet.print_frames && frame.kind() == Some("tool_call") {
                outlet.tally.fed(frame);
            }
            let call = match frame {
                super::event::Frame::Line { call, .. } => call.as_deref(),
                super::event::Frame::Built(value) => {
                    value.get("callID").and_then(serde_json::Value::as_str)
                }
            };
            for (side, replay) in replays.iter_mut().enumerate() {
                let decoded = decoded
                    .get(side)
                    .and_then(Option::as_ref)
                    .zip(call)
                    .and_then(|(prepared, call)| prepared.take(call))
                    .map(|mut d| {
                        d.confirm_prepared(epoch);
                        d
                    });
                replay.frame(frame, decoded, &mut |out: &ServerFrame| {
                    outlet.frame(side, out)
                });
                if let Some(key) = done {
                    replay.fed(key);
                }
            }
        }
        Step::Ahead(key, outcome) => {
            for replay in replays.iter_mut() {
                replay.ahead(key.clone(), outcome.clone());
            }
        }
        Step::Late(key, outcome) => {
            for (side, replay) in replays.iter_mut().enumerate() {
                replay.late(key, outcome, &mut |frame: &ServerFrame| {
                    outlet.frame(side, frame)
                });
            }
        }
        Step::Time(key, time) => {
            for replay in replays.iter_mut() {
                replay.time(key.clone(), *time);
            }
        }
        Step::Recorded(key, verdict, reason, ahead) => {
            outlet.tally.recorded(
                std::mem::take(key),
                std::mem::take(verdict),
                std::mem::take(reason),
                *ahead,
            );
        }
        Step::Question(id, key) => {
            for replay in replays.iter_mut() {
                replay.question(id.clone(), key.clone());
            }
        }
        Step::Warning(warning) => crate::say!("toolgate replay: warning: {warning}"),
    }
}
