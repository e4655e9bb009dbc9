//! The one line codec every transport reads with: JSON lines of at most a
//! given length, bytes rather than text (a line that is not UTF-8 is the
//! broker's to reject, with its line number), and a line over the limit
//! consumed and discarded piece by piece, never held whole, keeping only
//! what its first bytes said (the `callID` of a `tool_call` is denied
//! rather than left waiting).
//!
//! [`LineCodec`] is a `tokio_util::codec::Decoder`, so a socket's task and
//! the blocking stdin reader ([`Reader`]) frame the same way. tokio-util's
//! own `LinesCodec` does not fit: it yields `String`s (a line that is not
//! UTF-8 would be an I/O error, not a frame error with its number), and a
//! line over its maximum is lost whole, so the call it began could not be
//! answered.
//!
//! The limit counts a line without its `\n` or `\r\n`; the `\r` stays in
//! the line (the decoder skips it as whitespace). A last line without `\n`
//! still counts. A UTF-8 byte order mark is skipped at the very start of the
//! input only ([`decode`], line 1).

use std::io::{self, Read};

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;
use toolgate_protocol::ErrorCode;

use crate::broker::{Broker, ConnId, Decoded, Input, Output};

/// One line from the reader, or what happened instead.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<B = Vec<u8>> {
    /// A complete line without its `\n`.
    Data(B),
    /// A line longer than the limit; it was skipped without being buffered
    /// whole. Holds what could be read in its first `max` bytes.
    TooLarge(Start),
}

impl<B: AsRef<[u8]>> Line<B> {
    /// The line with its bytes borrowed.
    pub fn as_slice(&self) -> Line<&[u8]> {
        match self {
            Line::Data(bytes) => Line::Data(bytes.as_ref()),
            Line::TooLarge(start) => Line::TooLarge(start.clone()),
        }
    }
}

/// The ids read in the first `max` bytes of a line too long to keep: a
/// `tool_call` whose `callID` was read is denied rather than left waiting;
/// any other line gets an `error` frame carrying the ids that were read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Start {
    /// The line began a `tool_call`.
    pub tool_call: bool,
    /// Its `callID`.
    pub call_id: Option<String>,
    /// Its `sessionID`.
    pub session_id: Option<String>,
    /// Its `permissionID` (or `permission_id`).
    pub permission_id: Option<String>,
}

impl Start {
    /// The `(sessionID, callID)` of the `tool_call` the line began with, when
    /// its `callID` was read (the session is `main` when none was read).
    pub fn call(&self) -> Option<(String, String)> {
        if !self.tool_call {
            return None;
        }
        let session = self
            .session_id
            .as_deref()
            .unwrap_or(toolgate_protocol::DEFAULT_SESSION);
        Some((session.to_string(), self.call_id.clone()?))
    }

    /// The ids the first frame of `start` (a line, or its beginning) gives.
    fn of(start: &[u8]) -> Start {
        let found = toolgate_protocol::scan::scan(start);
        let Some(head) = found.heads.first() else {
            return Start::default();
        };
        Start {
            tool_call: head.is_tool_call(),
            call_id: head.call_id().map(str::to_string),
            session_id: head
                .session_id
                .as_ref()
                .and_then(toolgate_protocol::scan::Field::text)
                .map(str::to_string),
            permission_id: head.permission_id().map(str::to_string),
        }
    }
}

/// Lines of at most `max` bytes (see the module documentation).
#[derive(Debug)]
pub struct LineCodec {
    max: usize,
    /// How much of the buffer was already searched for `\n`.
    searched: usize,
    /// Inside a line over the limit: what its first bytes said.
    skipping: Option<Start>,
}

impl LineCodec {
    /// A codec for lines of at most `max` bytes.
    pub fn new(max: usize) -> LineCodec {
        LineCodec {
            max,
            searched: 0,
            skipping: None,
        }
    }

    /// A complete line waits in `buf` (the next [`Decoder::decode`] returns
    /// one without reading more).
    pub fn has_line(&self, buf: &BytesMut) -> bool {
        buf[self.searched.min(buf.len())..].contains(&b'\n')
    }

    /// A complete line of `len` bytes (without its `\n`) at the front of
    /// `buf`: the line, or what its start said when it is over the limit.
    fn finish(&self, buf: &mut BytesMut, len: usize) -> Line<Bytes> {
        let frame = match buf[..len].ends_with(b"\r") {
            true => len - 1,
            false => len,
        };
        if frame > self.max {
            let start = Start::of(&buf[..self.max.min(len)]);
            buf.advance(len);
            return Line::TooLarge(start);
        }
        Line::Data(buf.split_to(len).freeze())
    }
}

impl Decoder for LineCodec {
    type Item = Line<Bytes>;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Line<Bytes>>> {
        let from = self.searched.min(buf.len());
        match buf[from..].iter().position(|&byte| byte == b'\n') {
            Some(at) => {
                let end = from + at;
                self.searched = 0;
                let line = match self.skipping.take() {
                    Some(start) => {
                        buf.advance(end);
                        Line::TooLarge(start)
                    }
                    None => self.finish(buf, end),
                };
                buf.advance(1);
                Ok(Some(line))
            }
            None if self.skipping.is_some() => {
                buf.clear();
                self.searched = 0;
                Ok(None)
            }
            // One byte more than the limit may be held: the `\r` of a `\r\n`.
            None if buf.len() > self.max.saturating_add(1) => {
                self.skipping = Some(Start::of(&buf[..self.max]));
                buf.clear();
                self.searched = 0;
                Ok(None)
            }
            None => {
                self.searched = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Line<Bytes>>> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        self.searched = 0;
        if let Some(start) = self.skipping.take() {
            buf.clear();
            return Ok(Some(Line::TooLarge(start)));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let len = buf.len();
        Ok(Some(self.finish(buf, len)))
    }
}

/// How much a blocking [`Reader`] asks of its input at once.
pub const READ_CHUNK: usize = 1 << 16;

/// [`LineCodec`] over a blocking reader (stdin, a file, a test's bytes).
pub struct Reader<R> {
    input: R,
    codec: LineCodec,
    buf: BytesMut,
    /// What each read lands in, zeroed once: reading into `buf` directly
    /// would zero [`READ_CHUNK`] bytes per read (safe code cannot read into
    /// uninitialised memory), a cost a call made one at a time pays in full.
    scratch: Box<[u8]>,
    ended: bool,
    /// How many bytes the last read brought.
    last_read: usize,
}

impl<R: Read> Reader<R> {
    /// Lines of at most `max` bytes from `input`.
    pub fn new(input: R, max: usize) -> Reader<R> {
        Reader {
            input,
            codec: LineCodec::new(max),
            buf: BytesMut::with_capacity(READ_CHUNK),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            ended: false,
            last_read: 0,
        }
    }

    /// The next line, reading as much as it takes; `None` at end of input.
    pub fn next_line(&mut self) -> io::Result<Option<Line<Bytes>>> {
        loop {
            if self.ended {
                return self.codec.decode_eof(&mut self.buf);
            }
            if let Some(line) = self.codec.decode(&mut self.buf)? {
                return Ok(Some(line));
            }
            self.fill()?;
        }
    }

    /// A complete line is already read: [`Reader::next_line`] will not block.
    pub fn has_line(&self) -> bool {
        self.ended || self.codec.has_line(&self.buf)
    }

    /// How many bytes the last read brought ([`READ_CHUNK`] when it filled
    /// the buffer, so more may be waiting).
    pub fn last_read(&self) -> usize {
        self.last_read
    }

    /// Read once more from the input (end of input is remembered).
    fn fill(&mut self) -> io::Result<()> {
        loop {
            match self.input.read(&mut self.scratch) {
                Ok(count) => {
                    self.buf.extend_from_slice(&self.scratch[..count]);
                    self.ended = count == 0;
                    self.last_read = count;
                    return Ok(());
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

/// [`LineCodec`] over a tokio reader (the MCP server's stdin, a client's
/// connection to a broker).
pub struct AsyncReader<R> {
    input: R,
    codec: LineCodec,
    buf: BytesMut,
    ended: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> AsyncReader<R> {
    /// Lines of at most `max` bytes from `input`.
    pub fn new(input: R, max: usize) -> AsyncReader<R> {
        AsyncReader {
            input,
            codec: LineCodec::new(max),
            buf: BytesMut::with_capacity(READ_CHUNK),
            ended: false,
        }
    }

    /// The next line, reading as much as it takes; `None` at end of input.
    /// Cancel-safe: a line partly read stays buffered for the next call.
    pub async fn next_line(&mut self) -> io::Result<Option<Line<Bytes>>> {
        use tokio::io::AsyncReadExt;
        loop {
            if self.ended {
                return self.codec.decode_eof(&mut self.buf);
            }
            if let Some(line) = self.codec.decode(&mut self.buf)? {
                return Ok(Some(line));
            }
            self.buf.reserve(READ_CHUNK);
            self.ended = self.input.read_buf(&mut self.buf).await? == 0;
        }
    }
}

/// The UTF-8 byte order mark, skipped at the very start of the input only.
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decode one line (1-based `number`) as the broker reads it. A UTF-8 byte
/// order mark at the start of the first line is skipped; one anywhere else
/// makes its line malformed. Pure: any thread may decode.
pub fn decode(line: Line<&[u8]>, number: u64, max_frame_bytes: usize) -> Decoded {
    match line {
        Line::Data(bytes) => {
            let bytes = match number {
                1 => bytes.strip_prefix(BOM).unwrap_or(bytes),
                _ => bytes,
            };
            Decoded::line(bytes, number)
        }
        Line::TooLarge(start) => Decoded::unreadable(too_large(start, max_frame_bytes)),
    }
}

/// Hand one line (1-based `number`) from connection `conn` to the broker, as
/// the transports do ([`decode`], then the broker).
pub fn handle_line(
    broker: &mut Broker,
    conn: ConnId,
    line: Line<&[u8]>,
    number: u64,
    max_frame_bytes: usize,
    out: &mut Vec<Output>,
) {
    broker.step(
        Input::Decoded {
            conn,
            decoded: decode(line, number, max_frame_bytes),
            number,
        },
        out,
    );
}

/// What a line longer than the limit gets: a call is denied by its id; any
/// other line gets an error frame with the ids its beginning gave.
pub fn too_large(start: Start, max_frame_bytes: usize) -> toolgate_protocol::DecodeError {
    let tool_call = start.call().is_some();
    let message = if tool_call {
        format!("the frame is longer than the limit of {max_frame_bytes} bytes and was discarded")
    } else {
        format!(
            "the line is longer than the frame limit of {max_frame_bytes} bytes and was discarded"
        )
    };
    toolgate_protocol::DecodeError {
        code: ErrorCode::FrameTooLarge,
        message,
        call_id: start.call_id,
        permission_id: start.permission_id,
        session_id: start.session_id,
        tool_call,
        others: Box::default(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;

    /// The lines of `input` handed to the codec `piece` bytes at a time.
    fn lines_in_pieces(input: &[u8], max: usize, piece: usize) -> Vec<Line> {
        let mut codec = LineCodec::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in input.chunks(piece.max(1)) {
            buf.extend_from_slice(chunk);
            while let Some(line) = codec.decode(&mut buf).unwrap() {
                out.push(owned(line));
            }
        }
        while let Some(line) = codec.decode_eof(&mut buf).unwrap() {
            out.push(owned(line));
        }
        out
    }

    fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let whole = lines_in_pieces(input, max, usize::MAX);
        let mut reader = Reader::new(input, max);
        let mut read = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            read.push(owned(line));
        }
        assert_eq!(read, whole, "the blocking reader and the codec agree");
        whole
    }

    fn owned(line: Line<Bytes>) -> Line {
        match line {
            Line::Data(bytes) => Line::Data(bytes.to_vec()),
            Line::TooLarge(start) => Line::TooLarge(start),
        }
    }

    #[test]
    fn splits_lines_and_skips_oversized_ones() {
        let got = lines(b"ab\n0123456789\n\ncd\r\nlast", 5);
        assert_eq!(
            got,
            vec![
                Line::Data(b"ab".to_vec()),
                Line::TooLarge(Start::default()),
                Line::Data(Vec::new()),
                Line::Data(b"cd\r".to_vec()),
                Line::Data(b"last".to_vec()),
            ]
        );
        assert_eq!(
            lines(b"0123456789", 5),
            vec![Line::TooLarge(Start::default())]
        );
        assert_eq!(lines(b"", 5), Vec::<Line>::new());
    }

    /// However the input is cut into reads, the same lines come out.
    #[test]
    fn pieces_of_any_size_read_the_same_lines() {
        let inputs: [&[u8]; 6] = [
            b"ab\n0123456789\n\ncd\r\nlast",
            b"1234\n12345\n123456\n1234\r\n12345\r\n123456\r\n12345\r",
            b"{\"type\":\"tool_call\",\"callID\":\"c1\",\"tool\":\"read\"}\nok\n",
            b"0123456789",
            b"12345\r\r\n12345\r\n",
            b"",
        ];
        for input in inputs {
            for max in [5, 6, 40] {
                let whole = lines_in_pieces(input, max, usize::MAX);
                for piece in [1, 2, 3, 4, 7, 64] {
                    assert_eq!(
                        lines_in_pieces(input, max, piece),
                        whole,
                        "{:?} max {max} piece {piece}",
                        String::from_utf8_lossy(input)
                    );
                }
            }
        }
    }

    #[test]
    fn the_limit_counts_the_frame_without_its_terminator() {
        let data = |text: &[u8]| Line::Data(text.to_vec());
        assert_eq!(
            lines(
                b"1234\n12345\n123456\n1234\r\n12345\r\n123456\r\n12345\r",
                5
            ),
            vec![
                data(b"1234"),
                data(b"12345"),
                Line::TooLarge(Start::default()),
                data(b"1234\r"),
                data(b"12345\r"),
                Line::TooLarge(Start::default()),
                data(b"12345\r"),
            ]
        );
        assert_eq!(
            lines(b"12345\r\r\n", 5),
            vec![Line::TooLarge(Start::default())]
        );
    }

    #[test]
    fn a_call_too_large_keeps_its_call_id() {
        let frame = br#"{"type":"tool_call","sessionID":"k","callID":"c1","input":{"command":"aaaaaaaaaaaaaaaaaa"}}"#;
        let mut input = frame.to_vec();
        input.push(b'\n');
        let whole = Line::TooLarge(Start {
            tool_call: true,
            call_id: Some("c1".into()),
            session_id: Some("k".into()),
            permission_id: None,
        });
        assert_eq!(lines(&input, 60), vec![whole]);
        for piece in [1, 5, 61, 70] {
            assert_eq!(lines_in_pieces(&input, 60, piece), lines(&input, 60));
        }
        // Cut inside the callID: no call to deny.
        let cut = Start {
            tool_call: true,
            call_id: None,
            session_id: Some("k".into()),
            permission_id: None,
        };
        assert_eq!(cut.call(), None);
        assert_eq!(lines(&input, 44), vec![Line::TooLarge(cut)]);
        // Another frame's ids are kept for its error.
        let answer = br#"{"type":"permission_response","permission_id":"per_1","response":"once","message":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#;
        let mut input = answer.to_vec();
        input.push(b'\n');
        assert_eq!(
            lines(&input, 80),
            vec![Line::TooLarge(Start {
                tool_call: false,
                call_id: None,
                session_id: None,
                permission_id: Some("per_1".into()),
            })]
        );
    }
}
