//! The floor of the benchmarks: the least any JSON-lines broker must do for
//! a call. It reads each line, parses it as JSON, and writes one decision
//! naming the line's `callID`, with no policy at all; it flushes when no
//! more input is waiting, so a lone call is answered at once and a flood is
//! written in large blocks. `scripts/bench` reports toolgate's speed as
//! floor seconds / toolgate seconds on the same corpus, measured in the same
//! run (docs/contributing/benchmarks.md).
//!
//!     cargo run --release --example floor < corpus.jsonl > /dev/null

use std::io::{BufRead, BufReader, BufWriter, Write};

fn main() {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut input = BufReader::with_capacity(64 * 1024, stdin.lock());
    let mut output = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(frame) = serde_json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        let decision = serde_json::json!({
            "type": "decision",
            "callID": frame.get("callID").unwrap_or(&serde_json::Value::Null),
            "decision": "allow",
        });
        let written = serde_json::to_writer(&mut output, &decision)
            .map_err(std::io::Error::from)
            .and_then(|()| output.write_all(b"\n"));
        if written.is_err() || (input.buffer().is_empty() && output.flush().is_err()) {
            return;
        }
    }
    let _ = output.flush();
}
