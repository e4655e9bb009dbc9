//! Load for `toolgate serve --listen unix:PATH`, for `scripts/bench`.
//!
//! ```text
//! socket_load flood SOCKET CORPUS CONNECTIONS
//! socket_load latency SOCKET CALLS [--pending]
//! ```
//!
//! `flood`: the corpus's lines are dealt round-robin to CONNECTIONS
//! connections, each writing its share as fast as the broker takes it while
//! another thread reads its decisions; prints the wall time from the first
//! write to the last decision and the calls per second.
//!
//! `latency`: one connection sends CALLS reads one at a time, each after the
//! answer to the one before, and prints p50 and p99 of the round trip in
//! microseconds. With `--pending`, another connection first makes a call that
//! asks (a `write`, the broker in ask mode) and leaves its question open for
//! the whole run: the figures show whether it holds anyone else up.
//!
//! A bench tool, not part of toolgate: it exits with a message on any
//! unexpected frame or I/O error.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench tool reports its figures

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("flood") if args.len() == 4 => match args[3].parse() {
            Ok(connections) => flood(&args[1], &args[2], connections),
            Err(err) => Err(format!("CONNECTIONS: {err}")),
        },
        Some("latency") if args.len() >= 3 => match args[2].parse() {
            Ok(calls) => latency(
                &args[1],
                calls,
                args.get(3).map(String::as_str) == Some("--pending"),
            ),
            Err(err) => Err(format!("CALLS: {err}")),
        },
        _ => Err(
            "usage: socket_load flood SOCKET CORPUS CONNECTIONS | latency SOCKET CALLS [--pending]"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("socket_load: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Connect and read the `ready` line.
fn connect(socket: &str) -> Result<(UnixStream, BufReader<UnixStream>), String> {
    let stream = UnixStream::connect(socket).map_err(|err| format!("{socket}: {err}"))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|err| err.to_string())?);
    let mut ready = String::new();
    reader
        .read_line(&mut ready)
        .map_err(|err| err.to_string())?;
    if !ready.contains("\"ready\"") {
        return Err(format!("expected ready, got {ready}"));
    }
    Ok((stream, reader))
}

fn flood(socket: &str, corpus: &str, connections: usize) -> Result<(), String> {
    let text = std::fs::read(corpus).map_err(|err| format!("{corpus}: {err}"))?;
    let mut shares: Vec<Vec<u8>> = vec![Vec::new(); connections.max(1)];
    let mut counts = vec![0usize; shares.len()];
    for (i, line) in text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let share = i % shares.len();
        shares[share].extend_from_slice(line);
        shares[share].push(b'\n');
        counts[share] += 1;
    }
    let mut peers = Vec::new();
    for _ in 0..shares.len() {
        peers.push(connect(socket)?);
    }
    let start = Instant::now();
    let mut threads = Vec::new();
    for ((share, count), (mut stream, mut reader)) in
        shares.into_iter().zip(counts.clone()).zip(peers)
    {
        let writer = std::thread::spawn(move || stream.write_all(&share).map(|()| stream));
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let mut line = String::new();
            for _ in 0..count {
                line.clear();
                if reader.read_line(&mut line).map_err(|err| err.to_string())? == 0 {
                    return Err("the broker closed the connection early".to_string());
                }
            }
            writer
                .join()
                .map_err(|_| "a writer failed".to_string())?
                .map_err(|err| err.to_string())?;
            Ok(())
        }));
    }
    for thread in threads {
        thread.join().map_err(|_| "a reader failed".to_string())??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let calls: usize = counts.iter().sum();
    println!(
        "{connections} connections: {calls} calls in {elapsed:.3}s ({:.0}/s)",
        calls as f64 / elapsed
    );
    Ok(())
}

fn latency(socket: &str, calls: usize, pending: bool) -> Result<(), String> {
    // Kept open (and unanswered) until the end of the run.
    let _asker = if pending {
        let (mut stream, mut reader) = connect(socket)?;
        stream
            .write_all(b"{\"type\":\"tool_call\",\"callID\":\"held\",\"sessionID\":\"other\",\"tool\":\"write\",\"input\":{\"file_path\":\"held.txt\",\"content\":\"x\"}}\n")
            .map_err(|err| err.to_string())?;
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|err| err.to_string())?;
        if !line.contains("permission_request") {
            return Err(format!("the held call was not asked about: {line}"));
        }
        Some((stream, reader))
    } else {
        None
    };
    let (mut stream, mut reader) = connect(socket)?;
    let mut times = Vec::with_capacity(calls);
    let mut line = String::new();
    for i in 0..calls {
        let call = format!(
            "{{\"type\":\"tool_call\",\"callID\":\"l-{i}\",\"sessionID\":\"s\",\"tool\":\"read\",\"input\":{{\"file_path\":\"src/f{}.rs\"}}}}\n",
            i % 50
        );
        let start = Instant::now();
        stream
            .write_all(call.as_bytes())
            .map_err(|err| err.to_string())?;
        line.clear();
        reader.read_line(&mut line).map_err(|err| err.to_string())?;
        times.push(start.elapsed());
        if !line.contains("\"decision\"") {
            return Err(format!("expected a decision, got {line}"));
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "latency{}: {calls} calls p50 {:.1}us p99 {:.1}us",
        if pending {
            " with a question pending"
        } else {
            ""
        },
        micros(at(0.50)),
        micros(at(0.99))
    );
    Ok(())
}
