//! Arbitrary bytes as a stream of input lines, fed to a broker exactly as
//! `toolgate serve` feeds it (`transport::lines::Reader` and `lines::handle_line`):
//! never a panic, every `tool_call` with a readable `callID` gets exactly one
//! answer, and nothing is allowed from a line that did not decode.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/toolgate/tests/it/support/frame_invariant.rs"]
mod frame_invariant;

fuzz_target!(|data: &[u8]| {
    // A small frame limit, so that lines over it are exercised too.
    let broker = frame_invariant::broker(toolgate::broker::OnAsk::Wait);
    if let Err(problem) = frame_invariant::feed(broker, data, 512) {
        panic!("{problem}\ninput: {:?}", String::from_utf8_lossy(data));
    }
});
