//! The JSON-lines transport: one reader task, one writer task, and the broker
//! in between. Generic over `AsyncRead`/`AsyncWrite`, so tests can run it over
//! an in-memory pipe and the binary over stdin/stdout.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
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
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> io::Result<Option<Line>> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_large = false;
    loop {
        let available = reader.fill_buf().await?;
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

/// Serve one client: write `ready`, then answer frames until end of input or
/// `shutdown`; deny what is still pending, flush, return.
pub async fn run<R, W>(
    reader: R,
    writer: W,
    mut broker: Broker,
    max_frame_bytes: usize,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (line_tx, mut line_rx) = mpsc::channel::<Vec<Line>>(64);
    let reader_task = tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(1 << 16, reader);
        loop {
            let mut batch = Vec::new();
            loop {
                match read_line(&mut reader, max_frame_bytes).await {
                    Ok(Some(line)) => batch.push(line),
                    Ok(None) => {
                        if !batch.is_empty() {
                            let _ = line_tx.send(batch).await;
                        }
                        return Ok(());
                    }
                    Err(err) => {
                        if !batch.is_empty() {
                            let _ = line_tx.send(batch).await;
                        }
                        return Err(err);
                    }
                }
                // Hand over what is already buffered in one go; never wait for more.
                if batch.len() >= BATCH || reader.buffer().is_empty() {
                    break;
                }
            }
            if line_tx.send(batch).await.is_err() {
                return Ok(());
            }
        }
    });

    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer_task = tokio::spawn(write_frames(writer, out_rx));

    let mut frames: Vec<ServerFrame> = vec![broker.ready()];
    send(&out_tx, &mut frames).await;
    let mut number: u64 = 0;
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
        send(&out_tx, &mut frames).await;
        if broker.stopped() {
            break;
        }
    }
    drop(out_tx);
    drop(line_rx);
    reader_task.abort();
    match writer_task.await {
        Ok(result) => result,
        Err(err) => Err(io::Error::other(err)),
    }
}

async fn send(out: &mpsc::Sender<Vec<u8>>, frames: &mut Vec<ServerFrame>) {
    if frames.is_empty() {
        return;
    }
    let mut bytes = Vec::with_capacity(frames.len() * 256);
    for frame in frames.drain(..) {
        // Serializing these types cannot fail: every map key is a string.
        if serde_json::to_writer(&mut bytes, &frame).is_ok() {
            bytes.push(b'\n');
        } else {
            tracing::error!(?frame, "could not encode a frame");
        }
    }
    if out.send(bytes).await.is_err() {
        tracing::warn!("the writer has stopped; output is lost");
    }
}

/// The only code that writes to the output. Flushes whenever no more output
/// is queued, so a lone answer goes out at once and a flood is batched.
async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> io::Result<()> {
    while let Some(bytes) = rx.recv().await {
        writer.write_all(&bytes).await?;
        while let Ok(bytes) = rx.try_recv() {
            writer.write_all(&bytes).await?;
        }
        writer.flush().await?;
    }
    writer.flush().await?;
    writer.shutdown().await.or_else(|err| {
        // Closing stdout can fail harmlessly (a closed pipe); the data is flushed.
        tracing::debug!(%err, "closing the output");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, max).await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_skips_oversized_ones() {
        let got = lines(b"ab\n0123456789\n\ncd\r\nlast", 5).await;
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
        assert_eq!(lines(b"0123456789", 5).await, vec![Line::TooLarge]);
        assert_eq!(lines(b"", 5).await, Vec::<Line>::new());
    }
}
