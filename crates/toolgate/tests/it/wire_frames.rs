//! Frames through the real binary that need more than a transcript can say:
//! a complete line is decided while the next one is still partial, and lines
//! nested a million deep are denied by their callID at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use crate::support;

#[test]
fn a_complete_line_is_decided_while_the_next_is_partial() {
    let root = support::project_dir("partial-next-line");
    let mut broker = support::Broker::start(&root, &[], &[]);
    broker.wait_for("ready", |lines| lines.len() == 1);
    // One write: a whole call and the first bytes of the next.
    let first = r#"{"type":"tool_call","callID":"c1","tool":"Read","input":{"file_path":"a"}}"#;
    let second = r#"{"type":"tool_call","callID":"c2","tool":"Read","input":{"file_path":"b"}}"#;
    let split = 30;
    broker.send_raw(format!("{first}\n{}", &second[..split]).as_bytes());
    // The second line stays incomplete until c1 is decided (the wait fails
    // after support::PATIENCE when the broker waits for it instead).
    broker.wait_for("the decision of the complete line", |lines| {
        lines.iter().any(|line| line.contains(r#""callID":"c1""#))
    });
    assert_eq!(broker.lines().len(), 2, "{:?}", broker.lines());
    broker.send_raw(format!("{}\n", &second[split..]).as_bytes());
    broker.wait_for("the second decision", |lines| lines.len() == 3);
    // The same with a CRLF client and a partial line of a single byte.
    broker.send_raw(format!("{}\r\n{{", first.replace("c1", "c3")).as_bytes());
    broker.wait_for("the decision before the single byte", |lines| {
        lines.iter().any(|line| line.contains(r#""callID":"c3""#))
    });
    broker.send_raw(format!("{}\n", &second.replace("c2", "c4")[1..]).as_bytes());
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert_eq!(support::count_type(&lines, "decision"), 4, "{lines:?}");
}

#[test]
fn a_million_deep_input_is_denied_by_its_call_id() {
    let root = support::project_dir("million-deep");
    let mut broker = support::Broker::start(&root, &[], &[]);
    let mut line =
        br#"{"type":"tool_call","callID":"deep","tool":"Read","input":{"file_path":"a","x":"#
            .to_vec();
    line.extend(std::iter::repeat_n(b'[', 1_000_000));
    line.extend(std::iter::repeat_n(b']', 40_000));
    line.push(b'\n');
    broker.send_raw(&line);
    broker.send(r#"{"type":"tool_call","callID":"after","tool":"Read","input":{"file_path":"a"}}"#);
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert_eq!(
        lines[1],
        r#"{"type":"decision","sessionID":"main","callID":"deep","decision":"deny","source":"invalid","reason":"the tool_call is malformed: the input nests deeper than 127 levels"}"#
    );
    assert!(
        lines[2].contains(r#""callID":"after","decision":"allow""#),
        "{lines:?}"
    );
}

#[test]
fn calls_read_after_shutdown_are_denied_not_dropped() {
    let root = support::project_dir("after-shutdown");
    let mut broker = support::Broker::start(&root, &["--mode".into(), "ask".into()], &[]);
    // One write: a question, shutdown, then two more calls and a mode change
    // that the broker has already read when it stops.
    let input = [
        r#"{"type":"tool_call","sessionID":"a","callID":"c1","tool":"Edit","input":{"file_path":"a.rs"}}"#,
        r#"{"type":"shutdown"}"#,
        r#"{"type":"tool_call","sessionID":"a","callID":"c2","tool":"Read","input":{"file_path":"a.rs"}}"#,
        r#"{"type":"set_mode","sessionID":"a","mode":"auto"}"#,
        r#"{"type":"tool_call","sessionID":"b","callID":"c3","tool":"Bash","input":{"command":"rm -rf build"}}"#,
    ]
    .join("\n");
    broker.send_raw(format!("{input}\n").as_bytes());
    let (status, lines, stderr) = broker.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    let decisions: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with(r#"{"type":"decision""#))
        .collect();
    assert_eq!(decisions.len(), 3, "{lines:?}");
    for (call, line) in ["c1", "c2", "c3"].iter().zip(&decisions) {
        assert!(
            line.contains(&format!(
                r#""callID":"{call}","decision":"deny","source":"shutdown""#
            )),
            "{call}: {line}"
        );
    }
    assert_eq!(support::count_type(&lines, "mode_changed"), 0, "{lines:?}");
}
