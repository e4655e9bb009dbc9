//! The link between one broker and the shared store: the task that owns
//! the broker's connections to it (one for writes and reads, one that only
//! listens), commits the broker's writes in order, renews its lease, reads
//! what changed and tells the broker ([`crate::broker::News`]).
//!
//! - **At start** ([`join`]): connect, migrate (a store newer than this
//!   binary is refused), register the broker with a lease, and read the
//!   project's state (live grants, sessions, other brokers' open
//!   questions), before the broker decides anything.
//! - **Writes** are committed one at a time, in the order the broker made
//!   them; each is reported settled (`News::Settled`), so the owner can let
//!   out the frames that report it. A write that cannot be committed for
//!   want of the store is reported failed once (its frames then say
//!   `notSaved`) and kept: it is tried again, in order, once the store is
//!   back. Every write is idempotent (upserts, a grant or a question by its
//!   id, an answer compared with what the store holds), so a write whose
//!   commit was lost with the connection is simply written again. A
//!   question is not kept: the broker asks it again once the store is back.
//! - **Reading**: a notification (any channel) reads every table from the
//!   last revision seen (`Cursor`); every renewal (each third of the
//!   lease) also reads the project's open questions and live grants whole,
//!   so a change whose notification was lost arrives within one renewal.
//!   Every (re)connection reads the same way before it says `Online`.
//! - **Other projects' questions** are kept too, apart
//!   ([`Changes::others`]): the broker shows them to the connections that
//!   follow every project (`hello` with `"projects": "all"`) and may write
//!   their answers, but never applies another project's question, grant or
//!   session to its own state (their grants and sessions are not passed on
//!   at all).
//! - **Leases**: the lease is renewed every third of its length; a lease
//!   found lapsed (the broker was cut off longer than it) is taken again.
//!   Each renewal also cancels the questions of brokers whose lease lapsed
//!   (`expire_leases`), so a broker that dies holds its questions at most
//!   a lease and a renewal period.
//! - **A lost connection** (either one, or a statement unanswered for
//!   [`CALL_TIMEOUT`]) drops both and connects again after a pause (100 ms,
//!   doubling to 2 s).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::questions::{BrokerId, NewQuestion, Question, QuestionId, QuestionState, Settled};
use super::sessions::{Closed, Grant, NewGrant, Session, SessionRecord, SessionWrite};
use super::{Channel, Store, StoreError, Wake};
use crate::broker::{
    Changes, CloseWhy, GrantRow, Link, LinkHandle, News, Outcome, QuestionRow, SessionChange,
    SessionRow, Write,
};

/// A broker's lease on the store: renewed every third of it; a broker not
/// heard from for this long has its questions cancelled by the others.
/// Grants are used while the store was heard from within twice this (the
/// staleness bound).
pub const LEASE: Duration = Duration::from_secs(10);

/// The variable that sets another lease, in milliseconds (tests).
pub const LEASE_ENV: &str = "TOOLGATE_LEASE_MS";

/// How long one statement may take before the store counts as lost.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How many writes are committed before the link looks at what else there
/// is to do (a notification, a renewal's reading).
const DRAIN: usize = 32;

/// Keep the broker's lease, on a connection of its own: renew it every
/// third of its length (taking it again if it lapsed), and cancel the
/// questions of brokers whose lease lapsed.
async fn keep_lease(config: Config) {
    let every = config.lease / 3;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut store: Option<Store> = None;
    loop {
        tick.tick().await;
        if store.as_ref().is_none_or(Store::is_closed) {
            store = call(Store::connect(&config.url)).await.ok();
        }
        let Some(work) = store.as_mut() else {
            continue;
        };
        if let Err(why) = renew(&config, work).await {
            tracing::debug!("the lease could not be renewed: {why}");
            store = None;
        }
    }
}

/// Renew the lease (taking it again if it lapsed) and cancel the
/// questions of brokers whose lease lapsed.
async fn renew(config: &Config, work: &mut Store) -> Result<(), String> {
    match call(work.renew_lease(config.broker, config.lease)).await {
        Ok(_) => {}
        Err(Fail::Refused(StoreError::LeaseLost { .. })) => {
            tracing::warn!("this broker's lease on the shared store had lapsed (its questions there were cancelled); taking a new one");
            lost(
                call(work.register_broker(config.broker, &config.host, config.pid, config.lease))
                    .await,
                "the broker's registration",
            )?;
        }
        Err(Fail::Lost(why)) => return Err(why),
        Err(Fail::Refused(err)) => {
            tracing::warn!("the shared store refused the lease's renewal: {err}");
        }
    }
    if let Some(cancelled) = lost(call(work.expire_leases()).await, "expiring leases")? {
        if !cancelled.is_empty() {
            tracing::info!(
                "cancelled {} questions of brokers whose lease on the store lapsed",
                cancelled.len()
            );
        }
    }
    Ok(())
}

/// How long a revision missing below one already seen is waited for (a
/// transaction still committing) before it counts as never coming (rolled
/// back, or a statement that wrote nothing).
const PATIENCE: Duration = Duration::from_secs(5);

/// The most missing revisions named in a read ([`Cursor::unread`]).
const MOST_MISSING: usize = 10_000;

/// Who a broker is, in the store.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store's URL.
    pub url: String,
    /// The project root the broker serves.
    pub project: String,
    /// Its id.
    pub broker: BrokerId,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its lease.
    pub lease: Duration,
}

/// Connect, migrate, register `config.broker` with its lease, and read the
/// project's state: what the broker starts from, and the link to start on
/// the owner's runtime.
pub async fn join(config: Config) -> Result<(Changes, Starter), StoreError> {
    let mut store = Store::connect(&config.url).await?;
    let migrated = store.migrate().await?;
    if migrated.from != migrated.to {
        tracing::info!(
            "migrated {} from schema version {} to {}",
            store.name(),
            migrated.from,
            migrated.to
        );
    }
    store
        .register_broker(config.broker, &config.host, config.pid, config.lease)
        .await?;
    // Everything after this revision is read again by the first reading.
    let base: i64 = store
        .client
        .query_one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM toolgate_revision",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(StoreError::from_query)?;
    let mut cursor = Cursor::new(base);
    let mut changes = Changes::default();
    let mut hosts = Hosts::default();
    for question in store.open_questions().await? {
        cursor.saw(question.revision);
        if question.project == config.project {
            cursor.open.insert(question.id.uuid());
            changes
                .questions
                .push(question_row(&question, config.broker));
        } else {
            cursor.others_open.insert(question.id.uuid());
            let mut row = question_row(&question, config.broker);
            // Shown with the question: not worth failing the start for.
            row.host = hosts.of(&mut store, question.broker).await.ok();
            changes.others.push(row);
        }
    }
    for grant in store.live_grants(&config.project).await? {
        cursor.saw(grant.revision);
        cursor.live.insert(grant.grant.id.clone());
        changes.grants.push(grant_row(&grant));
    }
    for session in store.sessions(&config.project).await? {
        cursor.saw(session.revision);
        changes.sessions.push(session_row(&session));
    }
    Ok((
        changes,
        Starter {
            config,
            cursor,
            hosts,
        },
    ))
}

/// The brokers' hosts, as other projects' questions name them: read from
/// the store when a question names a broker not known yet.
#[derive(Default)]
struct Hosts(HashMap<BrokerId, String>);

impl Hosts {
    /// The host of `broker` (`(a broker that left)` when the store no
    /// longer has it).
    async fn of(&mut self, store: &mut Store, broker: BrokerId) -> Result<String, StoreError> {
        if !self.0.contains_key(&broker) {
            if self.0.len() > 4096 {
                self.0.clear();
            }
            for info in store.brokers().await? {
                self.0.insert(info.id, info.host);
            }
        }
        // A broker the store no longer has is not looked for again.
        Ok(self
            .0
            .entry(broker)
            .or_insert_with(|| "(a broker that left)".to_string())
            .clone())
    }
}

/// A link not started yet ([`join`]'s).
pub struct Starter {
    config: Config,
    cursor: Cursor,
    hosts: Hosts,
}

impl Link for Starter {
    fn start(self: Box<Self>) -> Box<dyn LinkHandle> {
        let (orders, received) = mpsc::unbounded_channel();
        let (news, told) = mpsc::unbounded_channel();
        let task = Task {
            config: self.config,
            cursor: self.cursor,
            hosts: self.hosts,
            queue: VecDeque::new(),
            news,
            // The state was read at start: the broker begins online.
            online: true,
        };
        tokio::spawn(task.run(received));
        Box::new(Handle { orders, news: told })
    }
}

enum Order {
    /// Boxed: a session's row is large, and the channel holds orders.
    Write(u64, Box<Write>),
    Finish(oneshot::Sender<()>),
}

struct Handle {
    orders: mpsc::UnboundedSender<Order>,
    news: mpsc::UnboundedReceiver<News>,
}

impl LinkHandle for Handle {
    fn send(&mut self, seq: u64, write: Write) {
        let _ = self.orders.send(Order::Write(seq, Box::new(write)));
    }

    fn poll_news(&mut self, cx: &mut Context<'_>) -> Poll<Option<News>> {
        self.news.poll_recv(cx)
    }

    fn finish(&mut self, patience: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let (done, finished) = oneshot::channel();
        let _ = self.orders.send(Order::Finish(done));
        Box::pin(async move {
            let _ = tokio::time::timeout(patience, finished).await;
        })
    }
}

/// What the link has read: every revision up to `base`, those above it in
/// `seen`, and the revisions missing above `base`. Revisions come from one
/// sequence but commit in any order: one missing below a revision seen may
/// still be committing, so it is read again until it comes, until every
/// transaction that could hold it has ended ([`Horizon`]: then it never
/// will, its row changed again or it rolled back), or until [`PATIENCE`]
/// runs out. Also what the broker was told is open and live, to find what
/// a lost notification hid.
struct Cursor {
    base: i64,
    seen: BTreeSet<i64>,
    missing: BTreeMap<i64, Missing>,
    /// The project's questions the broker was told are open.
    open: HashSet<Uuid>,
    /// The project's grants the broker was told are live.
    live: HashSet<String>,
    /// Other projects' questions the broker was told are open.
    others_open: HashSet<Uuid>,
}

/// A revision missing below one seen.
#[derive(Debug, Clone, Copy)]
struct Missing {
    /// When it was first missed.
    since: Instant,
    /// Every transaction that can hold it has an id below this (the `xmax`
    /// of a snapshot taken after the read that missed it).
    held_below: i64,
}

/// Where the store's transactions stood around one read, by transaction
/// id (schema version 3 draws a change's id before its revision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Horizon {
    /// Before the read: every transaction with an id below this had ended,
    /// so the read saw what each committed.
    ended_below: i64,
    /// After the read: every transaction that held an id had one below
    /// this.
    started_below: i64,
}

impl Cursor {
    fn new(base: i64) -> Cursor {
        Cursor {
            base,
            seen: BTreeSet::new(),
            missing: BTreeMap::new(),
            open: HashSet::new(),
            live: HashSet::new(),
            others_open: HashSet::new(),
        }
    }

    /// Whether `revision` was not read before; it is now.
    fn saw(&mut self, revision: i64) -> bool {
        if revision <= self.base {
            return false;
        }
        self.missing.remove(&revision);
        self.seen.insert(revision)
    }

    /// What is left to read: every revision above the returned one, and the
    /// missing ones below it. A revision seen is not read again, so a
    /// wake-up reads what is new and what may still be committing, not
    /// every row changed since `base`. With very many missing, everything
    /// above `base` is read instead.
    fn unread(&self) -> (i64, Vec<i64>) {
        let top = self.seen.last().copied().unwrap_or(self.base);
        if self.missing.len() > MOST_MISSING {
            return (self.base, Vec::new());
        }
        (top, self.missing.keys().copied().collect())
    }

    /// Say (at debug level) that the whole read found `what` at `revision`,
    /// untold, though the reads by revision had counted it read or given
    /// it up: given up on, yet it came. (A revision above the last read,
    /// or a gap below it, only committed since.)
    fn missed(&self, what: &str, revision: i64) {
        if revision <= self.base || self.seen.contains(&revision) {
            tracing::debug!(
                "the whole read found {what} (revision {revision}) that the reads by \
                 revision had passed, at {}, and missed",
                self.base
            );
        }
    }

    /// After a read around which the store stood at `horizon`: note what
    /// it missed, give up on what cannot come any more, and move `base` up
    /// over what was read and what will not come.
    fn settle(&mut self, now: Instant, horizon: Horizon) {
        let Some(&top) = self.seen.last() else {
            return;
        };
        // A long stretch (another project's burst read in one go) is not
        // walked revision by revision: what is missing in it is noted once.
        let mut revision = self.base + 1;
        while revision < top {
            if !self.seen.contains(&revision) {
                self.missing.entry(revision).or_insert(Missing {
                    since: now,
                    held_below: horizon.started_below,
                });
            }
            revision += 1;
        }
        // A question asked then answered at once leaves its first revision
        // missing: it is given up on at the first read that began with
        // every transaction that could hold it ended, not after
        // [`PATIENCE`]. Given up on, it counts as read.
        let gone: Vec<i64> = self
            .missing
            .iter()
            .filter(|(_, missing)| {
                missing.held_below <= horizon.ended_below
                    || now.duration_since(missing.since) >= PATIENCE
            })
            .map(|(revision, _)| *revision)
            .collect();
        for revision in gone {
            self.missing.remove(&revision);
            self.seen.insert(revision);
        }
        loop {
            let next = self.base + 1;
            if !self.seen.remove(&next) {
                break;
            }
            self.base = next;
        }
    }
}

/// A write waiting to be committed.
struct Queued {
    seq: u64,
    write: Write,
    /// Its failure was reported (its frames went out saying so).
    told: bool,
}

/// Why a statement did not do its work.
enum Fail {
    /// The store is lost: connect again.
    Lost(String),
    /// The store refused it.
    Refused(StoreError),
}

/// Run `work` with the [`CALL_TIMEOUT`].
async fn call<T>(work: impl Future<Output = Result<T, StoreError>>) -> Result<T, Fail> {
    match tokio::time::timeout(CALL_TIMEOUT, work).await {
        Err(_) => Err(Fail::Lost(format!(
            "the store did not answer within {} seconds",
            CALL_TIMEOUT.as_secs()
        ))),
        Ok(Err(err)) if err.is_unreachable() => Err(Fail::Lost(err.to_string())),
        Ok(Err(err)) => Err(Fail::Refused(err)),
        Ok(Ok(value)) => Ok(value),
    }
}

/// What is lost, when the store is.
fn lost<T>(result: Result<T, Fail>, what: &str) -> Result<Option<T>, String> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Fail::Lost(why)) => Err(why),
        Err(Fail::Refused(err)) => {
            tracing::warn!("the shared store refused {what}: {err}");
            Ok(None)
        }
    }
}

struct Task {
    config: Config,
    cursor: Cursor,
    hosts: Hosts,
    queue: VecDeque<Queued>,
    news: mpsc::UnboundedSender<News>,
    online: bool,
}

/// How a connection ended.
enum End {
    /// The broker is done with the link.
    Finished,
    /// The store was lost.
    Lost(String),
}

impl Task {
    fn tell(&self, news: News) {
        let _ = self.news.send(news);
    }

    async fn run(mut self, mut orders: mpsc::UnboundedReceiver<Order>) {
        let lease = tokio::spawn(keep_lease(self.config.clone()));
        let mut pause = Duration::from_millis(100);
        // A connection lost while the store answered is tried again at
        // once: a backend that was cut, a blip. Only when that fails is the
        // store offline.
        let mut again = true;
        loop {
            let started = Instant::now();
            let why = match self.connected(&mut orders, &mut again).await {
                End::Finished => {
                    lease.abort();
                    return;
                }
                End::Lost(why) => why,
            };
            if std::mem::take(&mut again) {
                tracing::debug!("lost the store ({why}); connecting again at once");
                continue;
            }
            self.offline(&why);
            if started.elapsed() > Duration::from_secs(10) {
                pause = Duration::from_millis(100);
            }
            let until = tokio::time::Instant::now() + pause;
            loop {
                tokio::select! {
                    order = orders.recv() => match order {
                        None => {
                            lease.abort();
                            return;
                        }
                        Some(Order::Write(seq, write)) => self.queue_offline(seq, *write, &why),
                        Some(Order::Finish(done)) => {
                            lease.abort();
                            let _ = done.send(());
                            return;
                        }
                    },
                    () = tokio::time::sleep_until(until) => break,
                }
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// The store is lost: the broker is told once, and so is each write
    /// queued (its frames go out saying it is not saved); a question is
    /// dropped (the broker asks it again once the store is back).
    fn offline(&mut self, why: &str) {
        if self.online {
            self.online = false;
            self.tell(News::Offline {
                why: why.to_string(),
            });
        }
        let queue = std::mem::take(&mut self.queue);
        for queued in queue {
            self.keep(queued, why);
        }
    }

    /// A write ordered while the store cannot be reached.
    fn queue_offline(&mut self, seq: u64, write: Write, why: &str) {
        let queued = Queued {
            seq,
            write,
            told: false,
        };
        self.keep(queued, why);
    }

    /// Keep a write for when the store is back, its failure told once (a
    /// question is dropped instead: the broker asks it again).
    fn keep(&mut self, mut queued: Queued, why: &str) {
        if let Write::Ask { question, .. } = queued.write {
            self.tell(News::AskFailed { question });
            return;
        }
        if !queued.told {
            self.tell(News::Settled {
                seq: queued.seq,
                failed: Some(why.to_string()),
            });
            queued.told = true;
        }
        self.queue.push_back(queued);
    }

    /// A connection that only listens, listening.
    async fn listener(&self) -> Result<Store, String> {
        let listen = match call(Store::connect(&self.config.url)).await {
            Ok(store) => store,
            Err(Fail::Lost(why)) => return Err(why),
            Err(Fail::Refused(err)) => return Err(err.to_string()),
        };
        lost(call(listen.listen(&Channel::ALL)).await, "LISTEN")?;
        Ok(listen)
    }

    /// Take an order: a write is queued; the end is `Some`.
    fn order(&mut self, order: Option<Order>) -> Option<Option<oneshot::Sender<()>>> {
        match order {
            None => Some(None),
            Some(Order::Finish(done)) => Some(Some(done)),
            Some(Order::Write(seq, write)) => {
                self.queue.push_back(Queued {
                    seq,
                    write: *write,
                    told: false,
                });
                None
            }
        }
    }

    /// One connection's life: connect, read, then write and read until the
    /// store is lost or the broker is done. (The lease is kept by a task
    /// of its own, so that a backlog of writes never lets it lapse.)
    async fn connected(
        &mut self,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        again: &mut bool,
    ) -> End {
        let mut work = match call(Store::connect(&self.config.url)).await {
            Ok(store) => store,
            Err(Fail::Lost(why)) => return End::Lost(why),
            Err(Fail::Refused(err)) => return End::Lost(err.to_string()),
        };
        let mut listen = match self.listener().await {
            Ok(listen) => listen,
            Err(why) => return End::Lost(why),
        };
        if let Err(why) = self.resync(&mut work, true).await {
            return End::Lost(why);
        }
        if !self.online {
            self.online = true;
            tracing::info!("the shared store can be reached again");
            self.tell(News::Online);
        }
        *again = true;
        let mut wakeups = listen.wakeups();
        let every = self.config.lease / 3;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                biased;
                _ = tick.tick() => self.resync(&mut work, true).await,
                wake = wakeups.wait() => match wake {
                    Wake::Changed(_) => self.resync(&mut work, false).await,
                    // Only the listener is lost: it listens again, and what
                    // it may have missed is read.
                    Wake::Closed => match self.listener().await {
                        Ok(again) => {
                            listen = again;
                            wakeups = listen.wakeups();
                            self.resync(&mut work, true).await
                        }
                        Err(why) => Err(why),
                    },
                },
                order = orders.recv() => {
                    let mut end = self.order(order);
                    while end.is_none() {
                        match orders.try_recv() {
                            Ok(order) => end = self.order(Some(order)),
                            Err(_) => break,
                        }
                    }
                    match end {
                        None => Ok(()),
                        Some(None) => return End::Finished,
                        Some(Some(done)) => {
                            let _ = tokio::time::timeout(CALL_TIMEOUT, self.drain(&mut work, usize::MAX)).await;
                            let _ = lost(
                                call(work.retire_broker(self.config.broker, "the broker that asked it stopped")).await,
                                "the broker's retirement",
                            );
                            let _ = done.send(());
                            return End::Finished;
                        }
                    }
                }
                // A few writes at a time, so that reading goes on beside a
                // backlog.
                () = std::future::ready(()), if !self.queue.is_empty() => {
                    self.drain(&mut work, DRAIN).await
                }
            };
            if let Err(why) = result {
                return End::Lost(why);
            }
            if work.is_closed() {
                return End::Lost("the connection to the store closed".to_string());
            }
        }
    }

    /// Commit the queued writes, in order.
    async fn drain(&mut self, work: &mut Store, most: usize) -> Result<(), String> {
        let mut done = 0;
        while let Some(front) = self.queue.front() {
            if done == most {
                break;
            }
            done += 1;
            let (seq, told) = (front.seq, front.told);
            let result = apply(&self.config, work, seq, &front.write).await;
            if let Err(Fail::Lost(why)) = result {
                return Err(why);
            }
            let Some(queued) = self.queue.pop_front() else {
                break;
            };
            match result {
                Ok(said) => {
                    // A session's row before the write is settled: the
                    // frames that report it then say whether the store
                    // refused it.
                    let (before, after) = match said {
                        Some(news @ News::SessionWritten { .. }) => (Some(news), None),
                        other => (None, other),
                    };
                    if let Some(news) = before {
                        self.tell(news);
                    }
                    if !told {
                        self.tell(News::Settled { seq, failed: None });
                    }
                    if let Some(news) = after {
                        self.tell(news);
                    }
                }
                Err(Fail::Refused(err)) => {
                    tracing::warn!("the shared store refused a write: {err}");
                    if !told {
                        self.tell(News::Settled {
                            seq,
                            failed: Some(err.to_string()),
                        });
                    }
                    match queued.write {
                        Write::Ask { question, .. } => self.tell(News::AskFailed { question }),
                        Write::Answer { question, .. } => self.tell(News::Answered {
                            question,
                            outcome: Outcome::Failed(err.to_string()),
                        }),
                        Write::Session {
                            row: SessionRow { session_id, .. },
                            ..
                        }
                        | Write::Close { session_id, .. } => self.tell(News::SessionWritten {
                            seq,
                            session_id,
                            row: None,
                            refused: None,
                        }),
                        _ => {}
                    }
                }
                Err(Fail::Lost(_)) => {}
            }
        }
        Ok(())
    }

    /// Read what changed since the last revision seen; `full`: also the
    /// project's open questions and live grants whole.
    async fn resync(&mut self, work: &mut Store, full: bool) -> Result<(), String> {
        let (after, missing) = self.cursor.unread();
        let missing = &missing[..];
        let project = self.config.project.clone();
        let me = self.config.broker;
        let mut changes = Changes::default();
        // Refused (it never is, by a store of schema version 3), the
        // horizon gives nothing up early: missing revisions wait out
        // [`PATIENCE`].
        let ended_below = lost(
            call(work.ended_below()).await,
            "reading the store's horizon",
        )?
        .unwrap_or(i64::MIN);
        // Questions before grants: an answer seen means its grants (one
        // transaction) are there for the next statement to read.
        let questions = lost(
            call(work.questions_since(after, missing)).await,
            "reading questions",
        )?;
        let grants = lost(
            call(work.grants_since(after, missing)).await,
            "reading grants",
        )?;
        let sessions = lost(
            call(work.sessions_since(after, missing)).await,
            "reading sessions",
        )?;
        let tokens = lost(
            call(token_revisions(work, after, missing)).await,
            "reading tokens",
        )?;
        for question in questions.unwrap_or_default() {
            if !self.cursor.saw(question.revision) {
                continue;
            }
            if question.project != project {
                self.other_question(work, &question, &mut changes).await?;
                continue;
            }
            if question.state == QuestionState::Open {
                self.cursor.open.insert(question.id.uuid());
            } else {
                self.cursor.open.remove(&question.id.uuid());
            }
            changes.questions.push(question_row(&question, me));
        }
        for grant in grants.unwrap_or_default() {
            if !self.cursor.saw(grant.revision) || grant.grant.project != project {
                continue;
            }
            if grant.revoked_at.is_some() {
                self.cursor.live.remove(&grant.grant.id);
            } else {
                self.cursor.live.insert(grant.grant.id.clone());
            }
            changes.grants.push(grant_row(&grant));
        }
        for session in sessions.unwrap_or_default() {
            if !self.cursor.saw(session.revision) || session.record.project != project {
                continue;
            }
            changes.sessions.push(session_row(&session));
        }
        for revision in tokens.unwrap_or_default() {
            self.cursor.saw(revision);
        }
        let started_below = lost(
            call(work.started_below()).await,
            "reading the store's horizon",
        )?
        .unwrap_or(i64::MAX);
        if full {
            self.reread(work, &mut changes).await?;
        }
        self.cursor.settle(
            Instant::now(),
            Horizon {
                ended_below,
                started_below,
            },
        );
        if full || changes != Changes::default() {
            self.tell(News::Changes(changes));
        }
        Ok(())
    }

    /// Another project's question read: kept apart ([`Changes::others`]),
    /// while it is open and when it closes.
    async fn other_question(
        &mut self,
        work: &mut Store,
        question: &Question,
        changes: &mut Changes,
    ) -> Result<(), String> {
        let id = question.id.uuid();
        let was_open = if question.state == QuestionState::Open {
            !self.cursor.others_open.insert(id)
        } else {
            self.cursor.others_open.remove(&id)
        };
        if question.state != QuestionState::Open && !was_open {
            // Closed before the broker heard of it: nothing to tell.
            return Ok(());
        }
        let mut row = question_row(question, self.config.broker);
        row.host = lost(
            call(self.hosts.of(work, question.broker)).await,
            "reading brokers",
        )?;
        changes.others.push(row);
        Ok(())
    }

    /// The project's open questions and live grants, whole: what differs
    /// from what the broker was told (a lost notification, a change that
    /// committed after a later revision was read) is told now.
    async fn reread(&mut self, work: &mut Store, changes: &mut Changes) -> Result<(), String> {
        let project = self.config.project.clone();
        let me = self.config.broker;
        let told: HashSet<Uuid> = changes.questions.iter().map(|row| row.question).collect();
        if let Some(open) = lost(call(work.open_questions()).await, "reading open questions")? {
            let (open, others): (Vec<Question>, Vec<Question>) =
                open.into_iter().partition(|q| q.project == project);
            self.reread_others(work, others, changes).await?;
            let now_open: HashSet<Uuid> = open.iter().map(|q| q.id.uuid()).collect();
            for question in &open {
                if self.cursor.open.insert(question.id.uuid())
                    && !told.contains(&question.id.uuid())
                {
                    self.cursor.missed("an open question", question.revision);
                    changes.questions.push(question_row(question, me));
                }
            }
            let gone: Vec<Uuid> = self
                .cursor
                .open
                .iter()
                .filter(|id| !now_open.contains(id))
                .copied()
                .collect();
            for id in gone {
                self.cursor.open.remove(&id);
                let question = lost(
                    call(work.question(QuestionId::from_uuid(id))).await,
                    "reading a question",
                )?;
                if let Some(Some(question)) = question {
                    if !told.contains(&id) {
                        self.cursor.missed("a closed question", question.revision);
                        changes.questions.push(question_row(&question, me));
                    }
                }
            }
        }
        if let Some(live) = lost(
            call(work.live_grants(&project)).await,
            "reading live grants",
        )? {
            let now_live: HashSet<String> = live.iter().map(|g| g.grant.id.clone()).collect();
            for grant in &live {
                if self.cursor.live.insert(grant.grant.id.clone()) {
                    changes.grants.push(grant_row(grant));
                }
            }
            let gone: Vec<String> = self
                .cursor
                .live
                .iter()
                .filter(|id| !now_live.contains(*id))
                .cloned()
                .collect();
            for id in gone {
                self.cursor.live.remove(&id);
                // Revoked, or ended by the store's clock: gone either way.
                changes.grants.push(GrantRow {
                    id,
                    session_id: String::new(),
                    scope: toolgate_protocol::GrantScope::Project,
                    permission: String::new(),
                    pattern: String::new(),
                    literal: 0,
                    plan_only: false,
                    expires_at: None,
                    revoked: true,
                    question: None,
                });
            }
        }
        Ok(())
    }
}

impl Task {
    /// Other projects' open questions, whole (`open`): those the broker
    /// was not told of, and those it was told are open that closed.
    async fn reread_others(
        &mut self,
        work: &mut Store,
        open: Vec<Question>,
        changes: &mut Changes,
    ) -> Result<(), String> {
        let told: HashSet<Uuid> = changes.others.iter().map(|row| row.question).collect();
        let now_open: HashSet<Uuid> = open.iter().map(|q| q.id.uuid()).collect();
        for question in &open {
            if !told.contains(&question.id.uuid())
                && !self.cursor.others_open.contains(&question.id.uuid())
            {
                self.other_question(work, question, changes).await?;
            }
        }
        let gone: Vec<Uuid> = self
            .cursor
            .others_open
            .iter()
            .filter(|id| !now_open.contains(id))
            .copied()
            .collect();
        for id in gone {
            if told.contains(&id) {
                continue;
            }
            let question = lost(
                call(work.question(QuestionId::from_uuid(id))).await,
                "reading a question",
            )?;
            match question {
                Some(Some(question)) if question.state != QuestionState::Open => {
                    self.other_question(work, &question, changes).await?;
                }
                Some(None) => {
                    self.cursor.others_open.remove(&id);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The revisions of tokens changed after `revision` (the broker reads no
/// token, but their revisions come from the same sequence: seen, they are
/// not waited for).
async fn token_revisions(
    store: &mut Store,
    revision: i64,
    missing: &[i64],
) -> Result<Vec<i64>, StoreError> {
    let rows = store
        .client
        .query(
            "SELECT revision FROM toolgate_tokens WHERE revision > $1 \
             UNION ALL SELECT revision FROM toolgate_tokens \
             WHERE revision = ANY($2) AND revision <= $1",
            &[&revision, &missing],
        )
        .await
        .map_err(StoreError::from_query)?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(StoreError::from_query))
        .collect()
}

/// Commit one write: what to tell the broker besides that it is settled.
async fn apply(
    config: &Config,
    store: &mut Store,
    seq: u64,
    write: &Write,
) -> Result<Option<News>, Fail> {
    match write {
        Write::Session { row, change } => {
            let record = SessionRecord {
                project: config.project.clone(),
                session_id: row.session_id.clone(),
                parent_id: row.parent_id.clone(),
                mode: row.mode.clone(),
                permissions: row.permissions.clone(),
                started: row.started,
                joined: row.joined.clone(),
            };
            let change = match change {
                SessionChange::Start { mode_given } => SessionWrite::Start {
                    mode_given: *mode_given,
                },
                SessionChange::Mode => SessionWrite::Mode,
            };
            let held = call(store.put_session(&record, change)).await?;
            // A mode change never writes a closed session: closed, it was
            // refused.
            let refused = match (change, held.closed) {
                (SessionWrite::Mode, Some(closed)) => {
                    Some(closed_elsewhere(&row.session_id, closed))
                }
                _ => None,
            };
            Ok(Some(News::SessionWritten {
                seq,
                session_id: row.session_id.clone(),
                row: Some(session_row(&held)),
                refused,
            }))
        }
        Write::Close { session_id, why } => {
            let why = match why {
                CloseWhy::Ended => Closed::Ended,
                CloseWhy::Refused => Closed::Refused,
            };
            let held = call(store.close_session(&config.project, session_id, why)).await?;
            Ok(Some(News::SessionWritten {
                seq,
                session_id: session_id.clone(),
                row: Some(session_row(&held)),
                refused: None,
            }))
        }
        Write::Revoke { grant_id, by } => {
            call(store.revoke_grant(grant_id, by)).await?;
            Ok(None)
        }
        Write::Ask {
            question,
            session_id,
            request,
            offers,
        } => {
            let asked = NewQuestion {
                id: QuestionId::from_uuid(*question),
                broker: config.broker,
                project: config.project.clone(),
                session_id: session_id.clone(),
                request: request.clone(),
                offers: Some(offers.clone()),
            };
            call(store.ask(&asked)).await?;
            Ok(None)
        }
        Write::Answer {
            question,
            answer,
            by,
            grants,
            project,
        } => {
            // Another project's question: its grants are that project's.
            let project = project.as_deref().unwrap_or(&config.project);
            let grants: Vec<NewGrant> = grants
                .iter()
                .map(|grant| new_grant(project, grant, by, *question))
                .collect();
            let settled =
                call(store.answer(QuestionId::from_uuid(*question), answer, by, &grants)).await?;
            let outcome = match settled {
                Settled::First(_) => Outcome::Won,
                // The same answer by the same approver: a retry of one that
                // committed before the connection was lost.
                Settled::Already(held)
                    if held.state == QuestionState::Answered
                        && held.answered_by.as_deref() == Some(by.as_str())
                        && held.answer.as_ref() == Some(answer) =>
                {
                    Outcome::Won
                }
                Settled::Already(held) => {
                    Outcome::Lost(Box::new(question_row(&held, config.broker)))
                }
                Settled::Unknown => Outcome::Unknown,
            };
            Ok(Some(News::Answered {
                question: *question,
                outcome,
            }))
        }
        Write::Cancel { question, why } => {
            call(store.cancel_question(QuestionId::from_uuid(*question), why)).await?;
            Ok(None)
        }
    }
}

/// The grants `answer` (a `permission_response` frame) to `question`
/// makes, from the question's `offers` (schema version 2), with new ids:
/// what whoever takes an answer (a broker, the web page) passes to
/// [`Store::answer`], so that they are written in the answer's transaction.
/// `Err` says why the answer cannot be read, or names `patterns` that are
/// none of the question's options (nothing is written then).
pub fn answer_grants(
    question: &Question,
    answer: &serde_json::Value,
    by: &str,
) -> Result<Vec<NewGrant>, String> {
    let response = crate::broker::shared::read_answer(Some(answer))
        .ok_or_else(|| "the answer is not a permission_response".to_string())?;
    let rows = crate::broker::shared::answer_grants(
        question.offers.as_ref(),
        &response,
        &question.session_id,
        ms(SystemTime::now()),
        || format!("grant_{}", Uuid::new_v4()),
    )?;
    Ok(rows
        .iter()
        .map(|row| new_grant(&question.project, row, by, question.id.uuid()))
        .collect())
}

fn ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn new_grant(project: &str, grant: &GrantRow, by: &str, question: Uuid) -> NewGrant {
    NewGrant {
        id: grant.id.clone(),
        project: project.to_string(),
        session_id: grant.session_id.clone(),
        scope: grant.scope,
        permission: grant.permission.clone(),
        pattern: grant.pattern.clone(),
        literal: grant.literal,
        plan_only: grant.plan_only,
        expires_at: grant
            .expires_at
            .map(|at| UNIX_EPOCH + Duration::from_millis(at)),
        made_by: Some(by.to_string()),
        question: Some(QuestionId::from_uuid(question)),
    }
}

fn question_row(question: &Question, me: BrokerId) -> QuestionRow {
    QuestionRow {
        question: question.id.uuid(),
        project: question.project.clone(),
        host: None,
        own: question.broker == me,
        state: match question.state {
            QuestionState::Open => crate::broker::QuestionState::Open,
            QuestionState::Answered => crate::broker::QuestionState::Answered,
            QuestionState::Cancelled => crate::broker::QuestionState::Cancelled,
        },
        request: question.request.clone(),
        offers: question.offers.clone(),
        answer: question.answer.clone(),
        answered_by: question.answered_by.clone(),
        cancelled: question.cancelled.clone(),
    }
}

fn grant_row(grant: &Grant) -> GrantRow {
    GrantRow {
        id: grant.grant.id.clone(),
        session_id: grant.grant.session_id.clone(),
        scope: grant.grant.scope,
        permission: grant.grant.permission.clone(),
        pattern: grant.grant.pattern.clone(),
        literal: grant.grant.literal,
        plan_only: grant.grant.plan_only,
        expires_at: grant.grant.expires_at.map(ms),
        revoked: grant.revoked_at.is_some(),
        question: grant.grant.question.map(QuestionId::uuid),
    }
}

/// Why a mode change to a session closed in the store was not made, as
/// the frame that reported it says (`notSaved`).
fn closed_elsewhere(session_id: &str, closed: Closed) -> String {
    let how = match closed {
        Closed::Ended => "ended",
        Closed::Refused => "was shut (its session_start was refused)",
    };
    format!(
        "the session `{session_id}` {how} on another broker sharing the store: the mode change was not saved, and the session ends here too"
    )
}

fn session_row(session: &Session) -> SessionRow {
    SessionRow {
        session_id: session.record.session_id.clone(),
        parent_id: session.record.parent_id.clone(),
        mode: session.record.mode.clone(),
        permissions: session.record.permissions.clone(),
        started: session.record.started,
        joined: session.record.joined.clone(),
        closed: session.closed.map(|closed| match closed {
            Closed::Ended => CloseWhy::Ended,
            Closed::Refused => CloseWhy::Refused,
        }),
        revision: session.revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A horizon that gives nothing up early.
    const BLIND: Horizon = Horizon {
        ended_below: i64::MIN,
        started_below: i64::MAX,
    };

    #[test]
    fn the_cursor_waits_for_a_gap_then_gives_up_on_it() {
        let start = Instant::now();
        let mut cursor = Cursor::new(10);
        assert!(cursor.saw(11));
        assert!(cursor.saw(13));
        assert!(!cursor.saw(13), "read twice");
        assert!(!cursor.saw(9), "below the base");
        cursor.settle(start, BLIND);
        // 12 may still be committing: reading resumes after 11.
        assert_eq!(cursor.base, 11);
        // What is read next: 12 and what is above 13, not 13 again.
        assert_eq!(cursor.unread(), (13, vec![12]));
        assert!(cursor.saw(12));
        cursor.settle(start, BLIND);
        assert_eq!(cursor.base, 13);
        assert!(cursor.saw(15));
        cursor.settle(start, BLIND);
        assert_eq!(cursor.base, 13);
        cursor.settle(start + PATIENCE, BLIND);
        // 14 never came (a rollback): given up on.
        assert_eq!(cursor.base, 15);
        assert!(cursor.seen.is_empty() && cursor.missing.is_empty());
    }

    #[test]
    fn a_gap_is_given_up_once_every_transaction_that_could_hold_it_has_ended() {
        let now = Instant::now();
        let mut cursor = Cursor::new(10);
        assert!(cursor.saw(11));
        assert!(cursor.saw(14));
        // Transactions 100 to 104 ran around the read: 12 and 13 may be
        // held by any of them.
        cursor.settle(
            now,
            Horizon {
                ended_below: 100,
                started_below: 105,
            },
        );
        assert_eq!(cursor.base, 11);
        assert_eq!(cursor.unread(), (14, vec![12, 13]));
        // The next read began with 100 to 103 ended, 104 still running: 12
        // and 13 are still awaited; 16 appears and 15 is missed after a
        // read that ended with ids below 110 given.
        assert!(cursor.saw(16));
        cursor.settle(
            now,
            Horizon {
                ended_below: 104,
                started_below: 110,
            },
        );
        assert_eq!(cursor.unread(), (16, vec![12, 13, 15]));
        // 13 commits and is read.
        assert!(cursor.saw(13));
        // A read that began with everything below 105 ended: 12 never comes
        // (its row changed again, or it rolled back); 15 may still.
        cursor.settle(
            now,
            Horizon {
                ended_below: 105,
                started_below: 112,
            },
        );
        assert_eq!(cursor.base, 14);
        assert_eq!(cursor.unread(), (16, vec![15]));
        // The read that began with everything below 110 ended gives 15 up
        // too, and nothing is read twice.
        cursor.settle(
            now,
            Horizon {
                ended_below: 110,
                started_below: 112,
            },
        );
        assert_eq!(cursor.base, 16);
        assert!(cursor.seen.is_empty() && cursor.missing.is_empty());
        assert!(!cursor.saw(12) && !cursor.saw(15));
        // A gap missed by a read with nothing running around it is given
        // up at once.
        assert!(cursor.saw(18));
        cursor.settle(
            now,
            Horizon {
                ended_below: 120,
                started_below: 120,
            },
        );
        assert_eq!(cursor.base, 18);
        assert!(cursor.missing.is_empty());
    }
}
