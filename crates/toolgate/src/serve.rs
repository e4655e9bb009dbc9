//! The JSON-lines transport: one reader thread, and the broker loop, which is
//! the only writer. Generic over `std::io::Read`/`Write`, so tests can run it
//! over in-memory buffers and the binary over stdin/stdout.
//!
//! The reader thread blocks on input and hands over every line already
//! buffered in one batch; the loop runs on a single-threaded tokio runtime so
//! that question deadlines fire while input is idle, writes each batch's
//! answers and flushes once per batch. A lone call therefore crosses one thread
//! boundary on its way in and none on its way out.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::time::Duration;

use tokio::sync::mpsc;
use toolgate_protocol::ServerFrame;

use crate::broker::Broker;

/// One line from the reader, or what happened instead.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its `\n`.
    Data(Vec<u8>),
    /// A line longer than the limit; it was skipped without being buffered.
    TooLarge,
}

/// The most lines the reader hands over at once.
const BATCH: usize = 256;

/// Read one line of at most `max` bytes. Returns `None` at end of input. A
/// longer line is consumed and discarded chunk by chunk, never held whole.
pub fn read_line<R: BufRead>(reader: &mut R, max: usize) -> io::Result<Option<Line>> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_large = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if available.is_empty() {
            // End of input: a last line without `\n` still counts.
            return Ok(match (too_large, line.is_empty()) {
                (true, _) => Some(Line::TooLarge),
                (false, true) => None,
                (false, false) => Some(Line::Data(line)),
            });
        }
        let (chunk, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        if !too_large {
            if line.len() + chunk.len() > max {
                too_large = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(Some(if too_large {
                Line::TooLarge
            } else {
                Line::Data(line)
            }));
        }
    }
}

/// The reader thread: batches of lines until end of input or a read error.
fn read_lines<R: Read>(input: R, max_frame_bytes: usize, lines: mpsc::Sender<Vec<Line>>) {
    let mut reader = BufReader::with_capacity(1 << 16, input);
    loop {
        let mut batch = Vec::new();
        let mut ended = false;
        loop {
            match read_line(&mut reader, max_frame_bytes) {
                Ok(Some(line)) => batch.push(line),
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(err) => {
                    tracing::warn!(%err, "reading input failed; treating it as end of input");
                    ended = true;
                    break;
                }
            }
            // Hand over what is already buffered in one go; never wait for more.
            if batch.len() >= BATCH || reader.buffer().is_empty() {
                break;
            }
        }
        if !batch.is_empty() && lines.blocking_send(batch).is_err() {
            return;
        }
        if ended {
            return;
        }
    }
}

/// Serve one client: write `ready`, then answer frames until end of input or
/// `shutdown`; deny what is still pending, flush, return.
pub fn run<R, W>(input: R, output: W, mut broker: Broker, max_frame_bytes: usize) -> io::Result<()>
where
    R: Read + Send + 'static,
    W: Write,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let (line_tx, mut line_rx) = mpsc::channel::<Vec<Line>>(64);
    // The reader may stay blocked in `read` after a `shutdown` frame; it is
    // detached and ends with the process.
    std::thread::Builder::new()
        .name("toolgate-reader".into())
        .spawn(move || read_lines(input, max_frame_bytes, line_tx))?;

    let mut writer = BufWriter::with_capacity(1 << 16, output);
    let mut frames: Vec<ServerFrame> = vec![broker.ready()];
    write_frames(&mut writer, &mut frames)?;
    let mut number: u64 = 0;
    runtime.block_on(async {
        loop {
            let sleep = broker
                .next_deadline()
                .map(|deadline| Duration::from_millis(deadline.saturating_sub(broker.now_ms())));
            tokio::select! {
                batch = line_rx.recv() => match batch {
                    Some(batch) => {
                        for line in batch {
                            number += 1;
                            match line {
                                Line::Data(bytes) => broker.handle_line(&bytes, number, &mut frames),
                                Line::TooLarge => broker.frame_too_large(number, max_frame_bytes, &mut frames),
                            }
                            if broker.stopped() {
                                break;
                            }
                        }
                    }
                    None => broker.shutdown(&mut frames),
                },
                _ = tokio::time::sleep(sleep.unwrap_or_default()), if sleep.is_some() => {
                    broker.expire(&mut frames);
                }
            }
            write_frames(&mut writer, &mut frames)?;
            if broker.stopped() {
                return Ok(());
            }
        }
    })
}

/// Write and flush a batch of frames, one JSON line each.
fn write_frames<W: Write>(writer: &mut W, frames: &mut Vec<ServerFrame>) -> io::Result<()> {
    if frames.is_empty() {
        return Ok(());
    }
    for frame in frames.drain(..) {
        serde_json::to_writer(&mut *writer, &frame).map_err(io::Error::other)?;
        writer.write_all(b"\n")?;
    }
    writer.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, max).unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn splits_lines_and_skips_oversized_ones() {
        let got = lines(b"ab\n0123456789\n\ncd\r\nlast", 5);
        assert_eq!(
            got,
            vec![
                Line::Data(b"ab".to_vec()),
                Line::TooLarge,
                Line::Data(Vec::new()),
                Line::Data(b"cd\r".to_vec()),
                Line::Data(b"last".to_vec()),
            ]
        );
        assert_eq!(lines(b"0123456789", 5), vec![Line::TooLarge]);
        assert_eq!(lines(b"", 5), Vec::<Line>::new());
    }
}
