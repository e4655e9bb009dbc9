//! The wire types describe the output exactly: every line of every golden
//! transcript parses as a `ServerFrame` and serialises back to the same text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use toolgate_protocol::ServerFrame;

#[test]
fn every_transcript_line_round_trips_through_the_wire_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".out.jsonl") {
            continue;
        }
        for (n, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            let frame: ServerFrame = serde_json::from_str(line).unwrap_or_else(|err| {
                panic!(
                    "{}:{}: not a ServerFrame ({err}): {line}",
                    path.display(),
                    n + 1
                )
            });
            assert_eq!(
                serde_json::to_string(&frame).unwrap(),
                line,
                "{}:{}",
                path.display(),
                n + 1
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} lines checked");
}
