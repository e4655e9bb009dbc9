//! The option model against the installed programs: for every block of
//! `programs.txt` and every name of the block that is installed, each option
//! that `NAME --help` shows (`-x` and `--long` at the start of a help line, as
//! GNU, util-linux, clap and tree format them) must be listed in the block,
//! or named in a `# unlisted:` comment of the block (left out on purpose).
//! Programs that are not installed are skipped and named; a machine with
//! fewer than 40 of them fails, so a bare one is noticed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)] // tests may panic and report

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAMS: &str = include_str!("../../programs.txt");

/// How long `--help` may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Fewer programs checked than this fails the test.
const MIN_CHECKED: usize = 40;

/// Help lines that look like options but are not: (program, token, why).
const NOT_OPTIONS: &[(&str, &str, &str)] = &[(
    "cut",
    "-M",
    "a range of the LIST description (`-M`: from the first to the M'th)",
)];

/// One block of the data, as far as spellings go.
struct Block {
    names: Vec<String>,
    short: BTreeSet<char>,
    long: BTreeSet<String>,
    /// Spellings named in `# unlisted:` comments.
    unlisted: BTreeSet<String>,
}

/// Split the data at the lines starting with `[` and read each block's
/// spellings (the words of an option line before its value, flags and effect).
fn blocks(data: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for line in data.lines() {
        if let Some(head) = line.strip_prefix('[') {
            let names = head.trim_end().trim_end_matches(']');
            out.push(Block {
                names: names.split_whitespace().map(str::to_string).collect(),
                short: BTreeSet::new(),
                long: BTreeSet::new(),
                unlisted: BTreeSet::new(),
            });
            continue;
        }
        let Some(block) = out.last_mut() else {
            continue;
        };
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("# unlisted:") {
            block.unlisted.extend(
                rest.split_whitespace()
                    .take_while(|w| *w != "--")
                    .map(str::to_string),
            );
            continue;
        }
        let code = line.split(" #").next().unwrap_or_default().trim();
        if !code.starts_with('-') {
            continue;
        }
        for word in code.split_whitespace() {
            let word = word.trim_end_matches(',');
            if let Some(long) = word.strip_prefix("--") {
                block.long.insert(long.to_string());
            } else if let Some(short) = word.strip_prefix('-') {
                let mut chars = short.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => {
                        block.short.insert(c);
                    }
                    _ => panic!("bad short option `{word}` in `{line}`"),
                }
            } else {
                break;
            }
        }
    }
    out
}

/// A word of a help line that stands for an option's value: `NUM`, `<file>`,
/// `{s,S,b}`, `[=WHEN]`, `#`.
fn is_placeholder(word: &str) -> bool {
    let w = word.trim_end_matches("...").trim_end_matches(',');
    w.starts_with(['<', '{', '['])
        || w == "#"
        || (!w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_-|".contains(c)))
}

/// The option spellings that help text shows at the start of its lines:
/// lines indented by 1 to 8 columns (deeper ones continue a description)
/// whose first word starts with `-`; the words that follow are options or
/// their placeholders, up to the first word of the description.
fn help_options(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.replace('\t', "        ");
        let rest = line.trim_start_matches(' ');
        let indent = line.len() - rest.len();
        if indent == 0 || indent > 8 || !rest.starts_with('-') {
            continue;
        }
        for word in rest.split_whitespace() {
            if word.starts_with('-') {
                // `-u, --unrestricted...` (clap: the flag may be repeated).
                let spelled = word
                    .trim_end_matches(',')
                    .trim_end_matches("...")
                    .split(['=', '['])
                    .next()
                    .unwrap_or_default();
                if !spelled.chars().all(|c| c == '-') {
                    out.insert(spelled.to_string());
                }
            } else if !is_placeholder(word) {
                break;
            }
        }
    }
    out
}

/// Does a help spelling with placeholder parts (`--GTYPE-group-format`)
/// match a listed long option, a placeholder part standing for one word?
fn template_matches(template: &str, long: &str) -> bool {
    let t: Vec<&str> = template.split('-').collect();
    let l: Vec<&str> = long.split('-').collect();
    t.len() == l.len()
        && t.iter()
            .zip(&l)
            .all(|(a, b)| a == b || (!a.is_empty() && a.chars().all(|c| c.is_ascii_uppercase())))
}

/// Why a help spelling is not in the block, if it is not.
fn missing(block: &Block, program: &str, spelled: &str) -> Option<String> {
    if block.unlisted.contains(spelled)
        || NOT_OPTIONS
            .iter()
            .any(|(p, t, _)| *p == program && *t == spelled)
    {
        return None;
    }
    if let Some(long) = spelled.strip_prefix("--") {
        let listed = block.long.contains(long)
            || (long.chars().any(|c| c.is_ascii_uppercase())
                && block.long.iter().any(|l| template_matches(long, l)));
        return (!listed).then(|| format!("{program}: `{spelled}` is not listed"));
    }
    let short = spelled.strip_prefix('-').unwrap_or(spelled);
    let mut chars = short.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => {
            (!block.short.contains(&c)).then(|| format!("{program}: `{spelled}` is not listed"))
        }
        // `-NUM`: every digit is an option (`grep -5`).
        _ if short.chars().all(|c| c.is_ascii_uppercase()) => {
            let absent: String = ('0'..='9').filter(|d| !block.short.contains(d)).collect();
            (!absent.is_empty()).then(|| {
                format!("{program}: `{spelled}` is shown but digits `{absent}` are not listed")
            })
        }
        _ => Some(format!(
            "{program}: `{spelled}` in --help is neither `-x` nor `--long`"
        )),
    }
}

/// Where `which` would find the program.
fn installed(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `PROG --help` in the C locale: its standard output (or its standard
/// error when the output is empty), `None` when it fails or takes too long.
fn help_text(path: &PathBuf) -> Option<String> {
    let mut child = Command::new(path)
        .arg("--help")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let mut stderr = child.stderr.take()?;
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().ok()? {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = out.join().ok()?;
    let err = err.join().ok()?;
    if !status.success() {
        return None;
    }
    let text = if out.is_empty() { err } else { out };
    Some(String::from_utf8_lossy(&text).into_owned())
}

#[test]
fn every_option_in_help_is_listed() {
    let mut problems = Vec::new();
    let mut not_installed = Vec::new();
    let mut no_help = Vec::new();
    let (mut programs, mut options) = (0, 0);
    for block in blocks(PROGRAMS) {
        for name in &block.names {
            let Some(path) = installed(name) else {
                not_installed.push(name.clone());
                continue;
            };
            let shown = help_text(&path).map(|t| help_options(&t));
            let Some(shown) = shown.filter(|s| !s.is_empty()) else {
                no_help.push(name.clone());
                continue;
            };
            programs += 1;
            options += shown.len();
            problems.extend(shown.iter().filter_map(|s| missing(&block, name, s)));
        }
    }
    println!("checked {options} options of {programs} programs against their --help");
    println!(
        "skipped, not installed: {}",
        if not_installed.is_empty() {
            "none".to_string()
        } else {
            not_installed.join(" ")
        }
    );
    println!(
        "skipped, no --help: {}",
        if no_help.is_empty() {
            "none".to_string()
        } else {
            no_help.join(" ")
        }
    );
    assert!(
        problems.is_empty(),
        "{} options shown by --help are missing from programs.txt:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        programs >= MIN_CHECKED,
        "only {programs} programs were checked (at least {MIN_CHECKED} expected): are they installed?"
    );
}

#[test]
fn help_lines_are_read_as_options() {
    let help = "\
Usage: x [OPTION]... [FILE]...
  -a, --all                  do not ignore entries
  -c, -C NUM, --context[=NUM]   output NUM lines
  -S BYTES, --strings[=BYTES]  output strings
  -w[BYTES], --width[=BYTES]  output BYTES bytes
      --GTYPE-group-format=GFMT   format GTYPE
    -A, --after-context <NUM>
  -NUM                      same as --context=NUM
  ------- Listing options -------
  -L level      Descend only level directories deep.
  -u, --unrestricted...
-t may be used only when translating.
                             --deep is a description
";
    let got: Vec<String> = help_options(help).into_iter().collect();
    let want = [
        "--GTYPE-group-format",
        "--after-context",
        "--all",
        "--context",
        "--strings",
        "--unrestricted",
        "--width",
        "-A",
        "-C",
        "-L",
        "-NUM",
        "-S",
        "-a",
        "-c",
        "-u",
        "-w",
    ];
    assert_eq!(got, want);
    assert!(template_matches("GTYPE-group-format", "old-group-format"));
    assert!(!template_matches("GTYPE-group-format", "line-format"));
}
