//! What the policy asks the disk, answered here so that the policy and
//! shell crates stay pure.
//!
//! - [`repo`]: which repository a git command would use, and what its
//!   configuration and index say (the `RepoOracle`).
//! - [`globs`]: shell globs expanded on the disk, bounded, and links
//!   watched for changes (the `GlobOracle`).

pub mod globs;
pub mod repo;
