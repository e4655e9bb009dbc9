//! Sessions and grants in the store, per project root.
//!
//! A session row is what the state directory keeps of a session (its
//! parent, its own mode, its narrowing, whether it was started) and
//! whether it is closed; a grant row is an `always` answer's pattern. A
//! revoked grant keeps its row with `revoked_at`, so every broker that held
//! it reads the revocation ([`Store::grants_since`]). Each row carries the
//! revision of its last change: a broker that reconnects reads what changed
//! since the last one it saw.

use std::time::SystemTime;

use tokio_postgres::Row;
pub use toolgate_protocol::GrantScope;

use super::questions::QuestionId;
use super::{get, Store, StoreError};

/// Why a session is closed: it may run no calls until it is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// It ended (`session_end`).
    Ended,
    /// Its `session_start` was refused.
    Refused,
}

impl Closed {
    /// As the store spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::Ended => "ended",
            Closed::Refused => "refused",
        }
    }
}

/// A session as a broker writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The project root it belongs to.
    pub project: String,
    /// Its id.
    pub session_id: String,
    /// Its parent's id.
    pub parent_id: Option<String>,
    /// Its own mode (`plan`, `auto`, ...), if set.
    pub mode: Option<String>,
    /// Its narrowing, as `session_start`'s `permissions` JSON.
    pub permissions: Option<serde_json::Value>,
    /// Whether a `session_start` for it succeeded.
    pub started: bool,
    /// Joined under its parent without a scope of its own: the narrowings
    /// of the parent's sub-tasks it met (`[{"sessionID", "permissions"}]`,
    /// as the state directory keeps them); `None` when it met none.
    pub joined: Option<serde_json::Value>,
}

/// What a session write changes ([`Store::put_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionWrite {
    /// A `session_start` (a delegation's child too): the whole record; it
    /// opens the session again if it was closed.
    Start {
        /// The start named a mode; without one an open session keeps the
        /// mode the store holds for it.
        mode_given: bool,
    },
    /// A `set_mode`: the mode only, and never on a closed session.
    Mode,
}

/// A session as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// What the broker wrote.
    pub record: SessionRecord,
    /// Whether, and why, it is closed.
    pub closed: Option<Closed>,
    /// When it was closed.
    pub closed_at: Option<SystemTime>,
    /// When it last changed (the store's clock).
    pub updated_at: SystemTime,
    /// The revision of its last change.
    pub revision: i64,
}

/// A grant as a broker writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewGrant {
    /// Its id (`grant_…`): writing the same id twice keeps the first.
    pub id: String,
    /// The project root it belongs to.
    pub project: String,
    /// The session whose `always` answer made it (a session grant: the
    /// session that holds it).
    pub session_id: String,
    /// Project or session grant.
    pub scope: GrantScope,
    /// The permission it answers.
    pub permission: String,
    /// The pattern.
    pub pattern: String,
    /// How many leading bytes of the pattern are literal.
    pub literal: u32,
    /// A plan-mode kind grant (covers only in plan mode).
    pub plan_only: bool,
    /// When it ends, if it does.
    pub expires_at: Option<SystemTime>,
    /// Who answered (a token's name), if known.
    pub made_by: Option<String>,
    /// The question whose answer made it, if any.
    pub question: Option<QuestionId>,
}

/// A grant as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What the broker wrote.
    pub grant: NewGrant,
    /// When it was written (the store's clock).
    pub created_at: SystemTime,
    /// When it was revoked, if it was.
    pub revoked_at: Option<SystemTime>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
    /// The revision of its last change.
    pub revision: i64,
}

const SESSION_COLUMNS: &str = "project, session_id, parent_id, mode, permissions, started, \
                               closed, closed_at, updated_at, revision, joined";

const GRANT_COLUMNS: &str = "id, project, session_id, scope, permission, pattern, literal, \
                             plan_only, expires_at, made_by, question_id, created_at, revoked_at, \
                             revoked_by, revision";

impl Store {
    /// Write `record` as `change` says, and return the row the store holds
    /// now (the write's revision, or, for a mode change refused because the
    /// session is closed, the closed row as it stands).
    ///
    /// - [`SessionWrite::Start`]: the whole record, opening the session
    ///   again if it was closed (only a start does). A start that names no
    ///   mode keeps the mode of an open session that has one, as a start on
    ///   a lone broker keeps the mode a session was given.
    /// - [`SessionWrite::Mode`]: only the mode of an open session; a closed
    ///   one is left closed and as it was. A session the store does not
    ///   hold is written whole.
    ///
    /// Field by field rather than compare-and-set on the revision: each
    /// write changes only what it means to change, under the row's lock,
    /// so two brokers racing never write back each other's stale fields,
    /// and the last committed mode is the store's (see
    /// [the fleet](../../../../docs/fleet.md#two-brokers-changing-one-session)).
    pub async fn put_session(
        &mut self,
        record: &SessionRecord,
        change: SessionWrite,
    ) -> Result<Session, StoreError> {
        let update = match change {
            SessionWrite::Start { .. } => {
                "parent_id = EXCLUDED.parent_id,
                 mode = CASE WHEN $8 OR toolgate_sessions.closed IS NOT NULL
                              OR toolgate_sessions.mode IS NULL
                        THEN EXCLUDED.mode ELSE toolgate_sessions.mode END,
                 permissions = EXCLUDED.permissions, started = EXCLUDED.started,
                 joined = EXCLUDED.joined, closed = NULL, closed_at = NULL, updated_at = now()"
            }
            SessionWrite::Mode => {
                "mode = EXCLUDED.mode, updated_at = now()
                 WHERE toolgate_sessions.closed IS NULL"
            }
        };
        let mode_given = matches!(change, SessionWrite::Start { mode_given: true });
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &record.project,
            &record.session_id,
            &record.parent_id,
            &record.mode,
            &record.permissions,
            &record.started,
            &record.joined,
            &mode_given,
        ];
        // A mode change names no `$8`.
        let params = match change {
            SessionWrite::Start { .. } => &params[..],
            SessionWrite::Mode => &params[..7],
        };
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let written = tx
            .query_opt(
                &format!(
                    "INSERT INTO toolgate_sessions
                       (project, session_id, parent_id, mode, permissions, started, joined)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (project, session_id) DO UPDATE SET {update}
                     RETURNING {SESSION_COLUMNS}"
                ),
                params,
            )
            .await
            .map_err(StoreError::from_query)?;
        let row = match written {
            Some(row) => row,
            // A mode change to a closed session: the row (locked by the
            // conflict since, so as it stands) is what the broker learns.
            None => tx
                .query_one(
                    &format!(
                        "SELECT {SESSION_COLUMNS} FROM toolgate_sessions
                         WHERE project = $1 AND session_id = $2"
                    ),
                    &[&record.project, &record.session_id],
                )
                .await
                .map_err(StoreError::from_query)?,
        };
        tx.commit().await.map_err(StoreError::from_query)?;
        session(&row)
    }

    /// Close a session (stored or not): it runs no calls until it is put
    /// again. Closing it again keeps the first time.
    pub async fn close_session(
        &mut self,
        project: &str,
        session_id: &str,
        why: Closed,
    ) -> Result<Session, StoreError> {
        let row = self
            .client
            .query_one(
                &format!(
                    "INSERT INTO toolgate_sessions (project, session_id, closed, closed_at)
                     VALUES ($1, $2, $3, now())
                     ON CONFLICT (project, session_id) DO UPDATE SET
                       closed = EXCLUDED.closed,
                       closed_at = coalesce(toolgate_sessions.closed_at, now()),
                       updated_at = now()
                     RETURNING {SESSION_COLUMNS}"
                ),
                &[&project, &session_id, &why.as_str()],
            )
            .await
            .map_err(StoreError::from_query)?;
        session(&row)
    }

    /// Every session of `project`, closed ones too, by id.
    pub async fn sessions(&mut self, project: &str) -> Result<Vec<Session>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM toolgate_sessions
                     WHERE project = $1 ORDER BY session_id"
                ),
                &[&project],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(session).collect()
    }

    /// Every session changed after `revision`, in the order of their changes.
    pub async fn sessions_since(
        &mut self,
        revision: i64,
        missing: &[i64],
    ) -> Result<Vec<Session>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM toolgate_sessions WHERE revision > $1
                      UNION ALL
                      SELECT {SESSION_COLUMNS} FROM toolgate_sessions
                      WHERE revision = ANY($2) AND revision <= $1
                      ORDER BY revision"
                ),
                &[&revision, &missing],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(session).collect()
    }

    /// Write a grant. Writing an id the store already holds changes
    /// nothing and returns what it holds, so a retried write is harmless.
    pub async fn add_grant(&mut self, grant: &NewGrant) -> Result<Grant, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        insert_grant(&tx, grant).await?;
        let row = tx
            .query_one(
                &format!("SELECT {GRANT_COLUMNS} FROM toolgate_grants WHERE id = $1"),
                &[&grant.id],
            )
            .await
            .map_err(StoreError::from_query)?;
        tx.commit().await.map_err(StoreError::from_query)?;
        read_grant(&row)
    }

    /// Revoke a grant, saying who did. The grant as it is now (revoked now
    /// or before: the first revocation's time and author stay), or `None`
    /// when the store holds no grant with that id.
    pub async fn revoke_grant(&mut self, id: &str, by: &str) -> Result<Option<Grant>, StoreError> {
        let revoked = self
            .client
            .query_opt(
                &format!(
                    "UPDATE toolgate_grants SET revoked_at = now(), revoked_by = $2
                     WHERE id = $1 AND revoked_at IS NULL RETURNING {GRANT_COLUMNS}"
                ),
                &[&id, &by],
            )
            .await
            .map_err(StoreError::from_query)?;
        // Not revoked now: read it afresh (a statement of its own, so a
        // revocation that another broker committed meanwhile is seen).
        let row = match revoked {
            Some(row) => Some(row),
            None => self
                .client
                .query_opt(
                    &format!("SELECT {GRANT_COLUMNS} FROM toolgate_grants WHERE id = $1"),
                    &[&id],
                )
                .await
                .map_err(StoreError::from_query)?,
        };
        row.as_ref().map(read_grant).transpose()
    }

    /// The grants of `project` in force now (not revoked, not ended by the
    /// store's clock), oldest first.
    pub async fn live_grants(&mut self, project: &str) -> Result<Vec<Grant>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM toolgate_grants
                     WHERE project = $1 AND revoked_at IS NULL
                       AND (expires_at IS NULL OR expires_at > now())
                     ORDER BY created_at, id"
                ),
                &[&project],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(read_grant).collect()
    }

    /// Every grant changed after `revision` (made or revoked), in the order
    /// of their changes.
    pub async fn grants_since(
        &mut self,
        revision: i64,
        missing: &[i64],
    ) -> Result<Vec<Grant>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM toolgate_grants WHERE revision > $1
                      UNION ALL
                      SELECT {GRANT_COLUMNS} FROM toolgate_grants
                      WHERE revision = ANY($2) AND revision <= $1
                      ORDER BY revision"
                ),
                &[&revision, &missing],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(read_grant).collect()
    }
}

/// Insert `grant` unless its id is there already; whether it was inserted.
pub(super) async fn insert_grant(
    tx: &tokio_postgres::Transaction<'_>,
    grant: &NewGrant,
) -> Result<bool, StoreError> {
    let literal = i32::try_from(grant.literal).map_err(|_| StoreError::Unreadable {
        what: format!("a grant's literal length {}", grant.literal),
    })?;
    let inserted = tx
        .execute(
            "INSERT INTO toolgate_grants
               (id, project, session_id, scope, permission, pattern, literal, plan_only,
                expires_at, made_by, question_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (id) DO NOTHING",
            &[
                &grant.id,
                &grant.project,
                &grant.session_id,
                &grant.scope.as_str(),
                &grant.permission,
                &grant.pattern,
                &literal,
                &grant.plan_only,
                &grant.expires_at,
                &grant.made_by,
                &grant.question.map(QuestionId::uuid),
            ],
        )
        .await
        .map_err(StoreError::from_query)?;
    Ok(inserted == 1)
}

fn session(row: &Row) -> Result<Session, StoreError> {
    let closed: Option<String> = get(row, 6)?;
    let closed = match closed.as_deref() {
        None => None,
        Some("ended") => Some(Closed::Ended),
        Some("refused") => Some(Closed::Refused),
        Some(other) => {
            return Err(StoreError::Unreadable {
                what: format!("a session's closed `{}`", crate::display::shown(other)),
            })
        }
    };
    Ok(Session {
        record: SessionRecord {
            project: get(row, 0)?,
            session_id: get(row, 1)?,
            parent_id: get(row, 2)?,
            mode: get(row, 3)?,
            permissions: get(row, 4)?,
            started: get(row, 5)?,
            joined: get(row, 10)?,
        },
        closed,
        closed_at: get(row, 7)?,
        updated_at: get(row, 8)?,
        revision: get(row, 9)?,
    })
}

fn read_grant(row: &Row) -> Result<Grant, StoreError> {
    let scope: String = get(row, 3)?;
    let scope = match scope.as_str() {
        "project" => GrantScope::Project,
        "session" => GrantScope::Session,
        other => {
            return Err(StoreError::Unreadable {
                what: format!("a grant's scope `{}`", crate::display::shown(other)),
            })
        }
    };
    let literal: i32 = get(row, 6)?;
    Ok(Grant {
        grant: NewGrant {
            id: get(row, 0)?,
            project: get(row, 1)?,
            session_id: get(row, 2)?,
            scope,
            permission: get(row, 4)?,
            pattern: get(row, 5)?,
            literal: u32::try_from(literal).unwrap_or(0),
            plan_only: get(row, 7)?,
            expires_at: get(row, 8)?,
            made_by: get(row, 9)?,
            question: get::<Option<uuid::Uuid>>(row, 10)?.map(QuestionId::from_uuid),
        },
        created_at: get(row, 11)?,
        revoked_at: get(row, 12)?,
        revoked_by: get(row, 13)?,
        revision: get(row, 14)?,
    })
}
