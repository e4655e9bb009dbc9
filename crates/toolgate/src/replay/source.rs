//! The files of a replay, read line by line: first a look at the opening
//! lines of each (its format, and for a Claude Code transcript the session
//! it belongs to and the directory it recorded), then, file after file,
//! every line in turn into one reused buffer, never the whole file.
//!
//! A regular file is looked at, closed, and opened again to be replayed. A
//! pipe named on the command line (`<(zcat old.jsonl.gz)`) cannot be read
//! twice: the lines looked at are kept and replayed first, then the rest
//! is read from where the look stopped.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{claude, Format};

/// How many lines of a pipe are kept while looking for the directory a
/// Claude Code transcript recorded: a transcript says it in its first
/// records; past this, it is taken to say none.
const PEEK: usize = 65_536;

/// One file to replay.
#[derive(Debug)]
pub struct Source {
    /// Its path.
    pub path: PathBuf,
    /// Its name, in messages.
    pub name: String,
    /// Its format.
    pub format: Format,
    /// For a Claude Code transcript: the session it is about (a
    /// sub-agent's, its parent's).
    pub session: Option<String>,
    /// For a Claude Code transcript: the working directory it recorded
    /// first.
    pub cwd: Option<String>,
    /// For a pipe: the lines read while looking, and the rest to read.
    kept: Option<(Vec<String>, BufReader<File>)>,
}

/// What a look at a file found.
pub enum Look {
    /// A file to replay.
    Replay(Source),
    /// Nothing but blank lines and comments.
    Empty,
    /// No line says what it is.
    Unknown,
}

/// One line of `reader` into `buf` (without its `\n` or `\r\n`): `false`
/// at the end. `Err` for what cannot be read (a line that is not UTF-8).
fn next_line<'b>(
    reader: &mut impl BufRead,
    buf: &'b mut Vec<u8>,
) -> Result<Option<&'b str>, String> {
    buf.clear();
    let read = reader
        .read_until(b'\n', buf)
        .map_err(|err| err.to_string())?;
    if read == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    std::str::from_utf8(buf)
        .map(Some)
        .map_err(|_| "stream did not contain valid UTF-8".to_string())
}

/// Look at the opening lines of `path`: its format (`from`, else the first
/// line that says), and for a Claude Code transcript its session and
/// recorded directory. `Err` says why it cannot be read.
pub fn look(path: &Path, from: Option<Format>) -> Result<Look, String> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|err| err.to_string())?;
    let regular = file.metadata().map(|meta| meta.is_file()).unwrap_or(false);
    let mut reader = BufReader::new(file);
    let mut kept: Vec<String> = Vec::new();
    let mut buf = Vec::new();
    let mut format = from;
    let mut something = false;
    let mut claude_found: (Option<String>, Option<String>) = (None, None);
    let mut looked = 0usize;
    loop {
        let done = something
            && match format {
                None => false,
                Some(Format::Claude) => {
                    (claude_found.0.is_some() && claude_found.1.is_some())
                        || (!regular && looked >= PEEK)
                }
                Some(_) => true,
            };
        if done {
            break;
        }
        let Some(line) = next_line(&mut reader, &mut buf)? else {
            break;
        };
        looked += 1;
        if !regular {
            kept.push(line.to_string());
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        something = true;
        let claude_wanted = matches!(format, None | Some(Format::Claude));
        if format.is_some() && !claude_wanted {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(trimmed) else {
            continue;
        };
        if format.is_none() {
            format = Format::detect(&value);
        }
        if format == Some(Format::Claude) {
            claude::peek(&value, &mut claude_found);
        }
    }
    if !something {
        return Ok(Look::Empty);
    }
    let Some(format) = format else {
        return Ok(Look::Unknown);
    };
    Ok(Look::Replay(Source {
        path: path.to_path_buf(),
        name,
        format,
        session: claude_found.0,
        cwd: claude_found.1,
        kept: (!regular).then_some((kept, reader)),
    }))
}

impl Source {
    /// Every line of the file in turn, with its 1-based number, to `each`.
    /// `Err` says why the file could not be read (to the end).
    pub fn lines(&mut self, mut each: impl FnMut(usize, &str)) -> Result<(), String> {
        let mut buf = Vec::new();
        let mut number = 0;
        let mut reader = match self.kept.take() {
            Some((kept, reader)) => {
                for line in &kept {
                    number += 1;
                    each(number, line);
                }
                reader
            }
            None => BufReader::with_capacity(
                1 << 16,
                File::open(&self.path).map_err(|err| err.to_string())?,
            ),
        };
        while let Some(line) = next_line(&mut reader, &mut buf)? {
            number += 1;
            each(number, line);
        }
        Ok(())
    }
}
