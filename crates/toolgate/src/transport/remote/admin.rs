//! The token frames of a remote connection whose token is an `admin`'s
//! (`create_token`, `list_tokens`, `revoke_token`), done with the store by
//! a task of the listener, never by the broker's loop: the broker gets the
//! reply once the store has committed (or said no), as
//! [`Event::Administered`], sends it to the connection and records what
//! changed in its audit log.
//!
//! What an admin may do is bounded by what its own token holds:
//!
//! - its token is checked again first (a token revoked or expired a moment
//!   ago makes nothing, even before the verifier ends its connection);
//! - a token limited to a project makes only tokens limited to that same
//!   project (never one for every project, never one for another), lists
//!   only that project's tokens and revokes only those;
//! - a token with an expiry makes only tokens that expire no later than it
//!   does (by the store's clock, in the statement that makes it): never one
//!   without an expiry.
//!
//! Each frame uses a connection of its own to the store, made for it and
//! given [`STORE_WAIT`]: a store that cannot be reached is an `error`
//! (`store_unavailable`), nothing changed. A connection's token frames are
//! done one at a time, in order ([`worker`]); at most [`QUEUE`] wait.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;
use toolgate_protocol as wire;
use toolgate_protocol::{ClientFrame, ErrorCode, ServerFrame};

use crate::broker::ConnId;
use crate::clock::epoch_ms;
use crate::fleet::tokens::{NewToken, Revoked, Role, Secret, TokenInfo, TokenRefused};
use crate::fleet::{Store, StoreError};
use crate::owner::Event;

use super::gate::Holder;
use super::verifier::Token;

/// The longest a token frame waits for the store, connecting included.
pub const STORE_WAIT: Duration = Duration::from_secs(10);

/// What a token frame is done for: the admin's connection and token.
pub struct Admin {
    /// The store's URL.
    pub store: String,
    /// The admin's connection.
    pub conn: ConnId,
    /// Its token, checked again before anything is done.
    pub token: Token,
    /// Its name, role and project.
    pub holder: Holder,
    /// Where the reply goes.
    pub events: mpsc::Sender<Event>,
}

/// Whether `frame` is one of the token frames.
pub fn is_token_frame(frame: &ClientFrame) -> bool {
    matches!(
        frame,
        ClientFrame::CreateToken(_) | ClientFrame::ListTokens(_) | ClientFrame::RevokeToken(_)
    )
}

/// How many token frames of one connection may wait for the store.
pub const QUEUE: usize = 16;

/// Start the task that does a connection's token frames for `admin`, one
/// at a time in the order they were sent (a `revoke_token` after a
/// `create_token` finds the token made); it ends when the sender is
/// dropped (the connection ended).
pub fn worker(admin: Admin) -> mpsc::Sender<(ClientFrame, u64)> {
    let (frames, mut received) = mpsc::channel::<(ClientFrame, u64)>(QUEUE);
    tokio::spawn(async move {
        while let Some((frame, number)) = received.recv().await {
            run(&admin, frame, number).await;
        }
    });
    frames
}

/// Do `frame` (line `number`) for `admin` and hand the reply to the owner.
pub async fn run(admin: &Admin, frame: ClientFrame, number: u64) {
    let reply = match tokio::time::timeout(STORE_WAIT, perform(admin, frame)).await {
        Ok(Ok(reply)) => reply,
        Ok(Err((code, message))) => error(code, message, number),
        Err(_) => error(
            ErrorCode::StoreUnavailable,
            format!(
                "the store did not answer within {} s: nothing was changed (a token being made may have been stored: `list_tokens` says)",
                STORE_WAIT.as_secs()
            ),
            number,
        ),
    };
    let _ = admin
        .events
        .send(Event::Administered {
            conn: admin.conn,
            reply,
            by: admin.holder.signature(),
        })
        .await;
}

type Failure = (ErrorCode, String);

fn error(code: ErrorCode, message: String, line: u64) -> ServerFrame {
    ServerFrame::Error(wire::ErrorFrame {
        line: Some(line),
        ..wire::ErrorFrame::new(code, message)
    })
}

fn unavailable(err: &StoreError) -> Failure {
    if err.is_unreachable() {
        (
            ErrorCode::StoreUnavailable,
            format!("the store cannot be reached: nothing was changed ({err})"),
        )
    } else {
        (
            ErrorCode::StoreUnavailable,
            format!("the store failed: {err}"),
        )
    }
}

/// What the admin asked, done.
async fn perform(admin: &Admin, frame: ClientFrame) -> Result<ServerFrame, Failure> {
    let mut store = Store::connect(&admin.store)
        .await
        .map_err(|err| unavailable(&err))?;
    store
        .check_schema()
        .await
        .map_err(|err| unavailable(&err))?;
    // The admin's token, as it stands now.
    let identity = match store.verify(admin.token.text()).await {
        Ok(identity) => identity,
        Err(TokenRefused::Unverifiable(err)) => return Err(unavailable(&err)),
        Err(refused) => {
            return Err((
                ErrorCode::Forbidden,
                format!("token refused: {refused}: nothing was changed"),
            ))
        }
    };
    let who = &admin.holder.name;
    if identity.role != Role::Admin {
        return Err((
            ErrorCode::Forbidden,
            format!("the token `{who}` is not an admin's: only an admin token may manage tokens"),
        ));
    }
    match frame {
        ClientFrame::CreateToken(create) => {
            let role = role_of(create.role);
            let new = NewToken::new(
                &create.name,
                role,
                create.project.as_deref(),
                create.expires_in,
            )
            .map_err(|err| (ErrorCode::InvalidFrame, err.to_string()))?;
            if let Some(own) = &identity.project {
                match &create.project {
                    None => {
                        return Err((
                            ErrorCode::Forbidden,
                            format!(
                                "the token `{who}` is limited to the project {}: it cannot make a token for every project (give `project`)",
                                crate::display::shown(own)
                            ),
                        ))
                    }
                    Some(project) if !same_project(project, own) => {
                        return Err((
                            ErrorCode::Forbidden,
                            format!(
                                "the token `{who}` is limited to the project {}: it cannot make a token for the project {}",
                                crate::display::shown(own),
                                crate::display::shown(project)
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            if identity.expires_at.is_some() && create.expires_in.is_none() {
                return Err((
                    ErrorCode::Forbidden,
                    format!(
                        "the token `{who}` expires: it cannot make a token that never does (give `expiresIn`, ending no later than it)"
                    ),
                ));
            }
            let secret = Secret::generate().map_err(|err| {
                (
                    ErrorCode::StoreUnavailable,
                    format!("no random bytes for a token: {err}"),
                )
            })?;
            let made = store
                .create_token_until(&new, &secret, identity.expires_at)
                .await
                .map_err(|err| match err {
                    StoreError::NameTaken { .. } => (ErrorCode::NameTaken, err.to_string()),
                    err => unavailable(&err),
                })?;
            match made {
                Some(info) => Ok(ServerFrame::TokenCreated(wire::TokenCreated {
                    token: secret.expose().to_string(),
                    info: wire_info(&info),
                })),
                None => Err((
                    ErrorCode::Forbidden,
                    format!(
                        "the token `{who}` expires at {}: it cannot make a token that outlives it",
                        identity
                            .expires_at
                            .map_or_else(String::new, |at| crate::clock::utc_text(epoch_ms(at)))
                    ),
                )),
            }
        }
        ClientFrame::ListTokens(_) => {
            let tokens = store.tokens().await.map_err(|err| unavailable(&err))?;
            Ok(ServerFrame::Tokens(wire::Tokens {
                tokens: tokens
                    .iter()
                    .filter(|token| visible(identity.project.as_deref(), token))
                    .map(wire_info)
                    .collect(),
            }))
        }
        ClientFrame::RevokeToken(revoke) => {
            let unknown = || {
                (
                    ErrorCode::UnknownToken,
                    format!(
                        "no token has the name or id `{}`",
                        crate::display::shown(&revoke.name)
                    ),
                )
            };
            // Found first, so that a limited admin's reach is checked,
            // then revoked by its id.
            let tokens = store.tokens().await.map_err(|err| unavailable(&err))?;
            let id = uuid::Uuid::parse_str(&revoke.name).ok();
            let found = match id {
                Some(id) => tokens.iter().find(|token| token.id == id),
                None => tokens
                    .iter()
                    .find(|token| token.name == revoke.name && token.revoked_at.is_none())
                    .or_else(|| {
                        tokens
                            .iter()
                            .filter(|token| token.name == revoke.name)
                            .max_by_key(|token| token.revoked_at)
                    }),
            };
            let Some(found) = found else {
                return Err(unknown());
            };
            if !visible(identity.project.as_deref(), found) {
                // Said as unknown would hide less than it seems: the limited
                // admin is told it may not, not whether it exists.
                return Err((
                    ErrorCode::Forbidden,
                    format!(
                        "the token `{who}` is limited to the project {}: it can revoke only that project's tokens",
                        identity.project.as_deref().map_or_else(String::new, |p| crate::display::shown(p).into_owned())
                    ),
                ));
            }
            match store
                .revoke_token(&found.id.to_string())
                .await
                .map_err(|err| unavailable(&err))?
            {
                Revoked::Now(info) => Ok(ServerFrame::TokenRevoked(wire::TokenRevoked {
                    info: wire_info(&info),
                    already: false,
                })),
                Revoked::Already(info) => Ok(ServerFrame::TokenRevoked(wire::TokenRevoked {
                    info: wire_info(&info),
                    already: true,
                })),
                Revoked::Unknown => Err(unknown()),
            }
        }
        _ => Err((ErrorCode::InvalidFrame, "not a token frame".to_string())),
    }
}

/// Whether an admin limited to `project` (if it is) may see and revoke
/// `token`: only tokens limited to the same project.
fn visible(project: Option<&str>, token: &TokenInfo) -> bool {
    match project {
        None => true,
        Some(own) => token
            .project
            .as_deref()
            .is_some_and(|project| same_project(project, own)),
    }
}

/// Two projects compared as paths, component by component, as a token's
/// project is compared with a broker's root.
fn same_project(one: &str, other: &str) -> bool {
    Path::new(one).is_absolute() && super::gate::project_matches(one, Path::new(other))
}

fn role_of(role: wire::TokenRole) -> Role {
    match role {
        wire::TokenRole::Agent => Role::Agent,
        wire::TokenRole::Approver => Role::Approver,
        wire::TokenRole::Observer => Role::Observer,
        wire::TokenRole::Admin => Role::Admin,
    }
}

/// A stored token as the wire shows it.
pub fn wire_info(info: &TokenInfo) -> wire::TokenInfo {
    wire::TokenInfo {
        id: info.id.to_string(),
        name: info.name.clone(),
        role: match info.role {
            Role::Agent => wire::TokenRole::Agent,
            Role::Approver => wire::TokenRole::Approver,
            Role::Observer => wire::TokenRole::Observer,
            Role::Admin => wire::TokenRole::Admin,
        },
        project: info.project.clone(),
        created_at: epoch_ms(info.created_at),
        expires_at: info.expires_at.map(epoch_ms),
        expired: info.expired,
        revoked_at: info.revoked_at.map(epoch_ms),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;
    use std::time::SystemTime;

    fn info(project: Option<&str>) -> TokenInfo {
        TokenInfo {
            id: uuid::Uuid::nil(),
            name: "t".into(),
            role: Role::Agent,
            project: project.map(str::to_string),
            created_at: SystemTime::UNIX_EPOCH,
            expires_at: None,
            revoked_at: None,
            expired: false,
        }
    }

    #[test]
    fn a_limited_admin_sees_only_its_project() {
        assert!(visible(None, &info(None)));
        assert!(visible(None, &info(Some("/p2"))));
        assert!(visible(Some("/p1"), &info(Some("/p1/"))));
        assert!(!visible(Some("/p1"), &info(None)));
        assert!(!visible(Some("/p1"), &info(Some("/p2"))));
        assert!(!visible(Some("/p1"), &info(Some("p1"))));
    }
}
