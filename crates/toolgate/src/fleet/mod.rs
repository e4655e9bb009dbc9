//! The fleet: brokers on many hosts sharing one PostgreSQL store (feature
//! `fleet`, on by default). See docs/fleet.md.
//!
//! Decisions stay local: each broker decides from its modes, rules and the
//! shell analysis in process. The store holds only what people change and
//! every broker must see: tokens, sessions, grants and their revocations,
//! questions and their answers, and the brokers themselves with their
//! leases. The tables are the truth; `LISTEN`/`NOTIFY` only wakes a broker
//! up ([`Wakeups`]), and a broker that reconnects reads what changed since
//! the last revision it saw.
//!
//! - [`schema`]: the migrations and the version check;
//! - [`tokens`]: bearer tokens (made, listed, revoked, verified);
//! - [`sessions`]: sessions and grants;
//! - [`questions`]: brokers with their leases, and questions whose first
//!   answer wins;
//! - [`link`]: a broker's link to the store (`serve --store`): its writes,
//!   its lease, and what it reads of the others';
//! - [`tls`]: TLS to the store (`sslmode`, `sslrootcert`).
//!
//! A [`Store`] is one connection. Its methods take `&mut self`: what needs
//! a transaction has the connection to itself, so a task that shares a
//! store puts it behind its own lock or opens another.

mod error;
pub mod link;
pub mod questions;
pub mod schema;
pub mod sessions;
pub mod tls;
pub mod tokens;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::config::Host;
use tokio_postgres::{AsyncMessage, Client, Config};

pub use error::StoreError;

/// The environment variable that names the store when `--store` is not given.
pub const STORE_ENV: &str = "TOOLGATE_STORE";

/// How long a connection attempt may take when the URL sets no
/// `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the shared store.
pub struct Store {
    client: Client,
    name: String,
    wakeups: Wakeups,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("name", &self.name).finish()
    }
}

impl Store {
    /// Connect to the store `url` names (`postgres://USER@HOST:PORT/DB`, or
    /// the `key=value` form). Checks nothing about the schema: see
    /// [`Store::check_schema`] and [`Store::migrate`]. Must run on a tokio
    /// runtime: the connection is a task of it.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let parsed = tls::StoreUrl::parse(url)?;
        let mut config: Config = parsed
            .rest
            .parse()
            .map_err(|source| StoreError::BadUrl { source })?;
        config.ssl_mode(match parsed.mode {
            tls::SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            tls::SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let connector = parsed.connector()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("toolgate");
        }
        let name = display_name(&config);
        let (client, mut connection) = config.connect(connector).await.map_err(|source| {
            // A TLS failure where TLS is required: said as such (the
            // connection is refused, never made without it).
            if parsed.mode.required()
                && source.as_db_error().is_none()
                && source
                    .to_string()
                    .starts_with("error performing TLS handshake")
            {
                StoreError::Tls {
                    store: name.clone(),
                    mode: parsed.mode.as_str(),
                    trust: parsed.trust(),
                    source,
                }
            } else {
                StoreError::from_connect(name.clone(), source)
            }
        })?;
        let wakeups = Wakeups::default();
        let wake = wakeups.clone();
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(note))) => wake.raise(note.channel()),
                    Some(Ok(AsyncMessage::Notice(notice))) => {
                        tracing::debug!("the store says: {}", notice.message());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(err)) => {
                        tracing::debug!("the store's connection ended: {err}");
                        break;
                    }
                    None => break,
                }
            }
            wake.close();
        });
        // Every statement a broker runs reads or writes a few rows by an
        // index. A plan with parallel workers (or compiled by JIT) costs
        // more to start than such a statement takes, and the planner picks
        // one when its estimates are off, as they are while a table grows
        // faster than autovacuum analyzes it (a revocation took 20 to 40 ms
        // to reach another broker, instead of 5, once the questions' table
        // passed the size of a parallel scan).
        client
            .batch_execute("SET max_parallel_workers_per_gather = 0; SET jit = off")
            .await
            .map_err(StoreError::from_query)?;
        Ok(Store {
            client,
            name,
            wakeups,
        })
    }

    /// The store as messages name it: user, host, port and database, never
    /// a password.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A setting as this connection has it (`SHOW NAME`): what the broker
    /// set on connecting wins over the database's and the server's defaults.
    pub async fn setting(&self, name: &str) -> Result<String, StoreError> {
        let row = self
            .client
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map_err(StoreError::from_query)?;
        row.try_get(0).map_err(StoreError::from_query)
    }

    /// The oldest transaction id still running, by a snapshot taken now:
    /// every transaction with an id below it has ended (`xmin`).
    pub async fn ended_below(&self) -> Result<i64, StoreError> {
        self.snapshot_edge("SELECT txid_snapshot_xmin(txid_current_snapshot())")
            .await
    }

    /// The first transaction id not yet given, by a snapshot taken now:
    /// every transaction that holds an id has one below it (`xmax`).
    pub async fn started_below(&self) -> Result<i64, StoreError> {
        self.snapshot_edge("SELECT txid_snapshot_xmax(txid_current_snapshot())")
            .await
    }

    async fn snapshot_edge(&self, sql: &str) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one(sql, &[])
            .await
            .map_err(StoreError::from_query)?;
        row.try_get(0).map_err(StoreError::from_query)
    }

    /// The store's schema version (0: none yet).
    pub async fn schema_version(&self) -> Result<i32, StoreError> {
        schema::version(&self.client).await
    }

    /// Refuse a store whose schema is not this binary's version.
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        schema::check(&self.client).await
    }

    /// Bring the schema to this binary's version (see [`schema::migrate`]).
    pub async fn migrate(&mut self) -> Result<schema::Migrated, StoreError> {
        schema::migrate(&mut self.client).await
    }

    /// Start listening on `channels`: from now on a change to their tables
    /// raises them in [`Store::wakeups`].
    pub async fn listen(&self, channels: &[Channel]) -> Result<(), StoreError> {
        let mut sql = String::new();
        for channel in channels {
            sql.push_str("LISTEN ");
            sql.push_str(channel.name());
            sql.push(';');
        }
        self.client
            .batch_execute(&sql)
            .await
            .map_err(StoreError::from_query)
    }

    /// What wakes this connection's listener (see [`Wakeups`]).
    pub fn wakeups(&self) -> Wakeups {
        self.wakeups.clone()
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// `user@host:port/database` of `config`, for messages.
fn display_name(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let database = config.get_dbname().unwrap_or(user);
    let at = if user.is_empty() { "" } else { "@" };
    format!("postgres://{user}{at}{host}:{port}/{database}")
}

/// The notification channels, one per table brokers follow; each carries
/// `{"revision":N}` as a hint, never the change itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `toolgate_questions`: a question asked, answered or cancelled.
    Questions,
    /// `toolgate_grants`: a grant made or revoked.
    Grants,
    /// `toolgate_sessions`: a session started, changed or closed.
    Sessions,
    /// `toolgate_tokens`: a token made or revoked.
    Tokens,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 4] = [
        Channel::Questions,
        Channel::Grants,
        Channel::Sessions,
        Channel::Tokens,
    ];

    /// The channel's name (also its table's).
    pub fn name(self) -> &'static str {
        match self {
            Channel::Questions => "toolgate_questions",
            Channel::Grants => "toolgate_grants",
            Channel::Sessions => "toolgate_sessions",
            Channel::Tokens => "toolgate_tokens",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Channel::Questions => 1,
            Channel::Grants => 2,
            Channel::Sessions => 4,
            Channel::Tokens => 8,
        }
    }
}

/// The channels raised since a listener last looked, or the end of the
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// These channels had news: read their tables from the last revision seen.
    Changed(Raised),
    /// The connection ended: reconnect, and read everything again (what
    /// was notified meanwhile is lost).
    Closed,
}

/// A set of [`Channel`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Raised(u8);

impl Raised {
    /// Whether `channel` is in the set.
    pub fn has(self, channel: Channel) -> bool {
        self.0 & channel.bit() != 0
    }
}

/// What wakes a broker: the connection's task raises a channel's flag for
/// each notification and wakes the one waiter. Flags stay raised until
/// [`Wakeups::wait`] takes them, so a burst of notifications is one wake-up
/// and none is lost while the connection lives; nothing grows.
#[derive(Debug, Clone, Default)]
pub struct Wakeups {
    inner: Arc<WakeState>,
}

#[derive(Debug, Default)]
struct WakeState {
    raised: AtomicU8,
    notify: Notify,
}

/// The flag of a closed connection, beside the channels' bits.
const CLOSED: u8 = 0x80;

impl Wakeups {
    fn raise(&self, channel: &str) {
        if let Some(found) = Channel::ALL.into_iter().find(|c| c.name() == channel) {
            self.inner.raised.fetch_or(found.bit(), Ordering::AcqRel);
            self.inner.notify.notify_one();
        }
    }

    fn close(&self) {
        self.inner.raised.fetch_or(CLOSED, Ordering::AcqRel);
        self.inner.notify.notify_one();
    }

    /// Wait until a channel is raised or the connection ends.
    pub async fn wait(&self) -> Wake {
        loop {
            let raised = self.inner.raised.swap(0, Ordering::AcqRel);
            if raised & CLOSED != 0 {
                // Stays closed for whoever looks next.
                self.inner.raised.fetch_or(CLOSED, Ordering::AcqRel);
                return Wake::Closed;
            }
            if raised != 0 {
                return Wake::Changed(Raised(raised));
            }
            self.inner.notify.notified().await;
        }
    }
}

/// Column `index` of `row`, as `T`.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(StoreError::from_query)
}

/// How the CLI and tests run the store's async API from blocking code: a
/// current-thread runtime with I/O and time.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
