//! What the store can fail at, by kind. The words a person reads are the
//! `Display` of each kind; callers match on the variant.

use std::error::Error as _;

/// An operation on the shared store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store's URL cannot be parsed.
    #[error(
        "the store URL cannot be used ({source}); expected postgres://USER@HOST:PORT/DATABASE"
    )]
    BadUrl {
        /// What the parser said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The store URL's TLS settings (`sslmode`, `sslrootcert`) cannot be
    /// used: an unknown mode, a CA file that cannot be read.
    #[error("the store URL's TLS settings cannot be used: {why}")]
    BadTls {
        /// Why.
        why: String,
    },
    /// TLS to the store failed where `sslmode` requires it: the server
    /// offers none, or its certificate is not to be trusted.
    #[error("cannot reach the store at {store} over TLS as `sslmode={mode}` requires ({trust}): {}", reason(.source))]
    Tls {
        /// The store, without its password.
        store: String,
        /// The `sslmode`.
        mode: &'static str,
        /// What the certificate is checked against.
        trust: String,
        /// What failed.
        #[source]
        source: tokio_postgres::Error,
    },
    /// No connection could be made: nothing listens there, the host is
    /// unknown, or it did not answer in time.
    #[error("cannot reach the store at {store}: {}", reason(.source))]
    Unreachable {
        /// The store, without its password.
        store: String,
        /// What failed.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server answered but would not let us in (authentication, a
    /// database that does not exist, too many connections).
    #[error("the store at {store} refused the connection: {}", reason(.source))]
    Refused {
        /// The store, without its password.
        store: String,
        /// The server's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection ended while an operation was under way.
    #[error("lost the connection to the store: {}", reason(.source))]
    Lost {
        /// What ended it.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The store's schema is newer than this binary knows.
    #[error("the store's schema is at version {found}, newer than this toolgate knows (version {known}): upgrade toolgate; it will not use or change that store")]
    TooNew {
        /// The store's version.
        found: i32,
        /// The newest this binary knows.
        known: i32,
    },
    /// The store's schema is older than this binary needs.
    #[error("the store's schema is at version {found} and this toolgate needs version {needed}: run `toolgate store migrate` first")]
    TooOld {
        /// The store's version.
        found: i32,
        /// The version this binary needs.
        needed: i32,
    },
    /// A migration failed; its transaction was rolled back.
    #[error("migration to schema version {version} failed: {}", reason(.source))]
    Migration {
        /// The version it would have made.
        version: i32,
        /// The server's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The broker's lease lapsed (or it never registered): other brokers
    /// may have cancelled its questions already.
    #[error("the broker {broker}'s lease on the store has lapsed")]
    LeaseLost {
        /// The broker's id.
        broker: String,
    },
    /// A live token already has this name.
    #[error("a token named `{name}` already exists and is not revoked: revoke it or choose another name")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// A statement failed.
    #[error("the store failed: {}", reason(.source))]
    Query {
        /// The server's or the driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A row held a value this binary cannot read (a role or a state
    /// written by hand, say).
    #[error("the store holds a value toolgate cannot read: {what}")]
    Unreadable {
        /// Which value, and what it was.
        what: String,
    },
}

impl StoreError {
    /// A failed statement: [`StoreError::Lost`] when the connection is
    /// gone, else [`StoreError::Query`].
    pub fn from_query(source: tokio_postgres::Error) -> StoreError {
        if source.is_closed() || source.as_db_error().is_none() && io_error(&source) {
            StoreError::Lost { source }
        } else {
            StoreError::Query { source }
        }
    }

    /// A failed connection attempt to `store`: [`StoreError::Refused`]
    /// when the server said no, else [`StoreError::Unreachable`].
    pub fn from_connect(store: String, source: tokio_postgres::Error) -> StoreError {
        if source.as_db_error().is_some() {
            StoreError::Refused { store, source }
        } else {
            StoreError::Unreachable { store, source }
        }
    }

    /// Whether the store could not be reached or was lost: what `toolgate
    /// store` and `tokens` report with exit code 3.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. } | StoreError::Lost { .. } | StoreError::Tls { .. }
        )
    }
}

/// Whether an I/O error lies under `err`.
fn io_error(err: &tokio_postgres::Error) -> bool {
    let mut source = err.source();
    while let Some(inner) = source {
        if inner.is::<std::io::Error>() {
            return true;
        }
        source = inner.source();
    }
    false
}

/// The driver's error with what lies under it: tokio-postgres says "error
/// connecting to server" and keeps the reason (`Connection refused`) as its
/// source; the server's own message (with its detail) for a server error.
fn reason(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        };
    }
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    text
}
