//! What a program's name alone says about it: the wrappers and runners
//! that run their arguments, interpreters and shells, the obsolete count
//! form of `head`/`tail`, and why a program is not read-only. A leaf: the
//! judges and the program models ask it, and it asks none of them.

/// Why an unknown or writing program is not read-only.
pub(crate) fn not_read_only(name: &str) -> String {
    let what = match name {
        "rm" => "deletes files",
        "rmdir" => "removes directories",
        "mv" => "moves or overwrites files",
        "cp" | "install" | "rsync" | "scp" => "writes files",
        "touch" => "creates or changes files",
        "mkdir" => "creates directories",
        "ln" => "creates links",
        "chmod" => "changes permissions",
        "chown" | "chgrp" => "changes ownership",
        "dd" => "writes data",
        "truncate" => "changes file sizes",
        "shred" => "destroys files",
        "tee" => "writes files",
        "patch" => "edits files",
        "curl" | "wget" => "can download and write files",
        "kill" | "pkill" | "killall" => "signals processes",
        "source" | "." => "runs a script in this shell",
        "export" | "declare" | "typeset" | "local" | "readonly" | "unset" | "set" | "shopt"
        | "alias" | "unalias" | "trap" | "read" | "let" | "hash" | "ulimit" | "umask"
        | "enable" | "mapfile" | "readarray" | "pushd" | "popd" => "changes the shell's state",
        _ if is_interpreter(name) => "runs code",
        _ => return format!("`{name}` is not a known read-only program"),
    };
    format!("`{name}` {what}")
}

/// Shells and language interpreters (by program name).
pub(crate) fn is_interpreter(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "python",
        "pypy",
        "node",
        "ruby",
        "perl",
        "php",
        "deno",
        "bun",
        "lua",
        "tclsh",
        "Rscript",
        "julia",
        "osascript",
        "pwsh",
        "powershell",
        "irb",
        "ghci",
        "runghc",
        "swift",
        "java",
    ];
    is_shell(name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Shells (by program name).
pub(crate) fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "bash"
            | "sh"
            | "zsh"
            | "dash"
            | "ksh"
            | "mksh"
            | "fish"
            | "csh"
            | "tcsh"
            | "ash"
            | "busybox"
    )
}

/// Wrappers and other programs that run their arguments.
pub(crate) fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "sudo"
            | "doas"
            | "su"
            | "env"
            | "timeout"
            | "time"
            | "nice"
            | "nohup"
            | "stdbuf"
            | "ionice"
            | "command"
            | "builtin"
            | "xargs"
            | "exec"
            | "eval"
            | "source"
            | "."
            | "watch"
            | "setsid"
            | "chroot"
            | "nsenter"
            | "unshare"
            | "flock"
            | "strace"
            | "ltrace"
            | "gdb"
            | "parallel"
            | "npx"
            | "bunx"
            | "pnpx"
            | "uvx"
            | "pipx"
            | "find"
            // `fd -x/-X CMD`; `tar --to-command`, `-I`, `-F`, `--checkpoint-action`.
            | "fd"
            | "fdfind"
            | "tar"
            | "awk"
            | "gawk"
            | "mawk"
            | "nawk"
            | "sed"
            | "make"
            | "ssh"
    ) || is_runner(name)
}

/// `head -20`, `tail -5f`, `tail +5`: the obsolete count form, first
/// argument only (tail's only when at most one file follows; `count` is
/// the number of arguments).
pub(crate) fn legacy_count(name: &str, first: &str, count: usize) -> bool {
    let (sign, rest) = match (first.strip_prefix('-'), first.strip_prefix('+')) {
        (Some(rest), _) => ("-", rest),
        (None, Some(rest)) => ("+", rest),
        (None, None) => return false,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let suffix = &rest[digits..];
    digits > 0
        && match name {
            "head" => sign == "-" && suffix.bytes().all(|b| b"bcklmqvz".contains(&b)),
            "tail" => {
                (sign == "-" || sign == "+")
                    && suffix.bytes().all(|b| b"bclf".contains(&b))
                    && count <= 2
            }
            _ => false,
        }
}

/// How a program that runs a command (and is refused whatever it runs)
/// takes its options, so the command it runs can be recorded for rules.
pub(crate) struct Runner {
    /// Short option letters that take a value.
    pub value: &'static str,
    /// Long options that take a value when written without `=`.
    pub long_value: &'static [&'static str],
    /// Long options without a value; with `strict`, any other long option
    /// written without `=` means the options cannot be read.
    pub long_flags: &'static [&'static str],
    /// Operands before the command (`chroot DIR`, `ssh HOST`, `chrt PRIO`).
    pub operands: usize,
    /// The command words are joined and run by a shell (`ssh`, `watch`).
    pub shell: bool,
    /// Only the long options listed are understood (see `long_flags`).
    pub strict: bool,
}

const fn plain_runner(operands: usize) -> Runner {
    Runner {
        value: "",
        long_value: &[],
        long_flags: &[],
        operands,
        shell: false,
        strict: false,
    }
}

/// A runner with many options: short letters that take a value, long
/// options that do, and the long ones that do not; any other long option
/// without `=` sends the reader to candidates.
const fn strict_runner(
    value: &'static str,
    long_value: &'static [&'static str],
    long_flags: &'static [&'static str],
    operands: usize,
) -> Runner {
    Runner {
        value,
        long_value,
        long_flags,
        operands,
        shell: false,
        strict: true,
    }
}

/// Programs that run a command given in their arguments, beyond the
/// wrappers judged above. They are never read-only.
pub(crate) fn runner(name: &str) -> Option<Runner> {
    Some(match name {
        "setsid" | "unbuffer" | "valgrind" | "firejail" | "busybox" | "catchsegv" => {
            plain_runner(0)
        }
        "pkexec" => Runner {
            long_value: &["--user"],
            ..plain_runner(0)
        },
        "chroot" => Runner {
            long_value: &["--userspec", "--groups"],
            ..plain_runner(1)
        },
        "taskset" => plain_runner(1),
        "chrt" => Runner {
            value: "TPD",
            long_value: &["--sched-runtime", "--sched-period", "--sched-deadline"],
            ..plain_runner(1)
        },
        "watch" => Runner {
            value: "nq",
            long_value: &["--interval", "--equexit"],
            shell: true,
            ..plain_runner(0)
        },
        "ssh" => Runner {
            value: "BbcDEeFIiJLlmOopQRSWw",
            shell: true,
            ..plain_runner(1)
        },
        "strace" => strict_runner(
            "abeEIoOpPsSuUX",
            &[
                "--output",
                "--trace",
                "--attach",
                "--trace-path",
                "--string-limit",
                "--user",
                "--env",
            ],
            &[
                "--follow-forks",
                "--summary",
                "--summary-only",
                "--output-separately",
                "--daemonize",
                "--no-abbrev",
                "--decode-pids",
                "--stack-trace",
                "--seccomp-bpf",
            ],
            0,
        ),
        "ltrace" => strict_runner(
            "aADeFlnopsuwx",
            &["--output", "--library"],
            &["--demangle"],
            0,
        ),
        "numactl" => strict_runner(
            "ipmNCP",
            &[],
            &["--all", "--localalloc", "--show", "--hardware"],
            0,
        ),
        "unshare" => strict_runner(
            "SGRw",
            &["--setuid", "--setgid", "--root", "--wd", "--propagation"],
            &[
                "--fork",
                "--map-root-user",
                "--map-current-user",
                "--mount-proc",
                "--user",
                "--pid",
                "--net",
                "--mount",
                "--uts",
                "--ipc",
                "--cgroup",
                "--time",
                "--kill-child",
            ],
            0,
        ),
        "nsenter" => strict_runner(
            "tSG",
            &["--target", "--setuid", "--setgid"],
            &[
                "--all",
                "--mount",
                "--uts",
                "--ipc",
                "--net",
                "--pid",
                "--user",
                "--cgroup",
                "--time",
                "--preserve-credentials",
                "--no-fork",
                "--root",
                "--wd",
            ],
            0,
        ),
        "systemd-run" => strict_runner(
            "upEMH",
            &[
                "--unit",
                "--property",
                "--setenv",
                "--machine",
                "--host",
                "--description",
                "--slice",
                "--uid",
                "--gid",
                "--nice",
                "--working-directory",
            ],
            &[
                "--user",
                "--system",
                "--scope",
                "--wait",
                "--pty",
                "--pipe",
                "--quiet",
                "--collect",
                "--same-dir",
                "--shell",
                "--no-block",
                "--no-ask-password",
                "--remain-after-exit",
                "--send-sighup",
            ],
            0,
        ),
        "fakeroot" => strict_runner("lisb", &["--lib", "--faked"], &["--unknown-is-real"], 0),
        "faketime" => strict_runner("p", &["--date-prog"], &["--exclude-monotonic"], 1),
        "torsocks" => strict_runner(
            "upaP",
            &["--user", "--pass", "--address", "--port"],
            &["--isolate", "--debug", "--quiet"],
            0,
        ),
        "proxychains" | "proxychains4" => strict_runner("f", &[], &[], 0),
        "xvfb-run" => strict_runner("efnpsw", &[], &["--auto-servernum", "--listen-tcp"], 0),
        "flock" | "su" | "runuser" | "script" | "gdb" | "parallel" => plain_runner(0),
        _ => return None,
    })
}

/// Programs that run a command and are refused whatever they run.
pub(crate) fn is_runner(name: &str) -> bool {
    runner(name).is_some()
}
