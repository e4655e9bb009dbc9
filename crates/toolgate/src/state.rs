//! Placeholder: replaced by the state-directory module (branch `state`).

use serde::{Deserialize, Serialize};

/// Everything that survives a restart for one project root.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Format version.
    pub version: u32,
    /// The project root.
    #[serde(rename = "projectRoot")]
    pub project_root: String,
    /// Grants kept for every session of the project.
    #[serde(rename = "projectGrants")]
    pub project_grants: Vec<StoredGrant>,
    /// Sessions.
    pub sessions: Vec<StoredSession>,
}

/// A grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredGrant {
    /// Id.
    #[serde(rename = "grantID")]
    pub grant_id: String,
    /// Permission.
    pub permission: String,
    /// Pattern.
    pub pattern: String,
    /// Literal prefix length.
    pub literal: usize,
    /// Granting session.
    #[serde(rename = "sessionID")]
    pub session_id: String,
}

/// A session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSession {
    /// Id.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Parent.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Own mode.
    pub mode: String,
    /// Own narrowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<toolgate_protocol::ScopeSpec>,
    /// Grants.
    pub grants: Vec<StoredGrant>,
}

/// Where snapshots go.
pub trait Store: Send {
    /// Save atomically.
    fn save(&mut self, snapshot: &Snapshot) -> Result<(), String>;
}
