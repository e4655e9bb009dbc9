//! The integration tests of `toolgate-shell`, one binary (`--test it`) with a
//! module per area: `cargo test -p toolgate-shell --test it corpus::` runs one
//! area. The corpus files (`tests/corpus.tsv`, `tests/corpus/`) are data, read
//! by `common`.

mod common;

mod awk;
mod corpus;
mod inner;
mod model;
mod patterns;
mod properties;
mod shells;
