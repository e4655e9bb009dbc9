//! The store's schema: ordered migrations in the source, and the version
//! the store is at.
//!
//! `toolgate_schema` holds one row per migration applied (its version, its
//! name, when); the store's version is the highest. Each migration runs in
//! one transaction that first takes a transaction-scoped advisory lock
//! ([`LOCK`]), then reads the version again: two brokers migrating at once
//! queue on the lock, and the second finds the work done. A store at a
//! version this binary does not know is refused, never written.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::StoreError;

/// One step of the schema: applied to a store at `version - 1`.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version the store is at once it is applied (1, 2, ...).
    pub version: i32,
    /// What it does, in a few words (kept in `toolgate_schema`).
    pub name: &'static str,
    /// The statements, run in one transaction.
    pub sql: &'static str,
}

/// Every migration, in order; `MIGRATIONS[i].version == i + 1`.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "tokens, brokers, sessions, questions, grants",
        sql: include_str!("migrations/v1.sql"),
    },
    Migration {
        version: 2,
        name: "what an answer to a question grants",
        sql: include_str!("migrations/v2.sql"),
    },
    Migration {
        version: 3,
        name: "a change's transaction id before its revision",
        sql: include_str!("migrations/v3.sql"),
    },
    Migration {
        version: 4,
        name: "what a joined session met",
        sql: include_str!("migrations/v4.sql"),
    },
];

/// The schema version this binary reads and writes.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

/// The key of the advisory lock every migration holds (`pg_advisory_xact_lock`):
/// "toolgate" in ASCII, so another program's lock is unlikely to share it.
pub const LOCK: i64 = 0x746f_6f6c_6761_7465;

/// The table of applied migrations, created under the lock before anything
/// reads it.
const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS toolgate_schema (
    version    integer PRIMARY KEY CHECK (version > 0),
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// What [`migrate`] did: the steps this call applied, from `from` to `to`
/// (equal when it applied none; another process may have applied the
/// steps between, or after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The version before the first step this call applied.
    pub from: i32,
    /// The version after the last step it applied.
    pub to: i32,
}

/// The store's schema version: 0 when it has none yet.
pub async fn version(client: &Client) -> Result<i32, StoreError> {
    match client
        .query_one("SELECT coalesce(max(version), 0) FROM toolgate_schema", &[])
        .await
    {
        Ok(row) => row.try_get(0).map_err(StoreError::from_query),
        Err(err) if err.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(0),
        Err(err) => Err(StoreError::from_query(err)),
    }
}

/// Check that the store is at this binary's version, as every command but
/// `store migrate` needs it.
pub async fn check(client: &Client) -> Result<(), StoreError> {
    let found = version(client).await?;
    match found.cmp(&VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(StoreError::TooNew {
            found,
            known: VERSION,
        }),
        std::cmp::Ordering::Less => Err(StoreError::TooOld {
            found,
            needed: VERSION,
        }),
    }
}

/// Bring the store to [`VERSION`], one migration per transaction; refuse a
/// store newer than that.
pub async fn migrate(client: &mut Client) -> Result<Migrated, StoreError> {
    let known = VERSION;
    let mut applied: Option<(i32, i32)> = None;
    loop {
        let tx = client.transaction().await.map_err(StoreError::from_query)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
            .await
            .map_err(StoreError::from_query)?;
        tx.batch_execute(SCHEMA_TABLE)
            .await
            .map_err(StoreError::from_query)?;
        let found: i32 = tx
            .query_one("SELECT coalesce(max(version), 0) FROM toolgate_schema", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(StoreError::from_query)?;
        if found > known {
            return Err(StoreError::TooNew { found, known });
        }
        let Some(next) = MIGRATIONS.get(found as usize) else {
            // Nothing to do: the lock ends with the transaction.
            tx.commit().await.map_err(StoreError::from_query)?;
            let (from, to) = applied.unwrap_or((found, found));
            return Ok(Migrated { from, to });
        };
        tx.batch_execute(next.sql)
            .await
            .map_err(|source| StoreError::Migration {
                version: next.version,
                source,
            })?;
        tx.execute(
            "INSERT INTO toolgate_schema (version, name) VALUES ($1, $2)",
            &[&next.version, &next.name],
        )
        .await
        .map_err(StoreError::from_query)?;
        tx.commit().await.map_err(StoreError::from_query)?;
        applied = Some((applied.map_or(found, |(from, _)| from), next.version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version as usize, index + 1, "{}", migration.name);
        }
        assert_eq!(VERSION as usize, MIGRATIONS.len());
    }
}
