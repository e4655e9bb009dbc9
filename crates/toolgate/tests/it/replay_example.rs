//! The replay example of `docs/replay.md`: `examples/replay/session.jsonl` (a
//! session recorded from a live `toolgate serve`, both directions, random
//! permission ids) replayed as that page shows, each command's output compared with
//! `examples/replay/*.expected` (`UPDATE_EXPECT=1` rewrites them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;
use std::process::Command;

#[test]
fn the_replay_example_prints_what_the_replay_page_says() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let session = "examples/replay/session.jsonl";
    let (strict, loose) = ("examples/replay/strict.json", "examples/replay/loose.json");
    let cases: Vec<(&str, Vec<&str>, i32)> = vec![
        ("replay", vec![session], 0),
        ("summary", vec!["--summary", session], 0),
        ("check", vec!["--check", "--policy", strict, session], 1),
        ("compare", vec!["--compare", strict, loose, session], 1),
    ];
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    for (name, args, code) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["replay", "--project-root", "/work/project"])
            .args(&args)
            .current_dir(&repo)
            .env_remove("TOOLGATE_MODE")
            .env_remove("TOOLGATE_PERMISSION")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text =
            String::from_utf8_lossy(&out.stdout).replace(&format!("{}/", repo.display()), "");
        let path = repo.join(format!("examples/replay/{name}.expected"));
        if update {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if name != "replay" {
            // docs/replay.md shows this output as it is.
            let page = std::fs::read_to_string(repo.join("docs/replay.md")).unwrap();
            assert!(
                page.contains(&expected),
                "docs/replay.md's replay example ({name}) has drifted"
            );
        }
        assert!(
            expected == text,
            "{name}: the output differs from {} (UPDATE_EXPECT=1 rewrites it)\n{text}",
            path.display()
        );
    }
}
