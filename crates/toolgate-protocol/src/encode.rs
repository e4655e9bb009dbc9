//! Writing frames. [`write_frame`] gives exactly the bytes `serde_json`
//! gives for a [`ServerFrame`]; a `decision`, the frame every call gets, is
//! written field by field (most of its strings need no escaping and are
//! copied whole), every other frame goes through `serde_json`.

#[cfg(test)]
use crate::Source;
use crate::{Decision, RuleRef, ServerFrame, Verdict};

/// Append `frame` as one JSON object (no newline) to `out`.
pub fn write_frame(out: &mut Vec<u8>, frame: &ServerFrame) -> serde_json::Result<()> {
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
    out.push(b'}');
}

/// A JSON string: copied whole when nothing in it needs escaping, else
/// escaped by `serde_json` itself (so the two can never differ).
fn string(out: &mut Vec<u8>, text: &str) {
    let plain = text
        .bytes()
        .all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\');
    if plain {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, text).is_err() {
        // Writing to a vector cannot fail; keep the frame valid regardless.
        out.extend_from_slice(b"\"\"");
    }
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
            }),
            message: extra.then(|| format!("m{text}")),
            reminder: extra.then(|| format!("<system-reminder>{text}</system-reminder>")),
        })
    }

    fn same(frame: &ServerFrame) {
        let mut ours = Vec::new();
        write_frame(&mut ours, frame).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(frame).unwrap()
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

    proptest! {
        #[test]
        fn any_decision_is_written_as_serde_writes_it(
            text in any::<String>(), rule in any::<bool>(), extra in any::<bool>()
        ) {
            same(&decision(&text, rule, extra));
        }
    }
}
