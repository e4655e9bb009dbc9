//! Brokers with their leases, and the questions they put to approvers.
//!
//! A broker registers with a lease and renews it; each of its open
//! questions carries the same `lease_until`, renewed with it. A question's
//! `state` moves once, from `open` to `answered` or `cancelled`, by a
//! conditional update (`… WHERE state = 'open' RETURNING …`): whichever
//! broker's answer commits first wins, and every later answer or cancel
//! finds the question settled and changes nothing. A question whose lease
//! lapsed takes no answer: any broker may cancel it ([`Store::expire_leases`]),
//! and an answer that finds it lapsed cancels it instead.

use std::time::{Duration, SystemTime};

use tokio_postgres::Row;
use uuid::Uuid;

use super::sessions::{insert_grant, NewGrant};
use super::{get, Store, StoreError};

/// A broker's id in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BrokerId(Uuid);

/// A question's id in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuestionId(Uuid);

macro_rules! uuid_id {
    ($name:ident) => {
        impl $name {
            /// A new random id.
            pub fn random() -> $name {
                $name(Uuid::new_v4())
            }
            /// The id from a UUID.
            pub fn from_uuid(uuid: Uuid) -> $name {
                $name(uuid)
            }
            /// The UUID.
            pub fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

uuid_id!(BrokerId);
uuid_id!(QuestionId);

/// A broker sharing the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Its id.
    pub id: BrokerId,
    /// The host it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
    /// Its toolgate version.
    pub version: String,
    /// When it registered (the store's clock).
    pub started_at: SystemTime,
    /// Until when its lease holds.
    pub lease_until: SystemTime,
}

/// Where a question is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionState {
    /// Waiting for an answer.
    Open,
    /// Answered (once: the first answer).
    Answered,
    /// Cancelled: withdrawn, timed out, or its broker's lease lapsed.
    Cancelled,
}

/// A question to be put to approvers.
#[derive(Debug, Clone, PartialEq)]
pub struct NewQuestion {
    /// Its id.
    pub id: QuestionId,
    /// The broker that asks (and holds the call).
    pub broker: BrokerId,
    /// The project root of the call.
    pub project: String,
    /// The session of the call.
    pub session_id: String,
    /// What approvers are shown: the `permission_request` frame.
    pub request: serde_json::Value,
    /// What an `always` answer grants (see `migrations/v2.sql`), so that
    /// whichever broker takes the answer writes its grants; `None`: nothing.
    pub offers: Option<serde_json::Value>,
}

/// A question as the store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Its id.
    pub id: QuestionId,
    /// The broker that asked.
    pub broker: BrokerId,
    /// The project root of the call.
    pub project: String,
    /// The session of the call.
    pub session_id: String,
    /// Open, answered or cancelled.
    pub state: QuestionState,
    /// The `permission_request` frame.
    pub request: serde_json::Value,
    /// The answer (the `permission_response` frame), once answered.
    pub answer: Option<serde_json::Value>,
    /// Who answered (a token's name).
    pub answered_by: Option<String>,
    /// When.
    pub answered_at: Option<SystemTime>,
    /// Why it was cancelled (`lease`, or what the caller said).
    pub cancelled: Option<String>,
    /// Until when its broker's lease holds it open.
    pub lease_until: SystemTime,
    /// When it was asked (the store's clock).
    pub created_at: SystemTime,
    /// The revision of its last change.
    pub revision: i64,
    /// What an `always` answer grants ([`NewQuestion::offers`]).
    pub offers: Option<serde_json::Value>,
}

/// What an answer or a cancel did.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// This one settled the question (and wrote its grants).
    First(Question),
    /// The question was settled already (answered, or cancelled), or its
    /// lease had lapsed and it is cancelled now: this one changed nothing.
    Already(Question),
    /// No question has that id.
    Unknown,
}

const QUESTION_COLUMNS: &str = "id, broker_id, project, session_id, state, request, answer, \
                                answered_by, answered_at, cancelled, lease_until, created_at, \
                                revision, offers";

const BROKER_COLUMNS: &str = "id, host, pid, version, started_at, lease_until";

/// Seconds of `lease`, for `now() + $n * interval '1 second'`.
fn secs(lease: Duration) -> f64 {
    lease.as_secs_f64()
}

impl Store {
    /// Register a broker with a lease of `lease` from now. Registering an
    /// id again (a broker whose lease lapsed while it was cut off from the
    /// store) renews its row: its lapsed questions stay lapsed.
    pub async fn register_broker(
        &mut self,
        id: BrokerId,
        host: &str,
        pid: u32,
        lease: Duration,
    ) -> Result<BrokerInfo, StoreError> {
        let pid = i32::try_from(pid).unwrap_or(i32::MAX);
        let row = self
            .client
            .query_one(
                &format!(
                    "INSERT INTO toolgate_brokers (id, host, pid, version, lease_until)
                     VALUES ($1, $2, $3, $4, now() + $5 * interval '1 second')
                     ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until
                     RETURNING {BROKER_COLUMNS}"
                ),
                &[
                    &id.uuid(),
                    &host,
                    &pid,
                    &env!("CARGO_PKG_VERSION"),
                    &secs(lease),
                ],
            )
            .await
            .map_err(StoreError::from_query)?;
        broker(&row)
    }

    /// Renew a broker's lease, and its open questions' with it, to `lease`
    /// from now. [`StoreError::LeaseLost`] when the lease had lapsed (or
    /// the broker is not registered): its questions may be cancelled
    /// already, and it must register again.
    pub async fn renew_lease(
        &mut self,
        id: BrokerId,
        lease: Duration,
    ) -> Result<SystemTime, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let until: Option<SystemTime> = tx
            .query_opt(
                "UPDATE toolgate_brokers SET lease_until = now() + $2 * interval '1 second'
                 WHERE id = $1 AND lease_until > now() RETURNING lease_until",
                &[&id.uuid(), &secs(lease)],
            )
            .await
            .map_err(StoreError::from_query)?
            .map(|row| get(&row, 0))
            .transpose()?;
        let Some(until) = until else {
            return Err(StoreError::LeaseLost {
                broker: id.to_string(),
            });
        };
        tx.execute(
            "UPDATE toolgate_questions SET lease_until = $2
             WHERE broker_id = $1 AND state = 'open' AND lease_until > now()",
            &[&id.uuid(), &until],
        )
        .await
        .map_err(StoreError::from_query)?;
        tx.commit().await.map_err(StoreError::from_query)?;
        Ok(until)
    }

    /// A broker leaves: its open questions are cancelled (`why`) and it is
    /// forgotten. The questions cancelled.
    pub async fn retire_broker(
        &mut self,
        id: BrokerId,
        why: &str,
    ) -> Result<Vec<QuestionId>, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let rows = tx
            .query(
                "UPDATE toolgate_questions SET state = 'cancelled', cancelled = $2
                 WHERE broker_id = $1 AND state = 'open' RETURNING id",
                &[&id.uuid(), &why],
            )
            .await
            .map_err(StoreError::from_query)?;
        tx.execute("DELETE FROM toolgate_brokers WHERE id = $1", &[&id.uuid()])
            .await
            .map_err(StoreError::from_query)?;
        tx.commit().await.map_err(StoreError::from_query)?;
        rows.iter()
            .map(|row| get(row, 0).map(QuestionId::from_uuid))
            .collect()
    }

    /// Every registered broker, lapsed leases too.
    pub async fn brokers(&mut self) -> Result<Vec<BrokerInfo>, StoreError> {
        let rows = self
            .client
            .query(
                &format!("SELECT {BROKER_COLUMNS} FROM toolgate_brokers ORDER BY started_at, id"),
                &[],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(broker).collect()
    }

    /// Cancel (`lease`) every open question whose lease has lapsed, and
    /// forget the brokers whose lease has: any broker may run it. The
    /// questions cancelled.
    pub async fn expire_leases(&mut self) -> Result<Vec<QuestionId>, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let rows = tx
            .query(
                "UPDATE toolgate_questions SET state = 'cancelled', cancelled = 'lease'
                 WHERE state = 'open' AND lease_until <= now() RETURNING id",
                &[],
            )
            .await
            .map_err(StoreError::from_query)?;
        tx.execute(
            "DELETE FROM toolgate_brokers WHERE lease_until <= now()",
            &[],
        )
        .await
        .map_err(StoreError::from_query)?;
        tx.commit().await.map_err(StoreError::from_query)?;
        rows.iter()
            .map(|row| get(row, 0).map(QuestionId::from_uuid))
            .collect()
    }

    /// Put a question in the store, open, held by its broker's lease.
    /// [`StoreError::LeaseLost`] when that lease has lapsed. Asking an id
    /// the store holds already (a retry after a lost connection) changes
    /// nothing and returns the question as it is.
    pub async fn ask(&mut self, question: &NewQuestion) -> Result<Question, StoreError> {
        let row = self
            .client
            .query_opt(
                &format!(
                    "INSERT INTO toolgate_questions
                       (id, broker_id, project, session_id, request, offers, lease_until)
                     SELECT $1, id, $3, $4, $5, $6, lease_until FROM toolgate_brokers
                     WHERE id = $2 AND lease_until > now()
                     ON CONFLICT (id) DO NOTHING
                     RETURNING {QUESTION_COLUMNS}"
                ),
                &[
                    &question.id.uuid(),
                    &question.broker.uuid(),
                    &question.project,
                    &question.session_id,
                    &question.request,
                    &question.offers,
                ],
            )
            .await
            .map_err(StoreError::from_query)?;
        match row {
            Some(row) => read_question(&row),
            None => match self.question(question.id).await? {
                Some(asked) => Ok(asked),
                None => Err(StoreError::LeaseLost {
                    broker: question.broker.to_string(),
                }),
            },
        }
    }

    /// Answer a question, and write the grants the answer makes, in one
    /// transaction: only the first answer of an open question whose lease
    /// holds does anything ([`Settled::First`]). The grants are written
    /// with the question's id and `answered_by` as their author.
    pub async fn answer(
        &mut self,
        id: QuestionId,
        answer: &serde_json::Value,
        answered_by: &str,
        grants: &[NewGrant],
    ) -> Result<Settled, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let won = tx
            .query_opt(
                &format!(
                    "UPDATE toolgate_questions
                     SET state = 'answered', answer = $2, answered_by = $3, answered_at = now()
                     WHERE id = $1 AND state = 'open' AND lease_until > now()
                     RETURNING {QUESTION_COLUMNS}"
                ),
                &[&id.uuid(), answer, &answered_by],
            )
            .await
            .map_err(StoreError::from_query)?;
        let settled = match won {
            Some(row) => {
                for grant in grants {
                    let mut grant = grant.clone();
                    grant.question = Some(id);
                    grant.made_by = Some(answered_by.to_string());
                    insert_grant(&tx, &grant).await?;
                }
                Settled::First(read_question(&row)?)
            }
            None => lapsed_or_settled(&tx, id).await?,
        };
        tx.commit().await.map_err(StoreError::from_query)?;
        Ok(settled)
    }

    /// Cancel an open question (`why`: `withdrawn`, `timeout`, ...).
    pub async fn cancel_question(
        &mut self,
        id: QuestionId,
        why: &str,
    ) -> Result<Settled, StoreError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(StoreError::from_query)?;
        let row = tx
            .query_opt(
                &format!(
                    "UPDATE toolgate_questions SET state = 'cancelled', cancelled = $2
                     WHERE id = $1 AND state = 'open' AND lease_until > now()
                     RETURNING {QUESTION_COLUMNS}"
                ),
                &[&id.uuid(), &why],
            )
            .await
            .map_err(StoreError::from_query)?;
        let settled = match row {
            Some(row) => Settled::First(read_question(&row)?),
            None => lapsed_or_settled(&tx, id).await?,
        };
        tx.commit().await.map_err(StoreError::from_query)?;
        Ok(settled)
    }

    /// One question, if the store holds it.
    pub async fn question(&mut self, id: QuestionId) -> Result<Option<Question>, StoreError> {
        let row = self
            .client
            .query_opt(
                &format!("SELECT {QUESTION_COLUMNS} FROM toolgate_questions WHERE id = $1"),
                &[&id.uuid()],
            )
            .await
            .map_err(StoreError::from_query)?;
        row.as_ref().map(read_question).transpose()
    }

    /// Every open question whose lease holds, oldest first.
    pub async fn open_questions(&mut self) -> Result<Vec<Question>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {QUESTION_COLUMNS} FROM toolgate_questions
                     WHERE state = 'open' AND lease_until > now() ORDER BY created_at, id"
                ),
                &[],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(read_question).collect()
    }

    /// Every question changed after `revision`, or whose revision is one of
    /// `missing`, in the order of their changes.
    pub async fn questions_since(
        &mut self,
        revision: i64,
        missing: &[i64],
    ) -> Result<Vec<Question>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {QUESTION_COLUMNS} FROM toolgate_questions WHERE revision > $1
                      UNION ALL
                      SELECT {QUESTION_COLUMNS} FROM toolgate_questions
                      WHERE revision = ANY($2) AND revision <= $1
                      ORDER BY revision"
                ),
                &[&revision, &missing],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(read_question).collect()
    }
}

/// A question the conditional update did not take: cancelled now if it is
/// open with its lease lapsed, else as it is.
async fn lapsed_or_settled(
    tx: &tokio_postgres::Transaction<'_>,
    id: QuestionId,
) -> Result<Settled, StoreError> {
    let row = tx
        .query_opt(
            &format!(
                "UPDATE toolgate_questions SET state = 'cancelled', cancelled = 'lease'
                 WHERE id = $1 AND state = 'open' AND lease_until <= now()
                 RETURNING {QUESTION_COLUMNS}"
            ),
            &[&id.uuid()],
        )
        .await
        .map_err(StoreError::from_query)?;
    let row = match row {
        Some(row) => Some(row),
        None => tx
            .query_opt(
                &format!("SELECT {QUESTION_COLUMNS} FROM toolgate_questions WHERE id = $1"),
                &[&id.uuid()],
            )
            .await
            .map_err(StoreError::from_query)?,
    };
    match row {
        Some(row) => Ok(Settled::Already(read_question(&row)?)),
        None => Ok(Settled::Unknown),
    }
}

fn broker(row: &Row) -> Result<BrokerInfo, StoreError> {
    let pid: i32 = get(row, 2)?;
    Ok(BrokerInfo {
        id: BrokerId(get(row, 0)?),
        host: get(row, 1)?,
        pid: u32::try_from(pid).unwrap_or(0),
        version: get(row, 3)?,
        started_at: get(row, 4)?,
        lease_until: get(row, 5)?,
    })
}

fn read_question(row: &Row) -> Result<Question, StoreError> {
    let state: String = get(row, 4)?;
    let state = match state.as_str() {
        "open" => QuestionState::Open,
        "answered" => QuestionState::Answered,
        "cancelled" => QuestionState::Cancelled,
        other => {
            return Err(StoreError::Unreadable {
                what: format!("a question's state `{}`", crate::display::shown(other)),
            })
        }
    };
    Ok(Question {
        id: QuestionId(get(row, 0)?),
        broker: BrokerId(get(row, 1)?),
        project: get(row, 2)?,
        session_id: get(row, 3)?,
        state,
        request: get(row, 5)?,
        answer: get(row, 6)?,
        answered_by: get(row, 7)?,
        answered_at: get(row, 8)?,
        cancelled: get(row, 9)?,
        lease_until: get(row, 10)?,
        created_at: get(row, 11)?,
        revision: get(row, 12)?,
        offers: get(row, 13)?,
    })
}
