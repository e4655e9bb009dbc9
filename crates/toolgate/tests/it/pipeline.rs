//! The stdio transport reads a pipe on the owner's thread while lines come
//! one at a time and hands the reading to a thread of its own in a flood,
//! which decodes the next batch while the owner decides the last (a file or
//! memory is read by that thread alone). However the input arrives (whole
//! floods, a byte at a time, anything between, with pauses), the frames
//! written must be exactly those of the broker handed the same lines one by
//! one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use toolgate::broker::Input;
use toolgate::clock::ManualClock;
use toolgate_protocol::ServerFrame;

use crate::support;

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A mix whose answers depend on the order of the lines: calls in four
/// sessions (read, edit, shell), mode changes between them, cancels, session
/// ends, call ids given twice, blank and broken lines.
fn mixed_lines(count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let modes = ["auto", "auto_edit", "ask", "plan", "readonly"];
    let commands = [
        "git status",
        "ls -la",
        "rm -rf build",
        "cargo test",
        "cat a | wc -l",
    ];
    let mut lines = Vec::with_capacity(count);
    for i in 0..count {
        let session = format!("s{}", rng.below(4));
        // Now and then a call id from earlier: a duplicate while it is pending.
        let call = match rng.below(20) {
            0 if i > 10 => format!("c{}", i - 1 - rng.below(10) as usize),
            _ => format!("c{i}"),
        };
        let line = match rng.below(16) {
            0..=4 => format!(
                r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call}","tool":"read","input":{{"file_path":"src/f{}.rs"}}}}"#,
                rng.below(5)
            ),
            5..=7 => format!(
                r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call}","tool":"edit","input":{{"file_path":"src/f{}.rs","old_string":"a","new_string":"b"}}}}"#,
                rng.below(5)
            ),
            8..=10 => format!(
                r#"{{"type":"tool_call","sessionID":"{session}","callID":"{call}","tool":"bash","input":{{"command":"{}"}}}}"#,
                commands[rng.below(commands.len() as u64) as usize]
            ),
            11 | 12 => format!(
                r#"{{"type":"set_mode","sessionID":"{session}","mode":"{}"}}"#,
                modes[rng.below(modes.len() as u64) as usize]
            ),
            13 => format!(
                r#"{{"type":"cancel","sessionID":"{session}","callID":"c{}"}}"#,
                i.saturating_sub(rng.below(30) as usize)
            ),
            14 => format!(r#"{{"type":"session_end","sessionID":"{session}"}}"#),
            _ => match rng.below(3) {
                0 => String::new(),
                1 => r#"{"type":"tool_call","callID":"#.to_string(),
                _ => format!(r#"{{"type":"tool_call","callID":"{call}","sessionID":"{session}"}}"#),
            },
        };
        lines.push(line);
    }
    lines
}

/// What the broker says to the lines handed over one at a time, then to the
/// end of input: the stdio transport's output, as it must be.
fn one_by_one(lines: &[String]) -> Vec<u8> {
    let mut broker = support::in_process(ManualClock::new(), 0);
    let mut frames: Vec<ServerFrame> = Vec::new();
    support::step(&mut broker, Input::Opened { conn: 0 }, &mut frames);
    for (index, line) in lines.iter().enumerate() {
        support::feed_line(&mut broker, line.as_bytes(), index as u64 + 1, &mut frames);
    }
    support::step(&mut broker, Input::Stop, &mut frames);
    let mut bytes = Vec::new();
    for frame in &frames {
        toolgate_protocol::write_line(&mut bytes, frame).unwrap();
    }
    bytes
}

/// Input handed out in pieces of 1 to `most` bytes.
struct Pieces {
    bytes: Vec<u8>,
    at: usize,
    most: u64,
    rng: Rng,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.bytes.len() - self.at;
        let size = (1 + self.rng.below(self.most) as usize)
            .min(left)
            .min(buf.len());
        buf[..size].copy_from_slice(&self.bytes[self.at..self.at + size]);
        self.at += size;
        Ok(size)
    }
}

/// An output the test can read after the transport has taken it.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn through_stdio(lines: &[String], most: u64, seed: u64) -> Vec<u8> {
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    let input = Pieces {
        bytes,
        at: 0,
        most,
        rng: Rng(seed),
    };
    let sink = Sink::default();
    let broker = support::in_process(ManualClock::new(), 0);
    toolgate::transport::stdio::run(input, sink.clone(), broker, 1 << 20).unwrap();
    let written = sink.0.lock().unwrap().clone();
    written
}

/// Where two outputs part, for a readable failure.
fn first_difference(got: &[u8], want: &[u8]) -> String {
    let got: Vec<&str> = std::str::from_utf8(got).unwrap().lines().collect();
    let want: Vec<&str> = std::str::from_utf8(want).unwrap().lines().collect();
    match got.iter().zip(&want).position(|(a, b)| a != b) {
        Some(at) => format!("line {at}:\n got {}\nwant {}", got[at], want[at]),
        None => format!("{} lines written, {} expected", got.len(), want.len()),
    }
}

#[test]
fn a_flood_is_answered_as_if_line_by_line_however_it_arrives() {
    let lines = mixed_lines(6000, 0x9e37_79b9_7f4a_7c15);
    let want = one_by_one(&lines);
    // Whole 64 KiB reads (batches go to the worker), single bytes (every line
    // alone, on the reading thread), and sizes in between that mix the two.
    for (most, seed) in [(1 << 16, 1), (1, 2), (200, 3), (2_000, 4), (30_000, 5)] {
        let got = through_stdio(&lines, most, seed);
        assert!(
            got == want,
            "reads of up to {most} bytes: {}",
            first_difference(&got, &want)
        );
    }
}

#[test]
fn a_shutdown_in_a_flood_ends_the_run_with_input_still_open() {
    let root = support::project_dir("pipeline-shutdown");
    let mut broker = support::Broker::start(&root, &["--mode".into(), "readonly".into()], &[]);
    // One write: many calls (more than are answered on the reading thread),
    // `shutdown`, then more calls the broker has read when it stops.
    let mut input = String::new();
    for i in 0..300 {
        input.push_str(&format!(
            "{{\"type\":\"tool_call\",\"callID\":\"a{i}\",\"tool\":\"read\",\"input\":{{\"file_path\":\"src/f{i}.rs\"}}}}\n"
        ));
    }
    input.push_str("{\"type\":\"shutdown\"}\n");
    for i in 0..40 {
        input.push_str(&format!(
            "{{\"type\":\"tool_call\",\"callID\":\"b{i}\",\"tool\":\"read\",\"input\":{{\"file_path\":\"src/f{i}.rs\"}}}}\n"
        ));
    }
    broker.send_raw(input.as_bytes());
    // stdin stays open: the broker must end on its own.
    let (status, lines, stderr) = broker.wait_exit();
    assert!(status.success(), "exit {status}: {stderr}");
    let decisions: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with(r#"{"type":"decision""#))
        .collect();
    // The calls after `shutdown` that the broker had read are answered; it
    // need not read the rest (the pipe may hand them over later).
    assert!((300..=340).contains(&decisions.len()), "{stderr}");
    for (i, line) in decisions.iter().take(300).enumerate() {
        assert!(
            line.contains(&format!(r#""callID":"a{i}","decision":"allow""#)),
            "{line}"
        );
    }
    // What was read after `shutdown` is denied, not dropped; whatever of it
    // shared the batch of the `shutdown` is answered in order.
    for (i, line) in decisions.iter().skip(300).enumerate() {
        assert!(
            line.contains(&format!(
                r#""callID":"b{i}","decision":"deny","source":"shutdown""#
            )),
            "{line}"
        );
    }
}

/// `toolgate --mode readonly` in `root`, fed `calls` lines (`line(i)` for
/// the i-th, written in one go while its output is read), so a test can act
/// in the middle of the flood.
#[cfg(unix)]
struct Flood {
    child: std::process::Child,
    writer: std::thread::JoinHandle<()>,
    reader: std::thread::JoinHandle<Vec<String>>,
    thousand: std::sync::mpsc::Receiver<()>,
}

#[cfg(unix)]
impl Flood {
    fn start(root: &std::path::Path, calls: usize, line: fn(usize) -> String) -> Flood {
        use std::io::BufRead;
        use std::process::{Command, Stdio};

        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["--mode", "readonly"])
            .current_dir(root)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            for i in 0..calls {
                bytes.extend_from_slice(line(i).as_bytes());
                bytes.push(b'\n');
            }
            // A broker that exits mid-flood breaks the pipe; the test
            // counts the decisions.
            let _ = stdin.write_all(&bytes);
        });
        let stdout = child.stdout.take().unwrap();
        let (seen, thousand) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(stdout).lines() {
                lines.push(line.unwrap());
                if lines.len() == 1_000 {
                    let _ = seen.send(());
                }
            }
            lines
        });
        Flood {
            child,
            writer,
            reader,
            thousand,
        }
    }

    /// Wait until a thousand frames are out: the flood is under way.
    fn under_way(&self) {
        self.thousand.recv().unwrap();
    }

    fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit status, the decisions (after `ready`) and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<serde_json::Value>, String) {
        let status = self.child.wait().unwrap();
        let lines = self.reader.join().unwrap();
        self.writer.join().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let decisions = lines
            .iter()
            .skip(1)
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (status, decisions, stderr)
    }
}

#[cfg(unix)]
#[test]
fn sigterm_in_a_long_flood_is_acted_on_at_once() {
    let root = support::project_dir("pipeline-sigterm");
    const CALLS: usize = 200_000;
    // The flood goes on while the signal comes: the worker decides batch
    // after batch, and the signal must not wait for the end of it.
    let flood = Flood::start(&root, CALLS, |i| {
        format!(
            "{{\"type\":\"tool_call\",\"callID\":\"c{i}\",\"tool\":\"read\",\"input\":{{\"file_path\":\"src/f{}.rs\"}}}}",
            i % 50
        )
    });
    flood.under_way();
    flood.signal("TERM");
    let (status, decisions, stderr) = flood.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("SIGTERM received"), "{stderr}");
    // In order, each call once, none skipped: a prefix of what was sent.
    for (i, decision) in decisions.iter().enumerate() {
        assert_eq!(decision["callID"], format!("c{i}"), "{decision}");
    }
    // Acted on while the flood was still coming: the calls already read
    // when the signal came are denied as the broker shuts down, and it reads
    // no more (it ends long before the flood would).
    let denied = decisions
        .iter()
        .filter(|decision| decision["source"] == "shutdown")
        .count();
    assert!(
        denied > 0 && decisions.len() < CALLS,
        "{} decisions, {denied} for the shutdown: {stderr}",
        decisions.len()
    );
}

/// In a flood the reading thread prepares calls under the policy it knows
/// (what the policy alone decides: here, which shell words a read rule
/// guards) while the worker is busy. A SIGHUP reload in the middle must
/// not let a call prepared under the old policy be decided by it: from the
/// first call decided under the new policy on, every call is.
#[cfg(unix)]
#[test]
fn a_reload_in_a_flood_judges_every_later_call_under_the_new_policy() {
    let root = support::project_dir("pipeline-reload");
    let policy = root.join("toolgate.json");
    std::fs::write(&policy, "{}").unwrap();
    const CALLS: usize = 100_000;
    let flood = Flood::start(&root, CALLS, |i| {
        format!(
            "{{\"type\":\"tool_call\",\"callID\":\"c{i}\",\"tool\":\"Bash\",\"input\":{{\"command\":\"head -n {} notes/secret.txt\"}}}}",
            // No two calls in a row alike (that would be a doom loop).
            i % 100
        )
    });
    // Mid-flood: a thousand decisions out, most of the calls still to come.
    flood.under_way();
    std::fs::write(
        &policy,
        r#"{"permission":{"read":{"notes/secret.txt":"deny"}}}"#,
    )
    .unwrap();
    flood.signal("HUP");
    let (status, decisions, stderr) = flood.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("reloaded the policy"), "{stderr}");
    let verdicts: Vec<String> = decisions
        .iter()
        .enumerate()
        .map(|(i, decision)| {
            assert_eq!(decision["callID"], format!("c{i}"), "{decision}");
            format!("{} {}", decision["decision"], decision["source"])
        })
        .collect();
    assert_eq!(verdicts.len(), CALLS);
    let switch = verdicts
        .iter()
        .position(|verdict| verdict != r#""allow" "mode""#)
        .unwrap_or_else(|| panic!("the reload never took effect: {stderr}"));
    assert!((1_000..CALLS).contains(&switch), "switched at {switch}");
    // Once the new policy judges, it judges every call after.
    if let Some(stale) = verdicts[switch..]
        .iter()
        .position(|verdict| verdict != r#""deny" "rule""#)
    {
        panic!(
            "call c{} was judged `{}` after c{switch} was judged under the new policy",
            switch + stale,
            verdicts[switch + stale]
        );
    }
}

/// `toolgate serve` on this stdin, with the same project each time; its
/// stdout, with each question's `permissionID` (random) replaced by its
/// order of first appearance and its `timestamp` left out.
fn served(
    root: &std::path::Path,
    stdin: std::process::Stdio,
    feed: impl FnOnce(std::process::ChildStdin) + Send,
) -> String {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--project-root"])
        .arg(root)
        .current_dir(root)
        .env_remove("TOOLGATE_PERMISSION")
        .env_remove("TOOLGATE_MODE")
        .env_remove("TOOLGATE_STATE_DIR")
        .env("HOME", "/home/tester")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let input = child.stdin.take();
    let mut out = Vec::new();
    std::thread::scope(|scope| {
        if let Some(input) = input {
            scope.spawn(move || feed(input));
        }
        stdout.read_to_end(&mut out).unwrap();
    });
    assert!(child.wait().unwrap().success());
    let text = String::from_utf8(out).unwrap();
    let mut ids: Vec<String> = Vec::new();
    let key = "\"permissionID\":\"";
    let mut normal = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(key) {
        let start = at + key.len();
        let end = start + rest[start..].find('"').unwrap();
        let id = &rest[start..end];
        let index = match ids.iter().position(|known| known == id) {
            Some(index) => index,
            None => {
                ids.push(id.to_string());
                ids.len() - 1
            }
        };
        normal.push_str(&rest[..start]);
        normal.push_str(&format!("p{index}"));
        rest = &rest[end..];
    }
    normal.push_str(rest);
    let key = "\"timestamp\":";
    let mut plain = String::new();
    let mut rest = normal.as_str();
    while let Some(at) = rest.find(key) {
        let start = at + key.len();
        let end = start + rest[start..].find(',').unwrap();
        plain.push_str(&rest[..at]);
        rest = &rest[end + 1..];
    }
    plain.push_str(rest);
    plain
}

#[test]
fn a_pipe_fed_in_pieces_and_pauses_is_answered_as_a_file_is() {
    // Through the binary: a pipe is read by the owner itself while lines
    // come one at a time and by the reader thread in a flood, the reading
    // handed back and forth; a file is read by the thread alone.
    let root = support::project_dir("pipeline-pipe-vs-file");
    let lines = mixed_lines(3000, 0x2545_f491_4f6c_dd1d);
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    let file = root.join("input.jsonl");
    std::fs::write(&file, &bytes).unwrap();
    let want = served(&root, std::fs::File::open(&file).unwrap().into(), |_| {});
    assert!(want.lines().count() > 2000, "{want}");
    // (largest piece, one pause in how many pieces, longest pause in µs)
    for (most, every, pause, seed) in [
        (1 << 16, 1, 0, 11),
        (300, 1, 300, 12),
        (40, 3, 100, 13),
        (5_000, 4, 2_000, 14),
        (70_000, 2, 5_000, 15),
    ] {
        let bytes = &bytes;
        let got = served(&root, std::process::Stdio::piped(), move |mut input| {
            let mut rng = Rng(seed);
            let mut at = 0;
            while at < bytes.len() {
                let size = (1 + rng.below(most) as usize).min(bytes.len() - at);
                if input.write_all(&bytes[at..at + size]).is_err() {
                    return;
                }
                at += size;
                if pause > 0 && rng.below(every) == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(rng.below(pause)));
                }
            }
        });
        assert!(
            got == want,
            "pieces of up to {most} bytes: {}",
            first_difference(got.as_bytes(), want.as_bytes())
        );
    }
}
