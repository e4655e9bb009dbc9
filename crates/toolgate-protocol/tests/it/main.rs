//! The integration tests of `toolgate-protocol`, one binary (`--test it`) with
//! a module per area: `cargo test -p toolgate-protocol --test it schemas::`
//! runs one area.

mod schemas;
