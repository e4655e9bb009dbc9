//! `analyze` on arbitrary bytes: never panics, and its invariants hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_shell::{analyze, analyze_tree_sitter_only, Analysis, Options, Script};

/// tree-sitter-bash itself rejected or misparsed the script (detected and
/// refused). On such inputs the fast path, which follows bash, may give a
/// different (also correct) answer.
fn parser_failed(a: &Analysis) -> bool {
    let texts = |c: &toolgate_shell::SimpleCommand| {
        c.verdict
            .as_ref()
            .err()
            .map(|r| r.reason.clone())
            .unwrap_or_default()
    };
    a.commands.iter().any(|c| {
        let r = texts(c);
        r.contains("does not parse") || r.contains("bash parser")
    })
}

fuzz_target!(|data: &[u8]| {
    let options = Options {
        project_root: "/work/proj".into(),
        ..Options::default()
    };
    let text = String::from_utf8_lossy(data);
    let a = analyze(Script::Text(&text), &options);
    // The verdict of the whole is the first refusal of the parts.
    assert_eq!(
        a.refusal.is_none(),
        !a.commands.is_empty() && a.commands.iter().all(|c| c.verdict.is_ok())
    );
    // The fast path and tree-sitter agree, unless tree-sitter-bash failed.
    let slow = analyze_tree_sitter_only(Script::Text(&text), &options);
    if !parser_failed(&slow) {
        assert_eq!(a, slow);
    }
    // Whatever the fast path allows, tree-sitter does not call a writer.
    if a.is_read_only() && !parser_failed(&slow) {
        assert!(slow.is_read_only());
    }
    // As argv: NUL-separated words.
    let argv: Vec<String> = text.split('\0').map(str::to_string).collect();
    let _ = analyze(Script::Argv(&argv), &options);
});
