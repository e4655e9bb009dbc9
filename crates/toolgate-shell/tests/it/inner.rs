//! The `inner` texts a deny or ask rule sees: every spelling of a program
//! (by path, through a wrapper, through `find -exec`, through a program that
//! runs its arguments) must show the command under its plain name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use toolgate_shell::{analyze, Options, Script};

/// All the texts rules are matched against: each command's text and inner texts.
fn texts(script: &str) -> Vec<String> {
    let a = analyze(Script::Text(script), &Options::default());
    a.commands
        .into_iter()
        .flat_map(|c| std::iter::once(c.text).chain(c.inner))
        .collect()
}

/// `rm *` as OpenCode's wildcard reads it: `rm` or `rm ` followed by anything.
fn rm_rule_matches(text: &str) -> bool {
    text == "rm" || text.starts_with("rm ")
}

fn check(script: &str, expected: bool) {
    let all = texts(script);
    let seen = all.iter().any(|t| rm_rule_matches(t));
    assert_eq!(seen, expected, "{script:?}: texts {all:?}");
}

#[test]
fn a_rule_on_rm_sees_every_spelling() {
    for script in [
        "rm -rf x",
        "/bin/rm -rf x",
        "/usr/bin/rm x",
        "/usr/local/sbin/rm x",
        "/opt/x/rm -rf",
        "./rm x",
        "../bin/rm x",
        "~/bin/rm x",
        "\"/bin/rm\" x",
        "/bin/r\\m x",
        "'/usr/bin/rm' -rf x",
        "$HOME/bin/rm x",
        "find . -exec rm {} +",
        "find . -exec rm -rf {} \\;",
        "find . -execdir /bin/rm {} ';'",
        "find . -name x -ok rm {} \\;",
        "find . -okdir rm -f {} +",
        "find . -print -exec echo {} \\; -exec rm {} +",
        "/usr/bin/find . -exec rm {} +",
        "./find . -exec rm {} +",
        "xargs rm",
        "xargs -0 -n1 /bin/rm -f",
        "xargs -I{} rm {}",
        "xargs --process-slot-var=X rm",
        "env -i rm x",
        "env -u HOME /bin/rm x",
        "env -S 'rm -rf x'",
        "env --chdir=/tmp rm x",
        "sudo rm x",
        "sudo --bogus rm x",
        "doas -u root rm x",
        "nohup rm x",
        "nohup -- rm x",
        "doas -a style rm x",
        "doas -C /etc/doas.conf -u root rm x",
        "sudo --user root -- /bin/rm x",
        "exec -a name rm x",
        "timeout 5 rm x",
        "timeout --bogus 5 rm x",
        "nice -n 5 /bin/rm x",
        "time -p rm x",
        "command rm x",
        "bash -c 'rm -rf x'",
        "sh -c '/bin/rm x'",
        "eval rm x",
        "watch rm x",
        "watch -n 1 'rm x'",
        "setsid rm x",
        "flock /tmp/lock rm x",
        "flock /tmp/lock -c 'rm x'",
        "chroot / rm x",
        "chroot --userspec=a:b / /bin/rm x",
        "su -c 'rm x' bob",
        "su - bob --command='rm x'",
        "runuser -u bob -- rm x",
        "script -qc 'rm x' /dev/null",
        "strace -f -o /tmp/log rm x",
        "ltrace -S rm x",
        "valgrind --tool=none rm x",
        "gdb --args rm x",
        "gdb -batch -ex 'shell rm x'",
        "unbuffer rm x",
        "parallel rm ::: a b",
        "parallel -j2 'rm {}' ::: a b",
        "ssh host rm -rf x",
        "ssh -p 22 -i key host 'rm -rf x'",
        "pkexec rm x",
        "ssh -o ProxyCommand='rm x' host",
        "ssh -oProxyCommand=rm\\ x host ls",
        "ssh -o 'LocalCommand rm x' -o PermitLocalCommand=yes host",
        "pkexec --user root rm x",
        "chrt -f 10 rm x",
        "taskset 0x1 rm x",
        "taskset -c 0 rm x",
        "numactl --cpunodebind=0 rm x",
        "numactl -C 0 rm x",
        "unshare -r rm x",
        "nsenter -t 1 -m rm x",
        "firejail --noprofile rm x",
        "systemd-run --user rm x",
        "busybox rm x",
        "busybox sh -c 'rm x'",
        "strace -e trace=open -o log -s 100 -P path rm x",
        "strace --output log -f rm x",
        "strace --bogus rm x",
        "ltrace -o log -l lib -S rm x",
        "systemd-run --user --unit job -p CPUQuota=5% rm x",
        "unshare --fork --pid --setuid 0 rm x",
        "nsenter -t 1 -m -u -S 0 rm x",
        "faketime '2020-01-01 00:00' rm x",
        "torsocks -u me rm x",
        "fakeroot -- rm x",
        "xvfb-run -a -s '-screen 0' rm x",
        "proxychains -q -f conf rm x",
        "numactl --interleave=all -C 0-3 rm x",
        "catchsegv rm x",
        "env -vS'rm x'",
        "xargs --process-slot X rm",
        "sudo -u root /opt/sbin/rm x",
        "/opt/bin/sudo rm x",
        "./xargs rm",
        "env /usr/local/bin/rm x",
        "sudo env -i timeout 3 /opt/rm x",
    ] {
        check(script, true);
    }
}

#[test]
fn other_programs_are_not_shown_as_rm() {
    for script in [
        "ls rm",
        "rmdir x",
        "/bin/rmdir x",
        "find . -name rm",
        "find . -exec echo rm \\;",
        "git commit -m 'rm x'",
        "/opt/rm-tools/ls x",
        "echo rm",
    ] {
        check(script, false);
    }
}

#[test]
fn candidates_stay_bounded() {
    // Nested wrappers whose options cannot be read: the candidates of each
    // level would multiply without the budget.
    let script = format!(
        "{}a b c d e f g {}",
        "sudo --bogus ".repeat(8),
        "x ".repeat(50_000)
    );
    let a = analyze(Script::Text(&script), &Options::default());
    let inner: Vec<&String> = a.commands.iter().flat_map(|c| &c.inner).collect();
    let bytes: usize = inner.iter().map(|t| t.len()).sum();
    assert!(inner.len() <= 300, "{} inner texts", inner.len());
    assert!(bytes <= (1 << 20) + 10 * script.len(), "{bytes} bytes");
    assert!(!a.is_read_only());
}
