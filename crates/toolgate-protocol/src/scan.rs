//! A tolerant reading of a line that did not decode: which frames it holds
//! (`type`, `callID`, `sessionID`, `permissionID` of each top-level object)
//! and the first thing in it that is not JSON.
//!
//! The broker owes every `tool_call` whose `callID` can be read a decision,
//! however broken the rest of the line is: a lone surrogate escape or an
//! out-of-range number in `input`, nesting deeper than the decoder goes, raw
//! bytes that are not UTF-8, a line cut short, characters after the frame or
//! a second frame on the same line. This reader finds those `callID`s.
//!
//! It reads the top level of each object strictly (key, `:`, value, `,`) and
//! steps over nested values without recursion: one pass over the bytes, a
//! depth counter, no allocation but the few strings it keeps. A line of any
//! length or depth cannot stall or crash it.

/// Nesting deeper than this fails the decoder (serde_json's recursion limit:
/// the frame object itself counts as the first level).
pub const MAX_DEPTH: usize = 127;

/// A top-level field of a frame, as the tolerant reader saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A string that could be read.
    Text(String),
    /// Present, but not a string, or a string that is not Unicode.
    Unreadable,
}

impl Field {
    /// The text, when it could be read.
    pub fn text(&self) -> Option<&str> {
        match self {
            Field::Text(text) => Some(text),
            Field::Unreadable => None,
        }
    }
}

/// One top-level object of a line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// `type` (the last one, when given twice).
    pub kind: Option<Field>,
    /// `callID` (the last one, when given twice).
    pub call_id: Option<Field>,
    /// Every `callID` before the last, when the key is given more than once:
    /// each is a call the client may be waiting on.
    pub earlier_call_ids: Vec<Field>,
    /// `sessionID`.
    pub session_id: Option<Field>,
    /// `permissionID`.
    pub permission_id: Option<Field>,
    /// `permission_id`, the accepted alias.
    pub permission_id_alias: Option<Field>,
    /// The first thing in this object that is not JSON, as a sentence.
    pub problem: Option<String>,
}

impl Head {
    /// True when the object says it is a `tool_call`.
    pub fn is_tool_call(&self) -> bool {
        self.kind.as_ref().and_then(Field::text) == Some("tool_call")
    }

    /// The `callID`, when it could be read.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_ref().and_then(Field::text)
    }

    /// The permission id, when exactly one spelling gives one (or both agree).
    pub fn permission_id(&self) -> Option<&str> {
        let canonical = self.permission_id.as_ref().map(Field::text);
        let alias = self.permission_id_alias.as_ref().map(Field::text);
        match (canonical, alias) {
            (Some(Some(id)), None) | (None, Some(Some(id))) => Some(id),
            (Some(Some(a)), Some(Some(b))) if a == b => Some(a),
            _ => None,
        }
    }
}

/// What the tolerant reader found on a line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The top-level objects, in order (the last one possibly cut short):
    /// the first, every `tool_call` with a readable `callID`, and the first
    /// other one after the first.
    pub heads: Vec<Head>,
    /// What is wrong with the line outside its objects (characters after the
    /// frame, a second frame, a line that ends inside the frame).
    pub problem: Option<String>,
}

/// Read a line tolerantly (without its `\n`; a trailing `\r` is ignored).
pub fn scan(line: &[u8]) -> Scan {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut reader = Reader {
        bytes: line,
        pos: 0,
    };
    let mut found = Scan::default();
    let mut kept_other = false;
    reader.whitespace();
    if reader.bytes[reader.pos..].starts_with(b"\xEF\xBB\xBF") {
        found.problem = Some("the line starts with a byte order mark".into());
        reader.pos += 3;
        reader.whitespace();
    }
    loop {
        match reader.peek() {
            None => break,
            Some(b'{') => {
                if !found.heads.is_empty() && found.problem.is_none() {
                    found.problem = Some("the line holds more than one frame".into());
                }
                let (head, complete) = reader.object();
                // Kept: the first object, every tool_call with a readable
                // callID and the first other one; a line of `{}{}{}...`
                // costs no memory per object.
                let call = head.is_tool_call() && head.call_id().is_some();
                if found.heads.is_empty() || call || !kept_other {
                    kept_other |= !found.heads.is_empty() && !call;
                    found.heads.push(head);
                }
                if !complete {
                    if found.problem.is_none() {
                        found.problem = Some(if reader.pos >= reader.bytes.len() {
                            "the line ends before the frame does".into()
                        } else {
                            format!(
                                "the frame is not JSON (unexpected {} at offset {})",
                                describe(reader.bytes[reader.pos]),
                                reader.pos
                            )
                        });
                    }
                    break;
                }
                reader.whitespace();
            }
            Some(byte) => {
                if found.problem.is_none() {
                    found.problem = Some(if found.heads.is_empty() {
                        format!(
                            "the line does not start with a frame object ({})",
                            describe(byte)
                        )
                    } else {
                        format!(
                            "the line has characters after the frame ({} at offset {})",
                            describe(byte),
                            reader.pos
                        )
                    });
                }
                break;
            }
        }
    }
    found
}

/// A byte, for a message.
fn describe(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!("`{}`", byte as char)
    } else {
        format!("byte 0x{byte:02x}")
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Where a problem is, for its sentence: "the input holds ...".
fn place(key: Option<&str>) -> String {
    match key {
        Some("input") => "the input".into(),
        Some(key) => format!("`{}`", truncate(key, 40)),
        None => "the frame".into(),
    }
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// One top-level object, from its `{`. Returns what it holds and whether
    /// it ended with its `}`.
    fn object(&mut self) -> (Head, bool) {
        let mut head = Head::default();
        self.pos += 1;
        self.whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return (head, true);
        }
        loop {
            self.whitespace();
            if self.peek() != Some(b'"') {
                return (head, false);
            }
            let key = self.string(true, None, &mut head.problem).ok();
            self.whitespace();
            if self.peek() != Some(b':') {
                return (head, false);
            }
            self.pos += 1;
            self.whitespace();
            let wanted = matches!(
                key.as_deref(),
                Some("type" | "callID" | "sessionID" | "permissionID" | "permission_id")
            );
            let field = if wanted && self.peek() == Some(b'"') {
                match self.string(true, key.as_deref(), &mut head.problem) {
                    Ok(text) => Some(Field::Text(text)),
                    Err(()) => Some(Field::Unreadable),
                }
            } else {
                if !self.value(key.as_deref(), &mut head.problem) {
                    return (head, false);
                }
                wanted.then_some(Field::Unreadable)
            };
            if let Some(field) = field {
                if key.as_deref() == Some("callID") {
                    if let Some(earlier) = head.call_id.take() {
                        head.earlier_call_ids.push(earlier);
                    }
                }
                let slot = match key.as_deref() {
                    Some("type") => &mut head.kind,
                    Some("callID") => &mut head.call_id,
                    Some("sessionID") => &mut head.session_id,
                    Some("permissionID") => &mut head.permission_id,
                    _ => &mut head.permission_id_alias,
                };
                *slot = Some(field);
            }
            self.whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return (head, true);
                }
                _ => return (head, false),
            }
        }
    }

    /// Step over one value (of the top-level field `key`) without recursion,
    /// noting the first problem in it. False when the line ends inside it or
    /// no value starts here.
    fn value(&mut self, key: Option<&str>, problem: &mut Option<String>) -> bool {
        // Levels opened inside this value; the frame object is one more.
        let mut depth: usize = 0;
        loop {
            self.whitespace();
            let Some(byte) = self.peek() else {
                return false;
            };
            match byte {
                b'{' | b'[' => {
                    depth += 1;
                    if depth + 1 > MAX_DEPTH && problem.is_none() {
                        *problem = Some(format!(
                            "{} nests deeper than {MAX_DEPTH} levels",
                            place(key)
                        ));
                    }
                    self.pos += 1;
                    continue;
                }
                b'}' | b']' => {
                    if depth == 0 {
                        return false;
                    }
                    depth -= 1;
                    self.pos += 1;
                    if depth == 0 {
                        return true;
                    }
                    continue;
                }
                b',' | b':' => {
                    if depth == 0 {
                        return false;
                    }
                    self.pos += 1;
                    continue;
                }
                b'"' => {
                    let _ = self.string(false, key, problem);
                    if self.pos >= self.bytes.len() {
                        return false;
                    }
                }
                b'-' | b'0'..=b'9' => {
                    let start = self.pos;
                    while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
                        self.pos += 1;
                    }
                    let token = &self.bytes[start..self.pos];
                    let out_of_range = std::str::from_utf8(token)
                        .ok()
                        .and_then(|text| text.parse::<f64>().ok())
                        .is_some_and(f64::is_infinite);
                    if out_of_range && problem.is_none() {
                        let text = String::from_utf8_lossy(token);
                        *problem = Some(format!(
                            "{} holds the number {}, which is out of range",
                            place(key),
                            truncate(&text, 40)
                        ));
                    }
                }
                b'a'..=b'z' | b'A'..=b'Z' => {
                    let start = self.pos;
                    while let Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9') = self.peek() {
                        self.pos += 1;
                    }
                    let word = &self.bytes[start..self.pos];
                    if !matches!(word, b"true" | b"false" | b"null") && problem.is_none() {
                        *problem = Some(format!(
                            "{} holds `{}`, which is not JSON",
                            place(key),
                            truncate(&String::from_utf8_lossy(word), 40)
                        ));
                    }
                }
                _ => {
                    let len = self.utf8_len();
                    if problem.is_none() {
                        *problem = Some(match len {
                            None => format!(
                                "{} holds the byte 0x{byte:02x}, which is not UTF-8",
                                place(key)
                            ),
                            Some(_) => format!(
                                "{} holds {}, which is not JSON",
                                place(key),
                                describe(byte)
                            ),
                        });
                    }
                    self.pos += len.unwrap_or(1);
                }
            }
            if depth == 0 {
                return true;
            }
        }
    }

    /// The length of the UTF-8 character at `pos`, or `None` when the bytes
    /// there are not UTF-8.
    fn utf8_len(&self) -> Option<usize> {
        let rest = &self.bytes[self.pos..];
        let len = match rest.first()? {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return None,
        };
        let chunk = rest.get(..len)?;
        std::str::from_utf8(chunk).ok().map(|_| len)
    }

    /// A string from its `"`, decoded when `keep` (escapes resolved). `Err`
    /// when it is not Unicode or the line ends inside it (then `pos` is at
    /// the end). The first problem is noted, placed in `key`.
    fn string(
        &mut self,
        keep: bool,
        key: Option<&str>,
        problem: &mut Option<String>,
    ) -> Result<String, ()> {
        let mut text = String::new();
        let mut readable = true;
        let note = |what: String, problem: &mut Option<String>| {
            if problem.is_none() {
                *problem = Some(format!("{} holds {what}", place(key)));
            }
        };
        self.pos += 1;
        loop {
            // A run of plain characters.
            let start = self.pos;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            let run = &self.bytes[start..self.pos];
            match std::str::from_utf8(run) {
                Ok(run) => {
                    if keep {
                        text.push_str(run);
                    }
                }
                Err(err) => {
                    readable = false;
                    let bad = run.get(err.valid_up_to()).copied().unwrap_or(0);
                    note(format!("the byte 0x{bad:02x}, which is not UTF-8"), problem);
                }
            }
            match self.peek() {
                None => return Err(()),
                Some(b'"') => {
                    self.pos += 1;
                    return if readable { Ok(text) } else { Err(()) };
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let Some(escape) = self.peek() else {
                        return Err(());
                    };
                    self.pos += 1;
                    let simple = match escape {
                        b'"' => Some('"'),
                        b'\\' => Some('\\'),
                        b'/' => Some('/'),
                        b'b' => Some('\u{8}'),
                        b'f' => Some('\u{c}'),
                        b'n' => Some('\n'),
                        b'r' => Some('\r'),
                        b't' => Some('\t'),
                        _ => None,
                    };
                    if let Some(ch) = simple {
                        if keep {
                            text.push(ch);
                        }
                        continue;
                    }
                    if escape != b'u' {
                        readable = false;
                        note(format!("an invalid escape \\{}", escape as char), problem);
                        continue;
                    }
                    let Some(unit) = self.hex4() else {
                        readable = false;
                        note("an invalid \\u escape".into(), problem);
                        continue;
                    };
                    match unit {
                        0xd800..=0xdbff => {
                            let low = if self.bytes[self.pos..].starts_with(b"\\u") {
                                let save = self.pos;
                                self.pos += 2;
                                match self.hex4() {
                                    Some(low @ 0xdc00..=0xdfff) => Some(low),
                                    _ => {
                                        self.pos = save;
                                        None
                                    }
                                }
                            } else {
                                None
                            };
                            match low {
                                Some(low) => {
                                    let code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                                    if keep {
                                        text.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                                    }
                                }
                                None => {
                                    readable = false;
                                    note(
                                        format!("a lone surrogate escape \\u{unit:04x}, which is not Unicode"),
                                        problem,
                                    );
                                }
                            }
                        }
                        0xdc00..=0xdfff => {
                            readable = false;
                            note(
                                format!(
                                    "a lone surrogate escape \\u{unit:04x}, which is not Unicode"
                                ),
                                problem,
                            );
                        }
                        _ => {
                            if keep {
                                text.push(char::from_u32(unit).unwrap_or('\u{fffd}'));
                            }
                        }
                    }
                }
                Some(byte) => {
                    // A control character inside a string.
                    readable = false;
                    note(
                        format!("the control character U+{byte:04X} unescaped in a string"),
                        problem,
                    );
                    self.pos += 1;
                }
            }
        }
    }

    /// Four hex digits after `\u`.
    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        if !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return None;
        }
        let unit = u32::from_str_radix(text, 16).ok()?;
        self.pos += 4;
        Some(unit)
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), with `…`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
