//! The one-decision promise on near-valid frames (stable Rust; the libFuzzer
//! target `fuzz/fuzz_targets/frame.rs` checks the same on arbitrary bytes):
//! a valid `tool_call` corrupted inside its `input` (a lone surrogate, an
//! exponent out of range, nesting past the decoder's limit, bytes that are not
//! UTF-8, a line cut short, characters after the frame, a second frame) still
//! gets exactly one decision by its `callID`, and never `allow`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use proptest::prelude::*;
use toolgate::broker::OnAsk;

use crate::support::frame_invariant;

#[derive(Debug, Clone)]
enum Corruption {
    None,
    LoneSurrogate(u16),
    HugeExponent(u32),
    Deep(usize),
    BadByte(u8),
    Truncate(usize),
    TrailingJunk(String),
    SecondFrame,
    ControlChar(u8),
    NotJson(&'static str),
    Bom,
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        2 => Just(Corruption::None),
        2 => (0xd800u16..=0xdfff).prop_map(Corruption::LoneSurrogate),
        1 => (309u32..100_000).prop_map(Corruption::HugeExponent),
        1 => prop_oneof![126usize..140, Just(5_000usize)].prop_map(Corruption::Deep),
        1 => prop_oneof![Just(0xffu8), Just(0xc0), Just(0x80), Just(0xfe), Just(0xed)].prop_map(Corruption::BadByte),
        1 => (0usize..200).prop_map(Corruption::Truncate),
        1 => "[ -~]{1,8}".prop_map(Corruption::TrailingJunk),
        1 => Just(Corruption::SecondFrame),
        1 => (1u8..0x20).prop_filter("not a line end", |b| *b != b'\n' && *b != b'\r' && *b != b'\t').prop_map(Corruption::ControlChar),
        1 => prop_oneof![Just("NaN"), Just("Infinity"), Just("+1"), Just("'x'"), Just("undefined")].prop_map(Corruption::NotJson),
        1 => Just(Corruption::Bom),
    ]
}

/// One line: a `tool_call` with callID `c{index}`, corrupted as told. Returns
/// the bytes and whether the call must be denied as invalid.
fn line(
    index: usize,
    tool: &str,
    path: &str,
    session: Option<&str>,
    corruption: &Corruption,
) -> (Vec<u8>, bool) {
    let session = session
        .map(|s| format!(r#""sessionID":"{s}","#))
        .unwrap_or_default();
    let head = format!(
        r#"{{"type":"tool_call","callID":"c{index}",{session}"tool":"{tool}","input":{{"file_path":"#
    );
    let tail = r#","command":"ls"}}"#;
    let mut bytes = head.clone().into_bytes();
    let value: Vec<u8> = match corruption {
        Corruption::LoneSurrogate(unit) => format!(r#""{path}\u{unit:04x}""#).into_bytes(),
        Corruption::HugeExponent(exp) => format!("1e{exp}").into_bytes(),
        Corruption::Deep(depth) => {
            let mut v = vec![b'['; *depth];
            v.extend(std::iter::repeat_n(b']', *depth));
            v
        }
        Corruption::BadByte(byte) => {
            let mut v = format!(r#""{path}"#).into_bytes();
            v.push(*byte);
            v.push(b'"');
            v
        }
        Corruption::ControlChar(byte) => {
            let mut v = format!(r#""{path}"#).into_bytes();
            v.push(*byte);
            v.push(b'"');
            v
        }
        Corruption::NotJson(word) => word.as_bytes().to_vec(),
        _ => format!(r#""{path}""#).into_bytes(),
    };
    bytes.extend(value);
    bytes.extend(tail.as_bytes());
    let invalid = match corruption {
        Corruption::None => false,
        Corruption::Deep(depth) => *depth + 2 > 127,
        Corruption::Truncate(cut) => {
            // Cut after the callID, before the end.
            let start = head.find(r#","tool""#).unwrap().min(head.len());
            let keep = start + cut % (bytes.len() - start);
            bytes.truncate(keep);
            true
        }
        Corruption::TrailingJunk(junk) => {
            bytes.extend(junk.as_bytes());
            // Trailing whitespace is not junk.
            !junk.trim().is_empty()
        }
        Corruption::SecondFrame => {
            bytes.extend(br#"{"type":"set_mode","mode":"auto"}"#);
            true
        }
        Corruption::Bom => {
            let mut with = b"\xEF\xBB\xBF".to_vec();
            with.extend(bytes);
            bytes = with;
            // Skipped before the first frame only.
            index != 0
        }
        _ => true,
    };
    (bytes, invalid)
}

fn calls() -> impl Strategy<Value = Vec<(String, String, Option<String>, Corruption, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![
                Just("Read"),
                Just("Bash"),
                Just("Edit"),
                Just("Grep"),
                Just("mcp__x")
            ],
            "[a-z/._]{1,12}",
            prop::option::of(prop_oneof![Just("main"), Just("k"), Just("sub")]),
            corruption(),
            any::<bool>(),
        )
            .prop_map(|(tool, path, session, corruption, crlf)| {
                (
                    tool.to_string(),
                    path,
                    session.map(str::to_string),
                    corruption,
                    crlf,
                )
            }),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_readable_call_gets_one_decision(calls in calls()) {
        let mut input = Vec::new();
        let mut invalid = Vec::new();
        for (index, (tool, path, session, corruption, crlf)) in calls.iter().enumerate() {
            let (bytes, bad) = line(index, tool, path, session.as_deref(), corruption);
            input.extend(bytes);
            input.extend(if *crlf { &b"\r\n"[..] } else { &b"\n"[..] });
            invalid.push(bad);
        }
        // Asks denied at once: each call's decision comes on its own line.
        let tally = frame_invariant::feed(frame_invariant::broker(OnAsk::Deny), &input, 1 << 20)
            .map_err(|problem| TestCaseError::fail(format!("{problem}\ninput: {}", String::from_utf8_lossy(&input))))?;
        for (index, bad) in invalid.iter().enumerate() {
            let call = format!("c{index}");
            let decided: Vec<_> = tally.decided.iter().filter(|(id, _, _)| *id == call).collect();
            prop_assert_eq!(decided.len(), 1, "call {} got {:?}\ninput: {}", call, decided, String::from_utf8_lossy(&input));
            if *bad {
                prop_assert_eq!((decided[0].1.as_str(), decided[0].2.as_str()), ("deny", "invalid"),
                    "corrupted call {}\ninput: {}", call, String::from_utf8_lossy(&input));
            }
        }
        // The same stream with questions left open until the input ends.
        frame_invariant::feed(frame_invariant::broker(OnAsk::Wait), &input, 1 << 20)
            .map_err(TestCaseError::fail)?;
    }

    #[test]
    fn arbitrary_bytes_keep_the_promise(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        frame_invariant::feed(frame_invariant::broker(OnAsk::Wait), &bytes, 256)
            .map_err(TestCaseError::fail)?;
    }
}

/// What the fuzzer and the property tests found, kept.
#[test]
fn regressions() {
    let cases: &[&[u8]] = &[
        b"{\"type\":\"tool_call\",\"callID\":\"a\",\"tool\":\"Read\",\"input\":{\"file_path\":\"x\"}}{\"type\":\"tool_call\",\"callID\":\"a\"}\n",
        b"\xEF\xBB\xBF{\"type\":\"tool_call\",\"callID\":\"a\",\"tool\":\"Read\",\"input\":{\"file_path\":\"x\"}}\n",
        // The frame fuzz target, in CI: callID given twice owes both ids.
        b"{\"type\":\"tool_call\",\"callID\":\"tool_call\",\"callID\":\"p2\"}\r\n",
    ];
    // Found while attacking the binary: a tool_call longer than the frame
    // limit, a line of many empty objects, a byte order mark after line 1.
    let too_large = format!(
        "{{\"type\":\"tool_call\",\"callID\":\"big\",\"tool\":\"Bash\",\"input\":{{\"command\":\"{}\"}}}}\n",
        "x".repeat(400)
    );
    let empties = format!("{}\n", "{}".repeat(10_000));
    let cases: Vec<&[u8]> = cases
        .iter()
        .copied()
        .chain([
            too_large.as_bytes(),
            empties.as_bytes(),
            b"\n\xEF\xBB\xBF{\"type\":\"tool_call\",\"callID\":\"b\",\"tool\":\"Read\",\"input\":{}}\n",
        ])
        .collect();
    let tally = frame_invariant::feed(
        frame_invariant::broker(OnAsk::Wait),
        too_large.as_bytes(),
        256,
    )
    .unwrap();
    assert_eq!(
        tally.decided,
        [("big".to_string(), "deny".to_string(), "invalid".to_string())]
    );
    for case in cases {
        frame_invariant::feed(frame_invariant::broker(OnAsk::Wait), case, 256).unwrap_or_else(
            |problem| panic!("{problem}\ninput: {}", String::from_utf8_lossy(case)),
        );
    }
}
