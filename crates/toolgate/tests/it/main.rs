//! The integration tests of `toolgate`, one binary (`--test it`) with a
//! module per area, so a test run links the crate once: `cargo test -p
//! toolgate --test it transcripts::` runs one area. `support` drives the real
//! binary (and holds the execution oracle and the option sweep).

mod support;

mod approver_command;
mod approver_tty;
mod audit;
mod binding;
mod bridges;
mod check_cli;
mod claude_bridge;
mod clients;
mod concurrency;
mod config_cli;
mod descriptors;
mod disk_full;
mod docs;
// The fleet's shared store (feature `fleet`), against a real PostgreSQL.
#[cfg(feature = "fleet")]
mod fleet_api;
#[cfg(feature = "fleet")]
mod fleet_remote;
#[cfg(feature = "fleet")]
mod fleet_share;
#[cfg(feature = "fleet")]
mod fleet_store;
#[cfg(feature = "fleet")]
mod fleet_tokens;
mod frames;
mod git_repository;
mod glob_disk;
mod grant_lifetimes;
mod grants_cli;
mod hook_cli;
mod hook_socket;
mod init_cli;
mod journal;
mod link_assistant;
mod link_bridge;
mod managed;
mod mcp;
mod observers;
mod opencode_cli;
mod oracle;
mod persistence;
mod pipeline;
mod plan_mechanisms;
mod policy_cli;
mod reminder_channels;
mod replay_cli;
mod replay_example;
mod replay_readers;
mod replay_stream;
mod robustness;
mod scope_chain;
mod sessions;
mod signals;
mod socket;
mod state;
mod stopped_broker;
mod transcripts;
mod untrusted_broker;
#[cfg(feature = "fleet")]
mod web; // the web approval page over HTTP (needs PostgreSQL)
#[cfg(feature = "fleet")]
mod web_browser; // the page in headless chromium (needs PostgreSQL and chromium)
mod wire;
mod wire_frames;
