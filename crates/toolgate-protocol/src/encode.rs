//! Writing frames. [`write_line`] gives exactly the bytes `serde_json`
//! gives for a [`ServerFrame`], and a newline; a `decision`, the frame every call gets, is
//! written field by field (most of its strings need no escaping and are
//! copied whole), every other frame goes through `serde_json`.

#[cfg(test)]
use crate::Source;
use crate::{Decision, RuleRef, ServerFrame, Verdict};

/// Append `frame` as one JSON line to `out`; on an error (a frame
/// `serde_json` cannot write) nothing is appended, so the lines already in
/// `out` stay whole and the transport goes on with the next frame.
pub fn write_line(out: &mut Vec<u8>, frame: &ServerFrame) -> serde_json::Result<()> {
    let start = out.len();
    match write_frame(out, frame) {
        Ok(()) => {
            out.push(b'\n');
            Ok(())
        }
        Err(err) => {
            out.truncate(start);
            Err(err)
        }
    }
}

fn write_frame(out: &mut Vec<u8>, frame: &ServerFrame) -> serde_json::Result<()> {
    match frame {
        ServerFrame::Decision(decision) => {
            write_decision(out, decision);
            Ok(())
        }
        other => serde_json::to_writer(out, other),
    }
}

fn write_decision(out: &mut Vec<u8>, decision: &Decision) {
    out.extend_from_slice(b"{\"type\":\"decision\",\"sessionID\":");
    string(out, &decision.session_id);
    out.extend_from_slice(b",\"callID\":");
    string(out, &decision.call_id);
    out.extend_from_slice(match decision.decision {
        Verdict::Allow => b",\"decision\":\"allow\",\"source\":\"",
        Verdict::Deny => b",\"decision\":\"deny\",\"source\":\"",
    });
    out.extend_from_slice(decision.source.as_str().as_bytes());
    out.extend_from_slice(b"\",\"reason\":");
    string(out, &decision.reason);
    if let Some(rule) = &decision.rule {
        out.extend_from_slice(b",\"rule\":");
        rule_ref(out, rule);
    }
    if let Some(message) = &decision.message {
        out.extend_from_slice(b",\"message\":");
        string(out, message);
    }
    if let Some(reminder) = &decision.reminder {
        out.extend_from_slice(b",\"reminder\":");
        string(out, reminder);
    }
    if let Some(child) = &decision.child_session_id {
        out.extend_from_slice(b",\"childSessionID\":");
        string(out, child);
    }
    out.push(b'}');
}

fn rule_ref(out: &mut Vec<u8>, rule: &RuleRef) {
    out.extend_from_slice(b"{\"permission\":");
    string(out, &rule.permission);
    out.extend_from_slice(b",\"pattern\":");
    string(out, &rule.pattern);
    out.extend_from_slice(b",\"action\":");
    string(out, &rule.action);
    out.extend_from_slice(b",\"origin\":");
    string(out, &rule.origin);
    if let Some(expires_at) = rule.expires_at {
        out.extend_from_slice(b",\"expiresAt\":");
        out.extend_from_slice(expires_at.to_string().as_bytes());
    }
    out.push(b'}');
}

/// A JSON string, escaped as `serde_json` escapes it (`\"`, `\\`, `\b`,
/// `\f`, `\n`, `\r`, `\t`, `\u00xx` for the other control characters;
/// nothing else). The runs between escapes are found eight bytes at a time
/// and copied whole: the reminder of a plan-mode denial is some 1.5 KB with
/// a newline every line or so. The tests hold it to `serde_json`'s bytes.
fn string(out: &mut Vec<u8>, text: &str) {
    if text.len() >= MEMO_MIN {
        memo_string(out, text);
    } else {
        escaped(out, text);
    }
}

/// Strings at least this long go through the memo.
const MEMO_MIN: usize = 256;

thread_local! {
    /// The last long string written and its JSON form. Long strings are the
    /// plan-mode reminder, the same text on every denial of a session in
    /// plan mode: written once, then copied.
    static MEMO: std::cell::RefCell<(String, Vec<u8>)> =
        const { std::cell::RefCell::new((String::new(), Vec::new())) };
}

fn memo_string(out: &mut Vec<u8>, text: &str) {
    MEMO.with(|memo| match memo.try_borrow_mut() {
        Ok(mut memo) => {
            let (source, json) = &mut *memo;
            if source != text {
                source.clear();
                source.push_str(text);
                json.clear();
                escaped(json, text);
            }
            out.extend_from_slice(json);
        }
        Err(_) => escaped(out, text),
    });
}

fn escaped(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0;
    let mut at = 0;
    while let Some(found) = next_escape(bytes, at) {
        out.extend_from_slice(&bytes[run..found]);
        let byte = bytes[found];
        match escape(byte) {
            Some(b"\\u00") => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
            Some(escape) => out.extend_from_slice(escape),
            None => out.push(byte),
        }
        at = found + 1;
        run = at;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// Where the first byte at or after `at` that needs escaping is.
fn next_escape(bytes: &[u8], mut at: usize) -> Option<usize> {
    while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let marked = needs_escape(u64::from_le_bytes(*word));
        if marked != 0 {
            // The lowest marked byte is always one that needs escaping.
            return Some(at + marked.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = bytes.get(at..)?;
    tail.iter()
        .position(|&byte| escape(byte).is_some())
        .map(|offset| at + offset)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What `byte` is written as, when it is not written as itself (`\u00`
/// is followed by its two hex digits).
fn escape(byte: u8) -> Option<&'static [u8]> {
    Some(match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0c => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0..0x20 => b"\\u00",
        _ => return None,
    })
}

/// The bytes of `word` (little-endian) below 0x20, `"` or `\`, each marked
/// by its high bit. A borrow can also mark a byte above a marked one, never
/// below: the lowest mark is exact, and none means none. Bytes of 0x80 and
/// above are never marked.
fn needs_escape(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGH;
    let control = below(word, 0x20);
    let quote = below(word ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
    control | quote | backslash
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may panic

    use super::*;
    use proptest::prelude::*;

    fn decision(text: &str, rule: bool, extra: bool) -> ServerFrame {
        ServerFrame::Decision(Decision {
            session_id: format!("s{text}"),
            call_id: format!("c{text}"),
            decision: Verdict::Deny,
            source: Source::Rule,
            reason: format!("because {text}"),
            rule: rule.then(|| RuleRef {
                permission: "bash".into(),
                pattern: format!("{text} *"),
                action: "deny".into(),
                origin: "/p/toolgate.json".into(),
                expires_at: extra.then_some(1_795_489_383_934),
            }),
            message: extra.then(|| format!("m{text}")),
            reminder: extra.then(|| format!("<system-reminder>{text}</system-reminder>")),
            child_session_id: extra.then(|| format!("s{text}/task/c{text}")),
        })
    }

    /// Written after a line already in the buffer, which stays untouched.
    fn same(frame: &ServerFrame) {
        let mut ours = b"{\"before\":1}\n".to_vec();
        write_line(&mut ours, frame).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            format!(
                "{{\"before\":1}}\n{}\n",
                serde_json::to_string(frame).unwrap()
            )
        );
    }

    /// Every source and verdict, the optional fields, and the texts that
    /// need escaping (quotes, backslashes, every control character, DEL,
    /// non-ASCII, a line separator).
    #[test]
    fn decisions_are_written_as_serde_writes_them() {
        let texts = [
            "",
            "plain",
            "a \"quoted\" word",
            "back\\slash",
            "tab\there",
            "nl\n",
            "\u{1}\u{1f}",
            "\u{7f}",
            "é ü 日本",
            "\u{2028}",
            "</script>",
        ];
        for text in texts {
            for (rule, extra) in [(false, false), (true, false), (true, true)] {
                same(&decision(text, rule, extra));
            }
        }
        for control in 0u8..0x20 {
            same(&decision(&char::from(control).to_string(), true, true));
        }
        let sources = [
            Source::Mode,
            Source::Rule,
            Source::Grant,
            Source::User,
            Source::Scope,
            Source::Timeout,
            Source::Cancel,
            Source::Shutdown,
            Source::Invalid,
            Source::Replay,
        ];
        for source in sources {
            for verdict in [Verdict::Allow, Verdict::Deny] {
                let mut frame = decision("x", false, false);
                if let ServerFrame::Decision(d) = &mut frame {
                    d.source = source;
                    d.decision = verdict;
                }
                same(&frame);
            }
        }
    }

    /// Every byte that needs escaping (and its neighbours that do not), at
    /// every place of the eight-byte words the escaper reads, in runs long
    /// enough to be skipped whole.
    #[test]
    fn escapes_are_found_wherever_they_fall() {
        let mut specials: Vec<String> = (0u8..0x20).map(|c| char::from(c).to_string()).collect();
        specials.extend(
            [
                "\"", "\\", "\u{1f}", " ", "!", "#", "[", "]", "\u{7f}", "é", "日", "\u{2028}",
            ]
            .map(String::from),
        );
        for special in &specials {
            for before in 0..20 {
                for after in [0, 1, 7, 8, 9, 17] {
                    let text = format!("{}{special}{}", "a".repeat(before), "é".repeat(after));
                    let mut ours = Vec::new();
                    string(&mut ours, &text);
                    assert_eq!(
                        String::from_utf8(ours).unwrap(),
                        serde_json::to_string(&text).unwrap(),
                        "{text:?}"
                    );
                }
            }
        }
    }

    /// Long strings (the memo's): the same one twice, another, the first
    /// again; each as serde writes it.
    #[test]
    fn long_strings_are_remembered_and_never_confused() {
        let first = format!(
            "<system-reminder>\n{}\n\"x\"</system-reminder>",
            "plan ".repeat(80)
        );
        let second = format!("{}\t", &first[..first.len() - 1]);
        let short = "short \"one\"".to_string();
        for text in [&first, &first, &second, &short, &first, &second, &second] {
            let mut ours = Vec::new();
            string(&mut ours, text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(text).unwrap()
            );
        }
    }

    proptest! {
        #[test]
        fn long_strings_full_of_escapes_are_written_as_serde_writes_them(
            texts in proptest::collection::vec("[a-z \"\\\\\n\u{0}-\u{1f}é]{250,300}", 1..4)
        ) {
            for text in texts.iter().chain(texts.iter().rev()) {
                let mut ours = Vec::new();
                string(&mut ours, text);
                prop_assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(text).unwrap());
            }
        }

        #[test]
        fn strings_full_of_escapes_are_written_as_serde_writes_them(
            text in "[a-z \"\\\\\n\t\r\u{0}-\u{1f}\u{7f}é日]{0,120}"
        ) {
            let mut ours = Vec::new();
            string(&mut ours, &text);
            prop_assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn any_decision_is_written_as_serde_writes_it(
            text in any::<String>(), rule in any::<bool>(), extra in any::<bool>()
        ) {
            same(&decision(&text, rule, extra));
        }
    }
}
