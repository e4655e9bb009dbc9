//! `schemas/*.schema.json` are generated from the protocol types; this test
//! fails when they drift. `UPDATE_EXPECT=1 cargo test -p toolgate-protocol`
//! rewrites them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::Path;

use toolgate_protocol::{ClientFrame, ServerFrame};

fn check(file: &str, schema: schemars::Schema) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas")
        .join(file);
    let mut actual = serde_json::to_string_pretty(&schema).unwrap();
    actual.push('\n');
    if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} is out of date with the protocol types; run `UPDATE_EXPECT=1 cargo test -p toolgate-protocol --test it schemas::`",
        path.display()
    );
}

#[test]
fn client_frames_schema_is_current() {
    check(
        "client-frame.schema.json",
        schemars::schema_for!(ClientFrame),
    );
}

#[test]
fn server_frames_schema_is_current() {
    check(
        "server-frame.schema.json",
        schemars::schema_for!(ServerFrame),
    );
}

/// Every frame the broker can write validates against its schema's shape:
/// a cheap structural check that the schema names each frame type.
#[test]
fn schemas_name_every_frame_type() {
    let server = serde_json::to_string(&schemars::schema_for!(ServerFrame)).unwrap();
    for kind in [
        "ready",
        "decision",
        "permission_request",
        "permission_resolved",
        "mode_changed",
        "session_started",
        "session_ended",
        "reminder",
        "grants",
        "error",
        "token_created",
        "tokens",
        "token_revoked",
    ] {
        assert!(
            server.contains(&format!("\"{kind}\"")),
            "server schema lacks {kind}"
        );
    }
    let client = serde_json::to_string(&schemars::schema_for!(ClientFrame)).unwrap();
    for kind in [
        "tool_call",
        "permission_response",
        "set_mode",
        "session_start",
        "session_end",
        "cancel",
        "get_reminder",
        "list_grants",
        "revoke_grant",
        "shutdown",
        "create_token",
        "list_tokens",
        "revoke_token",
    ] {
        assert!(
            client.contains(&format!("\"{kind}\"")),
            "client schema lacks {kind}"
        );
    }
}

/// link-assistant/agent's clients answer with `permission_id`: the schema
/// takes either spelling, exactly one of them, as the decoder does.
#[test]
fn permission_response_schema_takes_either_id_spelling() {
    let schema = serde_json::to_value(schemars::schema_for!(ClientFrame)).unwrap();
    let response = &schema["$defs"]["PermissionResponse"];
    assert_eq!(response["properties"]["permission_id"]["type"], "string");
    assert_eq!(response["properties"]["permissionID"]["type"], "string");
    assert_eq!(response["required"], serde_json::json!(["response"]));
    assert_eq!(
        response["oneOf"],
        serde_json::json!([{"required": ["permissionID"]}, {"required": ["permission_id"]}])
    );
}
