//! awk programs through the public analysis: a program that runs a command,
//! writes a file, reads a file named by an expression or changes which files
//! are read is never read-only, however awk is spelled; a program that only
//! prints is read-only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use toolgate_shell::{analyze, Options, Script};

/// Programs that only read their input (and literal files) and print.
const PRINT_ONLY: &[&str] = &[
    r#"{print $1}"#,
    r#"{print $1, $3}"#,
    r#"NR<=10"#,
    r#"NR==1, NR==5"#,
    r#"/^\[dependencies\]/{flag=1;next}/^\[/{flag=0}flag"#,
    r#"{ s += $1 } END { print s }"#,
    r#"{ printf "%-20s %s\n", $1, $2 }"#,
    r#"length($0) > 120 { print FILENAME": "FNR }"#,
    r#"BEGIN { FS="," } { print $2 }"#,
    r#"{ a[$1]++ } END { for (k in a) print k, a[k] }"#,
    r#"/^version/ {print $2; exit}"#,
    r#"{ print ($1 > 5) }"#,
    r#"$1 > 5"#,
    r#"{ if ($3 > 100) print $0 }"#,
    r#"{ gsub(/x/, "y"); print }"#,
    r#"{ print toupper($0) }"#,
    r#"{ n = split($0, p, "/"); print p[n] }"#,
    r#"BEGIN { print ENVIRON["HOME"] }"#,
    r#"{print $NF}"#,
    r#"{ print substr($0, index($0, "=")+1) }"#,
    r#"NF { c++ } END { print c+0 }"#,
    r#"{ print $1/2 }"#,
];

/// Programs that run, write, or change what is read.
const DANGEROUS: &[&str] = &[
    r#"{ system("rm -rf /") }"#,
    r#"{ print | "sh" }"#,
    r#"{ print > "out.txt" }"#,
    r#"{ print >> $1 }"#,
    r#"{ "date" | getline d; print d }"#,
    r#"{ getline x < $1 }"#,
    r#"BEGIN { while (("ls" | getline f) > 0) print f }"#,
    r#"@load "filefuncs""#,
    r#"BEGIN { ENVIRON["PATH"]="/tmp" }"#,
    r#"BEGIN { ARGV[1]="/etc/shadow" }"#,
    r#"{ printf "%s", $0 > "/dev/stderr" }"#,
    r#"{ print $1 |& "cat" }"#,
    r#"BEGIN { PROCINFO["sorted_in"]="@ind_str_asc" }"#,
    r#"{ print "abc }"#,
    r#"{ print ; system ("id") }"#,
    r#"{ s = "system"; @s("id") }"#,
    r#"{ print > "/dev/stdout" }"#,
    // Spellings where awks cut the program differently.
    r#"{ x = func /2; system("id"); y = 1/ 3 }"#,
    r#"{ y = switch (x) /2; system("id"); z = 1/ 3 }"#,
    r##"{ n++ /"/; system("id;}"); x = "#" }"##,
    r#"BEGIN { printf "/" /= n++ = /|// ARGC + ARGC }"#,
    r#"BEGIN { getline func < ENVIRON["HOME"] "/.netrc" }"#,
];

fn argv_read_only(argv: &[&str]) -> bool {
    let v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    analyze(Script::Argv(&v), &Options::default()).is_read_only()
}

fn text_read_only(awk: &str, program: &str) -> bool {
    let quoted = program.replace('\'', r"'\''");
    let script = format!("{awk} '{quoted}' f.txt");
    analyze(Script::Text(&script), &Options::default()).is_read_only()
}

#[test]
fn dangerous_programs_are_never_read_only() {
    for p in DANGEROUS {
        for awk in ["awk", "gawk", "mawk", "nawk", "/usr/bin/awk"] {
            assert!(!argv_read_only(&[awk, p, "f.txt"]), "{awk} {p:?}");
            assert!(
                !argv_read_only(&[awk, "-F:", p, "f.txt"]),
                "{awk} -F: {p:?}"
            );
            assert!(!text_read_only(awk, p), "{awk} {p:?} as text");
        }
        assert!(
            !text_read_only("cat f.txt | awk", p),
            "in a pipeline: {p:?}"
        );
    }
}

#[test]

fn print_only_programs_are_read_only() {
    for p in PRINT_ONLY {
        assert!(argv_read_only(&["awk", p, "f.txt"]), "{p:?}");
        assert!(text_read_only("awk", p), "{p:?} as text");
    }
}
