//! The integration tests of `toolgate-policy`, one binary (`--test it`) with a
//! module per area: `cargo test -p toolgate-policy --test it glob_oracle::`
//! runs one area.

mod common;

mod batch;
mod evaluate;
mod glob_oracle;
mod layers;
mod managed;
mod mcp_caller;
mod plan_corpus;
mod registry;
mod reminder;
mod scope_properties;
mod shell_words;
mod subjects;
