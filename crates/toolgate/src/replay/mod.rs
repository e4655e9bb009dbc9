//! `toolgate replay`: recorded sessions fed through a fresh broker,
//! deterministically. Each format's reader turns a file into a
//! [`record::Recording`]; the driver feeds its frames to the broker core
//! and answers the questions it asks from the recorded outcomes.

pub mod record;
