//! Toolchain queries that only read, provided the project holds no file
//! that makes the toolchain install, download or run something.
//!
//! `cargo`, `rustc` and `rustup` are usually rustup's proxies: a
//! `rust-toolchain` or `rust-toolchain.toml` in the working directory or
//! above it names a toolchain, which the proxy installs (a download and a
//! write outside the project) before it answers. A `.cargo/config.toml`
//! (or `.cargo/config`) there can name the `rustc` cargo runs, or a wrapper
//! around it (`build.rustc-wrapper = "./x.sh"`), which `cargo tree` and
//! `cargo metadata` (with dependencies) run to learn the target. So these
//! spellings are read-only only with a [`Requirement`] the policy checks on
//! the disk: no such file in the working directory or any directory above
//! it. Without the disk (or after a `cd` the policy cannot follow), they
//! are refused.
//!
//! Admitted, exactly (anything else is refused):
//! - `cargo|rustc|rustdoc|rustfmt|cargo-clippy|clippy-driver` with only
//!   `-V`/`--version` and `-v`/`--verbose` (at least one version flag);
//! - `rustup --version`, `rustup toolchain list [-v]`, `rustup show
//!   [active-toolchain|home|profile]`, `rustup target list [--installed]`,
//!   `rustup component list [--installed]`;
//! - `cargo metadata` and `cargo tree` with options that neither reach the
//!   network nor write `Cargo.lock`: `--frozen`, or `--offline` with
//!   `--locked`, or for `metadata` `--no-deps`, which resolves nothing, so
//!   fetches nothing, writes no lock file and runs no compiler (then
//!   `.cargo/config` does not matter; checked with strace on a manifest with
//!   a dependency and no lock file);
//! - `cargo locate-project` (reads manifests upward, prints a path);
//! - `rustc --print KIND [--target T]` for kinds that print facts of the
//!   compiler (`cfg`, `sysroot`, `target-list`, `target-libdir`, ...), not
//!   those that need an input file or link;
//! - `npm --version`, `pip --version` (no network, no write: seen with
//!   strace; their update checks run only for commands).
//!
//! - `go version` and `go env [-json] NAME...` for names that need no C
//!   compiler (not `CGO_*`, `PKG_CONFIG`, `GOGCCFLAGS`: to print those, go
//!   runs the compiler, writing temporary files), with no `go.mod` or
//!   `go.work` in the working directory or above it (from go 1.21 their
//!   `go`/`toolchain` lines make go download and run another toolchain).
//!
//! Not admitted: `go env` with no name (all of them, the costly ones too),
//! `go list` (downloads modules), `go doc` (fills the build cache), `cargo
//! fmt --check` (rustfmt follows `#[path = "…"] mod` to any file and shows
//! what it cannot parse), `npm ls` (writes a debug log, may check for
//! updates) and `pip list|show|freeze` (they check the network for their own updates
//! and write their caches), `python3 -m` (the working directory comes first
//! on the module path), `cargo +TOOLCHAIN` (installs it).

use crate::context::Env;
use crate::syntax::Word;
use crate::{Refusal, Requirement};

const TOOLCHAIN_FILES: &[&str] = &["rust-toolchain", "rust-toolchain.toml"];
const CARGO_CONFIG: &[&str] = &[".cargo/config.toml", ".cargo/config"];
const GO_MODULE: &[&str] = &["go.mod", "go.work"];

/// `Some(verdict)` when `name args` is one of the toolchain queries.
pub(crate) fn judge(name: &str, args: &[Word], env: &Env<'_>) -> Option<Result<(), Refusal>> {
    if args.iter().any(|w| !w.is_plain()) {
        return None;
    }
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    let require = |names: &[&'static str], why: &'static str| {
        env.require(
            names
                .iter()
                .map(|name| Requirement::AbsentUpward { name, why }),
        );
    };
    let toolchain = "names a toolchain, which rustup's proxies install before they answer";
    match name {
        "cargo" | "rustc" | "rustdoc" | "rustfmt" | "cargo-clippy" | "clippy-driver"
            if version_flags(&texts) =>
        {
            require(TOOLCHAIN_FILES, toolchain);
            Some(Ok(()))
        }
        "rustc" if rustc_print(&texts) => {
            require(TOOLCHAIN_FILES, toolchain);
            Some(Ok(()))
        }
        "npm" if matches!(texts.as_slice(), ["--version"] | ["-v"]) => Some(Ok(())),
        "pip" | "pip3" if matches!(texts.as_slice(), ["--version"] | ["-V"]) => Some(Ok(())),
        "rustup" if rustup_query(&texts) => {
            require(TOOLCHAIN_FILES, toolchain);
            Some(Ok(()))
        }
        "go" if go_query(&texts) => {
            require(
                GO_MODULE,
                "can name a go toolchain, which go downloads and runs (go 1.21 and later)",
            );
            Some(Ok(()))
        }
        "cargo" => match texts.split_first() {
            Some((&"locate-project", rest)) if locate_project(rest) => {
                require(TOOLCHAIN_FILES, toolchain);
                Some(Ok(()))
            }
            Some((&sub, rest)) if sub == "metadata" || sub == "tree" => {
                Some(cargo_query(sub, rest, env).map(|config| {
                    require(TOOLCHAIN_FILES, toolchain);
                    if config {
                        require(
                            CARGO_CONFIG,
                            "can name the compiler cargo runs (or a wrapper around it)",
                        );
                    }
                }))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Only `-V`, `--version`, `-v`, `--verbose` (clustered `-vV`), one a version.
fn version_flags(args: &[&str]) -> bool {
    // `cargo --list`: the subcommands and aliases it knows.
    if args == ["--list"] {
        return true;
    }
    let mut version = false;
    for a in args {
        match *a {
            "-V" | "--version" | "-vV" | "-Vv" => version = true,
            "-v" | "--verbose" => {}
            _ => return false,
        }
    }
    version
}

/// `go version`, `go env [-json] NAME...` (names that need no compiler).
fn go_query(args: &[&str]) -> bool {
    match args {
        ["version"] => true,
        ["env", rest @ ..] => {
            let names: Vec<&&str> = rest.iter().filter(|a| **a != "-json").collect();
            !names.is_empty()
                && names.iter().all(|n| {
                    n.bytes()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
                        && !n.is_empty()
                        && !n.starts_with("CGO_")
                        && !matches!(**n, "PKG_CONFIG" | "GOGCCFLAGS")
                })
        }
        _ => false,
    }
}

/// `rustc --print KIND [--target T]` (also `--print=KIND`).
fn rustc_print(args: &[&str]) -> bool {
    const KINDS: &[&str] = &[
        "cfg",
        "sysroot",
        "target-list",
        "target-libdir",
        "host-tuple",
        "target-cpus",
        "target-features",
        "relocation-models",
        "code-models",
        "tls-models",
        "split-debuginfo",
        "stack-protector-strategies",
        "deployment-target",
        "calling-conventions",
    ];
    let mut printed = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        let (opt, value) = match a.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(v)),
            _ => (*a, None),
        };
        let value = match value {
            Some(v) => v,
            None => match args.get(i) {
                Some(v) if matches!(opt, "--print" | "--target") => {
                    i += 1;
                    v
                }
                _ => return false,
            },
        };
        let plain = value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
        match opt {
            "--print" if KINDS.contains(&value) => printed = true,
            "--target" if plain && !value.is_empty() => {}
            _ => return false,
        }
    }
    printed
}

/// `cargo locate-project [--workspace] [--message-format json|plain] [-q]`.
fn locate_project(args: &[&str]) -> bool {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        match *a {
            "--workspace" | "-q" | "--quiet" => {}
            "--message-format=json" | "--message-format=plain" => {}
            "--message-format" => match args.get(i) {
                Some(&("json" | "plain")) => i += 1,
                _ => return false,
            },
            _ => return false,
        }
    }
    true
}

fn rustup_query(args: &[&str]) -> bool {
    matches!(
        args,
        ["--version" | "-V"]
            | ["toolchain", "list"]
            | ["toolchain", "list", "-v" | "--verbose"]
            | ["show"]
            | ["show", "active-toolchain" | "home" | "profile"]
            | ["target" | "component", "list"]
            | ["target" | "component", "list", "--installed"]
    )
}

/// `cargo metadata|tree OPTIONS`: `Ok(needs_config_check)` when the options
/// keep it off the network and `Cargo.lock` unwritten.
fn cargo_query(sub: &str, args: &[&str], env: &Env<'_>) -> Result<bool, Refusal> {
    const FLAGS: &[&str] = &[
        "--offline",
        "--frozen",
        "--locked",
        "-q",
        "--quiet",
        "--all-features",
        "--no-default-features",
        "--workspace",
    ];
    const METADATA_FLAGS: &[&str] = &["--no-deps"];
    const TREE_FLAGS: &[&str] = &["-d", "--duplicates", "--no-dedupe"];
    const VALUED: &[&str] = &["--features", "-F", "--color", "--manifest-path"];
    const METADATA_VALUED: &[&str] = &["--format-version", "--filter-platform"];
    const TREE_VALUED: &[&str] = &[
        "-e",
        "--edges",
        "-i",
        "--invert",
        "--depth",
        "--prefix",
        "--charset",
        "-p",
        "--package",
        "--target",
        "-f",
        "--format",
        "--exclude",
        "--prune",
    ];
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        let (opt, attached) = match a.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(v)),
            _ => (*a, None),
        };
        let valued = VALUED.contains(&opt)
            || (sub == "metadata" && METADATA_VALUED.contains(&opt))
            || (sub == "tree" && TREE_VALUED.contains(&opt));
        let flag = FLAGS.contains(&opt)
            || (sub == "metadata" && METADATA_FLAGS.contains(&opt))
            || (sub == "tree" && TREE_FLAGS.contains(&opt));
        if valued {
            let value = match attached {
                Some(v) => v,
                None => {
                    let v = args.get(i).copied().ok_or_else(|| {
                        Refusal::new(format!("`cargo {sub} {opt}` needs a value"))
                    })?;
                    i += 1;
                    v
                }
            };
            if opt == "--manifest-path" {
                env.read_files([value.to_string()]);
            }
        } else if !flag || attached.is_some() {
            return Err(Refusal::new(format!(
                "`cargo {sub}` with `{a}` is not known to stay off the network and leave `Cargo.lock` alone"
            )));
        }
        seen.push(opt);
    }
    let has = |o: &str| seen.contains(&o);
    let no_deps = sub == "metadata" && has("--no-deps");
    let offline = has("--frozen") || has("--offline") || no_deps;
    let unchanged_lock = has("--frozen") || has("--locked") || no_deps;
    if !offline || !unchanged_lock {
        return Err(Refusal::with_kind(
            crate::RefusalKind::Network,
            format!(
                "`cargo {sub}` may fetch the registry and write `Cargo.lock`; `--offline --locked` (or `--frozen`) keeps it read-only"
            ),
        ));
    }
    Ok(!no_deps)
}
