//! Bearer tokens: `tg_` and the base64url text of 32 random bytes. The
//! store keeps only the SHA-256 of the text, with a name, a role, an
//! optional project and an expiry; [`Store::verify`] finds a token by that
//! hash and says who it is or why it is refused.
//!
//! A fast hash is right here: a token is 256 random bits, so no guess can
//! be tested against a leaked hash faster than by brute force of 2^256. A
//! slow password hash (argon2, bcrypt) protects low-entropy secrets chosen
//! by people and would only make each connection cost tens of milliseconds
//! of CPU. Looking a token up by its hash also needs no constant-time
//! comparison: the time a lookup takes says nothing about a preimage.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{get, Store, StoreError};

/// What every token begins with, so a token is recognised in a file or a
/// log (and secret scanners can be taught it).
pub const PREFIX: &str = "tg_";

/// The random bytes in a token.
pub const TOKEN_BYTES: usize = 32;

/// The longest lifetime `--expires` takes: 100 years, in seconds.
pub const MAX_LIFETIME_SECS: u64 = 100 * 365 * 86_400;

/// The longest token name.
pub const MAX_NAME_CHARS: usize = 128;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends tool calls; never answers a question.
    Agent,
    /// Answers questions.
    Approver,
    /// Watches sessions, decisions and questions.
    Observer,
    /// Everything, and the administration of the fleet.
    Admin,
}

impl Role {
    /// Every role, in the order messages list them.
    pub const ALL: [Role; 4] = [Role::Agent, Role::Approver, Role::Observer, Role::Admin];

    /// The role as the store and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Observer => "observer",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role that is none of [`Role::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role `{given}`: a role is one of agent, approver, observer, admin")]
pub struct BadRole {
    /// What was given.
    pub given: String,
}

impl FromStr for Role {
    type Err = BadRole;

    fn from_str(text: &str) -> Result<Role, BadRole> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| BadRole {
                given: crate::display::shown(text).into_owned(),
            })
    }
}

/// A token's text. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// A new token from the operating system's random source.
    pub fn generate() -> Result<Secret, getrandom::Error> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes)?;
        Ok(Secret(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))))
    }

    /// The token's text, to hand to the person who asked for it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Whether `token` has a token's shape: the prefix, then exactly the
/// canonical base64url text (no padding) of [`TOKEN_BYTES`] bytes.
pub fn well_formed(token: &str) -> bool {
    let Some(body) = token.strip_prefix(PREFIX) else {
        return false;
    };
    let mut bytes = [0u8; TOKEN_BYTES + 3];
    matches!(
        URL_SAFE_NO_PAD.decode_slice(body, &mut bytes),
        Ok(TOKEN_BYTES)
    )
}

/// The SHA-256 of a token's text: what the store keeps.
pub fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// What is wrong with the name, project or lifetime of a token to be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadToken {
    /// An empty name.
    #[error("a token's name cannot be empty")]
    EmptyName,
    /// A name too long.
    #[error("a token's name is at most {MAX_NAME_CHARS} characters")]
    LongName,
    /// A name with control characters or spaces at either end.
    #[error("a token's name `{0}` holds control characters or spaces at either end")]
    OddName(String),
    /// A name that reads as a token's id (so `tokens revoke` would take it
    /// for one).
    #[error("a token's name `{0}` cannot have the form of a token id (a UUID)")]
    NameIsId(String),
    /// An empty project.
    #[error("--project cannot be empty (leave it out for a token of every project)")]
    EmptyProject,
    /// A lifetime of zero or over [`MAX_LIFETIME_SECS`].
    #[error("--expires is a number of seconds from 1 to {MAX_LIFETIME_SECS} (100 years), not {0}")]
    Lifetime(u64),
}

/// A token to be made, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    name: String,
    role: Role,
    project: Option<String>,
    lifetime: Option<Duration>,
}

impl NewToken {
    /// Check a token's name, project and lifetime in seconds.
    pub fn new(
        name: &str,
        role: Role,
        project: Option<&str>,
        lifetime_secs: Option<u64>,
    ) -> Result<NewToken, BadToken> {
        if name.is_empty() {
            return Err(BadToken::EmptyName);
        }
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(BadToken::LongName);
        }
        if name.chars().any(char::is_control) || name.trim() != name {
            return Err(BadToken::OddName(crate::display::shown(name).into_owned()));
        }
        if Uuid::parse_str(name).is_ok() {
            return Err(BadToken::NameIsId(name.to_string()));
        }
        if project == Some("") {
            return Err(BadToken::EmptyProject);
        }
        let lifetime = match lifetime_secs {
            None => None,
            Some(secs) if (1..=MAX_LIFETIME_SECS).contains(&secs) => {
                Some(Duration::from_secs(secs))
            }
            Some(secs) => return Err(BadToken::Lifetime(secs)),
        };
        Ok(NewToken {
            name: name.to_string(),
            role,
            project: project.map(str::to_string),
            lifetime,
        })
    }
}

/// A stored token as `tokens list` shows it (never its text or hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The project it is limited to, if any.
    pub project: Option<String>,
    /// When it was made (the store's clock).
    pub created_at: SystemTime,
    /// When it ends, if it does.
    pub expires_at: Option<SystemTime>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<SystemTime>,
    /// Whether its lifetime was over when it was read (the store's clock).
    pub expired: bool,
}

/// Who a valid token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The token's id.
    pub token_id: Uuid,
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The project it is limited to, if any.
    pub project: Option<String>,
    /// When it ends, if it does.
    pub expires_at: Option<SystemTime>,
}

/// Why a token is refused. A token that cannot be checked is refused too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRefused {
    /// Not a token's shape.
    #[error("not a toolgate token (expected `{PREFIX}` and 43 base64url characters)")]
    Malformed,
    /// No stored token has its hash.
    #[error("unknown token")]
    Unknown,
    /// Its lifetime is over.
    #[error("the token `{name}` has expired")]
    Expired {
        /// The token's name.
        name: String,
    },
    /// It was revoked.
    #[error("the token `{name}` was revoked")]
    Revoked {
        /// The token's name.
        name: String,
    },
    /// The store could not say.
    #[error("the token could not be checked: {0}")]
    Unverifiable(#[source] StoreError),
}

/// What [`Store::revoke_token`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoked {
    /// The token is revoked now.
    Now(TokenInfo),
    /// It already was.
    Already(TokenInfo),
    /// No token has that name or id.
    Unknown,
}

const COLUMNS: &str = "id, name, role, project, created_at, expires_at, revoked_at, \
                       expires_at IS NOT NULL AND expires_at <= now()";

impl Store {
    /// Store `new` as the token `secret` (only its hash is kept). The
    /// schema must be at this binary's version.
    pub async fn create_token(
        &mut self,
        new: &NewToken,
        secret: &Secret,
    ) -> Result<TokenInfo, StoreError> {
        match self.create_token_until(new, secret, None).await? {
            Some(info) => Ok(info),
            None => Err(StoreError::Unreadable {
                what: "the token just made (the store returned no row)".into(),
            }),
        }
    }

    /// Store `new` as the token `secret`, unless it would outlive
    /// `not_after` (by the store's clock, in the same statement): `None`,
    /// and nothing stored. A token without a lifetime outlives any
    /// `not_after`.
    pub async fn create_token_until(
        &mut self,
        new: &NewToken,
        secret: &Secret,
        not_after: Option<SystemTime>,
    ) -> Result<Option<TokenInfo>, StoreError> {
        let lifetime = new.lifetime.map(|lifetime| lifetime.as_secs_f64());
        let row = self
            .client
            .query_opt(
                &format!(
                    "INSERT INTO toolgate_tokens (id, name, hash, role, project, expires_at)
                     SELECT $1::uuid, $2::text, $3::bytea, $4::text, $5::text,
                            now() + $6::float8 * interval '1 second'
                     WHERE $7::timestamptz IS NULL
                        OR now() + $6::float8 * interval '1 second' <= $7::timestamptz
                     RETURNING {COLUMNS}"
                ),
                &[
                    &Uuid::new_v4(),
                    &new.name,
                    &hash(secret.expose()),
                    &new.role.as_str(),
                    &new.project,
                    &lifetime,
                    &not_after,
                ],
            )
            .await
            .map_err(|err| {
                if err.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    StoreError::NameTaken {
                        name: new.name.clone(),
                    }
                } else {
                    StoreError::from_query(err)
                }
            })?;
        row.as_ref().map(token_info).transpose()
    }

    /// Every stored token, revoked and expired ones too, oldest first.
    pub async fn tokens(&mut self) -> Result<Vec<TokenInfo>, StoreError> {
        let rows = self
            .client
            .query(
                &format!("SELECT {COLUMNS} FROM toolgate_tokens ORDER BY created_at, name, id"),
                &[],
            )
            .await
            .map_err(StoreError::from_query)?;
        rows.iter().map(token_info).collect()
    }

    /// Revoke the live token named `name_or_id`, or the token with that id.
    pub async fn revoke_token(&mut self, name_or_id: &str) -> Result<Revoked, StoreError> {
        let id = Uuid::parse_str(name_or_id).ok();
        let revoked = self
            .client
            .query_opt(
                &format!(
                    "UPDATE toolgate_tokens SET revoked_at = now()
                     WHERE revoked_at IS NULL AND (id = $1 OR ($1 IS NULL AND name = $2))
                     RETURNING {COLUMNS}"
                ),
                &[&id, &name_or_id],
            )
            .await
            .map_err(StoreError::from_query)?;
        if let Some(row) = revoked {
            return Ok(Revoked::Now(token_info(&row)?));
        }
        let earlier = self
            .client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM toolgate_tokens
                     WHERE id = $1 OR ($1 IS NULL AND name = $2)
                     ORDER BY revoked_at DESC LIMIT 1"
                ),
                &[&id, &name_or_id],
            )
            .await
            .map_err(StoreError::from_query)?;
        match earlier {
            Some(row) => Ok(Revoked::Already(token_info(&row)?)),
            None => Ok(Revoked::Unknown),
        }
    }

    /// Who `token` is, or why it is refused: malformed, unknown, revoked
    /// (whatever its expiry), expired, or not checkable (the store failed:
    /// refused all the same).
    pub async fn verify(&mut self, token: &str) -> Result<Identity, TokenRefused> {
        if !well_formed(token) {
            return Err(TokenRefused::Malformed);
        }
        let row = self
            .client
            .query_opt(
                "SELECT id, name, role, project, expires_at, revoked_at IS NOT NULL,
                        expires_at IS NOT NULL AND expires_at <= now()
                 FROM toolgate_tokens WHERE hash = $1",
                &[&hash(token)],
            )
            .await
            .map_err(|err| TokenRefused::Unverifiable(StoreError::from_query(err)))?
            .ok_or(TokenRefused::Unknown)?;
        let read = |row: &Row| -> Result<(Identity, bool, bool), StoreError> {
            Ok((
                Identity {
                    token_id: get(row, 0)?,
                    name: get(row, 1)?,
                    role: role(row, 2)?,
                    project: get(row, 3)?,
                    expires_at: get(row, 4)?,
                },
                get(row, 5)?,
                get(row, 6)?,
            ))
        };
        let (identity, revoked, expired) = read(&row).map_err(TokenRefused::Unverifiable)?;
        if revoked {
            Err(TokenRefused::Revoked {
                name: identity.name,
            })
        } else if expired {
            Err(TokenRefused::Expired {
                name: identity.name,
            })
        } else {
            Ok(identity)
        }
    }
}

fn token_info(row: &Row) -> Result<TokenInfo, StoreError> {
    Ok(TokenInfo {
        id: get(row, 0)?,
        name: get(row, 1)?,
        role: role(row, 2)?,
        project: get(row, 3)?,
        created_at: get(row, 4)?,
        expires_at: get(row, 5)?,
        revoked_at: get(row, 6)?,
        expired: get(row, 7)?,
    })
}

fn role(row: &Row, index: usize) -> Result<Role, StoreError> {
    let text: String = get(row, index)?;
    text.parse().map_err(|_| StoreError::Unreadable {
        what: format!("a token's role `{}`", crate::display::shown(&text)),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    #[test]
    fn a_generated_token_is_well_formed_and_new() {
        let one = Secret::generate().unwrap();
        let two = Secret::generate().unwrap();
        assert_ne!(one, two);
        for token in [&one, &two] {
            assert!(well_formed(token.expose()), "{}", token.expose());
            assert_eq!(token.expose().len(), PREFIX.len() + 43);
        }
        assert_eq!(format!("{one:?}"), "Secret(…)");
    }

    #[test]
    fn token_shapes() {
        let good = format!("{PREFIX}{}", "A".repeat(43));
        let cases: &[(&str, bool)] = &[
            (&good, true),
            ("", false),
            ("tg_", false),
            (&good[PREFIX.len()..], false),
            (&format!("tg_{}", "A".repeat(42)), false),
            (&format!("tg_{}", "A".repeat(44)), false),
            (&format!("tg_{}=", "A".repeat(43)), false),
            (&format!("tg_{}+", "A".repeat(42)), false),
            (&format!("tg_{}/", "A".repeat(42)), false),
            (&format!("tg_{} ", "A".repeat(43)), false),
            // The last character carries 2 spare bits, which must be zero.
            (&format!("tg_{}B", "A".repeat(42)), false),
            (&format!("tg_{}E", "A".repeat(42)), true),
            (&format!("TG_{}", "A".repeat(43)), false),
        ];
        for (token, expected) in cases {
            assert_eq!(well_formed(token), *expected, "{token:?}");
        }
    }

    #[test]
    fn the_hash_is_sha256_of_the_text() {
        assert_eq!(
            hash("abc")
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect::<String>(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn roles_read_as_written() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        let err = "root".parse::<Role>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown role `root`: a role is one of agent, approver, observer, admin"
        );
        assert!("Agent".parse::<Role>().is_err());
    }

    #[test]
    fn new_tokens_are_checked() {
        let uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let long = "n".repeat(MAX_NAME_CHARS + 1);
        // (name, project, lifetime, what is wrong)
        type Case<'a> = (&'a str, Option<&'a str>, Option<u64>, Option<BadToken>);
        let cases: &[Case] = &[
            ("ci", None, None, None),
            ("ci runner 1", Some("/work/p"), Some(1), None),
            ("x", None, Some(MAX_LIFETIME_SECS), None),
            ("", None, None, Some(BadToken::EmptyName)),
            (&long, None, None, Some(BadToken::LongName)),
            (" ci", None, None, Some(BadToken::OddName(" ci".into()))),
            ("c\ni", None, None, Some(BadToken::OddName("c\\ni".into()))),
            (uuid, None, None, Some(BadToken::NameIsId(uuid.into()))),
            ("ci", Some(""), None, Some(BadToken::EmptyProject)),
            ("ci", None, Some(0), Some(BadToken::Lifetime(0))),
            (
                "ci",
                None,
                Some(MAX_LIFETIME_SECS + 1),
                Some(BadToken::Lifetime(MAX_LIFETIME_SECS + 1)),
            ),
        ];
        for (name, project, secs, expected) in cases {
            let got = NewToken::new(name, Role::Agent, *project, *secs).err();
            assert_eq!(&got, expected, "{name:?} {project:?} {secs:?}");
        }
    }

    proptest::proptest! {
        /// Every 32 bytes make a well-formed token; changing one character
        /// of it makes a token that is malformed or hashes otherwise, and
        /// a prefix or extension of it is malformed.
        #[test]
        fn tokens_and_their_neighbours(
            bytes in proptest::array::uniform32(proptest::num::u8::ANY),
            at in 0usize..46,
            with in proptest::char::range('!', '~'),
            cut in 0usize..46,
        ) {
            let token = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
            proptest::prop_assert!(well_formed(&token));
            let mut changed: Vec<char> = token.chars().collect();
            changed[at] = with;
            let changed: String = changed.into_iter().collect();
            if changed != token {
                proptest::prop_assert!(!well_formed(&changed) || hash(&changed) != hash(&token));
            }
            proptest::prop_assert!(!well_formed(&token[..cut]));
            let longer = format!("{token}{with}");
            proptest::prop_assert!(!well_formed(&longer));
        }
    }
}
