//! Archive listers: `tar` only listing (`-t`), `unzip` only listing,
//! testing or printing to the standard output, and `zipinfo`. Their options
//! are read with their models in `programs.txt`; what the models cannot say
//! is checked here: tar's operation mode, its old-style first argument, a
//! remote archive name and `-T` files whose lines can be options; unzip's
//! mode, the words after its archive and the names it tries for it.

use crate::context::Env;
use crate::model::{self, tar_old_style, Piece};
use crate::syntax::Word;
use crate::{Refusal, RefusalKind};

/// Is `name` an archive GNU tar reaches through rsh: a colon with no `/`
/// before it, not first (rmt's `_remdev`)?
fn remote_archive(name: &str) -> bool {
    match name.find(':') {
        Some(at) if at > 0 => !name[..at].contains('/'),
        _ => false,
    }
}

fn given(parsed: &model::Parsed<'_>, long: &str) -> bool {
    parsed
        .options
        .iter()
        .any(|(o, _, _)| o.long.contains(&long))
}

/// `tar` listing an archive: `-t`/`--list` with an archive given by `-f`
/// (or only asking for help or the version).
pub(crate) fn tar(args: &[Word], env: &Env<'_>) -> Result<(), Refusal> {
    let Some(program) = model::program("tar") else {
        return Err(Refusal::new(crate::programs::not_read_only("tar")));
    };
    let rewritten: Vec<Word>;
    let args = match args.first() {
        Some(first) if !first.text.starts_with('-') => {
            if !first.is_plain() {
                return Err(Refusal::with_kind(
                    RefusalKind::Expansion,
                    format!(
                        "`tar {}`: a first word with an expansion or glob is a cluster of options that cannot be known",
                        first.text
                    ),
                ));
            }
            let pieces = tar_old_style(program, &first.text, args.len()).unwrap_or_default();
            rewritten = pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Letter(c) => Some(Word::literal(&format!("-{c}"))),
                    Piece::Word(i) => args.get(*i).cloned(),
                })
                .collect();
            &rewritten[..]
        }
        _ => args,
    };
    let parsed = model::parse("tar", program, args)?;
    env.reads.borrow_mut().extend(parsed.reads(program, args));
    if let Some(r) = parsed.refusal {
        return Err(r);
    }
    if ["help", "usage", "version", "show-defaults"]
        .iter()
        .any(|l| given(&parsed, l))
    {
        // It prints and exits once its options are read, before any archive.
        return Ok(());
    }
    if !given(&parsed, "list") {
        return Err(Refusal::new(
            "`tar` is read-only only listing an archive (`-t`, `--list`)",
        ));
    }
    let archives: Vec<&str> = parsed
        .options
        .iter()
        .filter(|(o, _, _)| o.long.contains(&"file"))
        .filter_map(|(_, v, _)| *v)
        .collect();
    if archives.is_empty() {
        return Err(Refusal::new(
            "`tar -t` without `-f` reads the archive that $TAPE names (or the default tape drive)",
        ));
    }
    if !given(&parsed, "force-local") {
        if let Some(a) = archives.iter().find(|a| remote_archive(a)) {
            return Err(Refusal::with_kind(
                RefusalKind::Network,
                format!(
                    "`tar -f {a}` reaches a remote archive through rsh (`--force-local` makes it a local file)"
                ),
            ));
        }
    }
    // `-T FILE`: a line starting with `-` is a tar option unless
    // `--verbatim-files-from` came before.
    let mut verbatim = false;
    for (o, _, _) in &parsed.options {
        if o.long.contains(&"verbatim-files-from") {
            verbatim = true;
        }
        if o.long.contains(&"no-verbatim-files-from") {
            verbatim = false;
        }
        if o.long.contains(&"files-from") && !verbatim {
            return Err(Refusal::with_kind(
                RefusalKind::RunsProgram,
                "`tar -T FILE` reads a line starting with `-` as a tar option (`--to-command=…`) unless `--verbatim-files-from` comes before it",
            ));
        }
    }
    Ok(())
}

/// `unzip` listing (`-l`, `-v`, `-z`), testing (`-t`) or printing (`-p`,
/// `-c`) an archive, and `zipinfo` (also as `unzip -Z`).
pub(crate) fn unzip(name: &str, args: &[Word], env: &Env<'_>) -> Result<(), Refusal> {
    let (name, args) = match args.split_first() {
        Some((first, rest)) if name == "unzip" && first.is_plain() && first.text == "-Z" => {
            ("zipinfo", rest)
        }
        _ => (name, args),
    };
    let Some(program) = model::program(name) else {
        return Err(Refusal::new(crate::programs::not_read_only(name)));
    };
    let parsed = model::parse(name, program, args)?;
    env.reads.borrow_mut().extend(parsed.reads(program, args));
    if let Some(r) = parsed.refusal {
        return Err(r);
    }
    let Some(&at) = parsed.operands.first() else {
        // No archive: the usage, or the version (`unzip -v`).
        return Ok(());
    };
    if name == "unzip" {
        let safe_mode = parsed
            .options
            .iter()
            .any(|(o, _, _)| o.short.iter().any(|c| "lvtzpc".contains(*c)));
        if !safe_mode {
            return Err(Refusal::with_kind(
                RefusalKind::Writes,
                "`unzip` extracts files unless it lists (-l, -v, -z), tests (-t) or prints (-p, -c)",
            ));
        }
    }
    let Some(archive) = args.get(at) else {
        return Ok(());
    };
    if !archive.is_plain() {
        return Err(Refusal::with_kind(
            RefusalKind::Expansion,
            format!(
                "`{name} {}`: an archive name the shell expands is expanded again by {name} as a wildcard",
                archive.text
            ),
        ));
    }
    if archive.text.contains(['*', '?', '[']) {
        return Err(Refusal::new(format!(
            "`{name} {}`: {name} expands wildcards in the archive name itself",
            archive.text
        )));
    }
    for w in args.get(at + 1..).unwrap_or_default() {
        if w.is_plain() && w.text == "-x" {
            continue;
        }
        if w.text.starts_with('-') || model::may_be_option(w) {
            return Err(Refusal::with_kind(
                RefusalKind::UnknownOption,
                format!(
                    "`{name} ARCHIVE … {}`: after the archive only `-x` is read as an option (`-d DIR` extracts into DIR)",
                    w.text
                ),
            ));
        }
    }
    // Without a file of that name, it tries NAME.zip, then NAME.ZIP.
    env.read_files([".zip", ".ZIP"].map(|suffix| format!("{}{suffix}", archive.text)));
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn old_style_letters_take_the_next_words_in_turn() {
        let tar = model::program("tar").unwrap();
        let got = tar_old_style(tar, "tfb", 4).unwrap();
        assert_eq!(
            got,
            [
                Piece::Letter('t'),
                Piece::Letter('f'),
                Piece::Word(1),
                Piece::Letter('b'),
                Piece::Word(2),
                Piece::Word(3)
            ]
        );
        assert!(tar_old_style(tar, "-tf", 2).is_none());
    }

    #[test]
    fn archives_are_files_and_members_data() {
        use crate::PathRole;
        let paths = |name: &str, args: &[&str]| -> Vec<(usize, PathRole)> {
            crate::path_words(name, args)
                .unwrap()
                .words
                .iter()
                .map(|w| (w.word, w.role))
                .collect()
        };
        assert_eq!(paths("tar", &["tzf", "a.tgz", "m"]), [(1, PathRole::File)]);
        assert_eq!(paths("tar", &["tbf", "20", "a.tar"]), [(2, PathRole::File)]);
        assert_eq!(
            paths("tar", &["-tf", "a.tar", "-X", "ex", "m"]),
            [(1, PathRole::File), (3, PathRole::File)]
        );
        assert_eq!(paths("unzip", &["-l", "x.zip", "m"]), [(1, PathRole::File)]);
        assert_eq!(
            paths("unzip", &["-Z", "-1", "x.zip"]),
            [(2, PathRole::File)]
        );
        assert_eq!(
            paths("zipinfo", &["x.zip", "-x", "m"]),
            [(0, PathRole::File)]
        );
    }

    #[test]
    fn remote_names() {
        assert!(remote_archive("host:x"));
        assert!(remote_archive("user@host:/dev/st0"));
        assert!(!remote_archive("./host:x"));
        assert!(!remote_archive("dir/host:x"));
        assert!(!remote_archive(":x"));
        assert!(!remote_archive("a.tar"));
    }
}
