//! `toolgate store migrate` and `toolgate tokens create|list|revoke|verify`:
//! the shared store of a fleet of brokers (docs/fleet.md). Their stdout is
//! for the person who runs them. `create`, `list` and `revoke` also go
//! through a broker with an admin token (`--remote`), printing the same.
//!
//! Exit codes: 0 done; 1 the store said no (a refused token, an unknown
//! name, a name taken, a schema at another version, a login refused); 2 the
//! command line cannot be used (no store named, a bad URL, name, project or
//! lifetime); 3 the store cannot be reached or the connection was lost.

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::Subcommand;
use toolgate::clock::{epoch_ms, utc_text};
use toolgate::display::shown;
use toolgate::fleet::tokens::{NewToken, Revoked, Role, Secret, TokenInfo, TokenRefused};
use toolgate::fleet::{runtime, Store, StoreError};
use toolgate::say;

use super::flags::{AdminArgs, StoreArgs};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Bring the shared store's schema to this toolgate's version, one
    /// migration per transaction under a lock (two at once are safe); a
    /// store newer than this toolgate is refused and left alone.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token and print it on the last line of stdout (the store
    /// keeps only its SHA-256: it cannot be shown again). With --remote,
    /// through a broker with an admin token: a token limited to a project
    /// makes tokens for that project only, one that expires makes none that
    /// outlive it.
    Create {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        admin: AdminArgs,
        /// What the token may do: agent, approver, observer or admin.
        #[arg(long, value_name = "ROLE", value_parser = parse_role)]
        role: Role,
        /// Its name, unique among tokens not revoked.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// Limit it to one project root.
        #[arg(long, value_name = "PROJECT")]
        project: Option<String>,
        /// Seconds until it expires (default: never).
        #[arg(long, value_name = "SECS")]
        expires: Option<u64>,
    },
    /// List the tokens (never their text): name, role, project, created,
    /// expires, revoked, id. With --remote, through a broker with an admin
    /// token (one limited to a project lists that project's tokens).
    List {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        admin: AdminArgs,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by name (the one not yet revoked) or id. Revoking a
    /// revoked token changes nothing and is not an error. With --remote,
    /// through a broker with an admin token; the token's connections end
    /// on every broker either way.
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        admin: AdminArgs,
        /// The token's name or id.
        #[arg(value_name = "NAME|ID")]
        token: String,
    },
    /// Read a token on stdin and say whose it is (exit code 0) or why it is
    /// refused (exit code 1: malformed, unknown, expired, revoked).
    Verify {
        #[command(flatten)]
        store: StoreArgs,
    },
}

fn parse_role(text: &str) -> Result<Role, String> {
    text.parse()
        .map_err(|err: toolgate::fleet::tokens::BadRole| err.to_string())
}

/// The exit code of a command that failed at the store.
fn failed(err: &StoreError) -> ExitCode {
    say!("toolgate: {err}");
    match err {
        StoreError::BadUrl { .. } | StoreError::BadTls { .. } => ExitCode::from(2),
        err if err.is_unreachable() => ExitCode::from(3),
        _ => ExitCode::from(1),
    }
}

/// The URL of the store, or exit code 2 naming what is missing.
fn url_of(store: StoreArgs, command: &str) -> Result<String, ExitCode> {
    store.url().ok_or_else(|| {
        say!("toolgate: {command} needs --store URL (or TOOLGATE_STORE)");
        ExitCode::from(2)
    })
}

/// Run `work` on a current-thread runtime; what it returns is the exit code.
fn on_runtime<F: std::future::Future<Output = ExitCode>>(work: F) -> ExitCode {
    match runtime() {
        Ok(runtime) => runtime.block_on(work),
        Err(err) => {
            say!("toolgate: cannot start the runtime: {err}");
            ExitCode::from(1)
        }
    }
}

/// Write `text` to stdout; a reader that went away is not an error.
fn print(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            say!("toolgate: cannot write the output: {err}");
            ExitCode::from(1)
        }
    }
}

/// `toolgate store …`.
pub fn store(command: StoreCommand) -> ExitCode {
    let StoreCommand::Migrate { store } = command;
    let url = match url_of(store, "store migrate") {
        Ok(url) => url,
        Err(code) => return code,
    };
    on_runtime(async move {
        let mut store = match Store::connect(&url).await {
            Ok(store) => store,
            Err(err) => return failed(&err),
        };
        match store.migrate().await {
            Ok(done) if done.from == done.to => print(&format!(
                "{} is at schema version {} already\n",
                store.name(),
                done.to
            )),
            Ok(done) => print(&format!(
                "{} migrated from schema version {} to {}\n",
                store.name(),
                done.from,
                done.to
            )),
            Err(err) => failed(&err),
        }
    })
}

/// `toolgate tokens …`.
pub fn tokens(command: TokensCommand) -> ExitCode {
    let (store, name, admin) = match &command {
        TokensCommand::Create { store, admin, .. } => (store, "tokens create", Some(admin)),
        TokensCommand::List { store, admin, .. } => (store, "tokens list", Some(admin)),
        TokensCommand::Revoke { store, admin, .. } => (store, "tokens revoke", Some(admin)),
        TokensCommand::Verify { store } => (store, "tokens verify", None),
    };
    let remote = admin.and_then(AdminArgs::spec);
    // What can be checked without the store is checked first.
    let new = match &command {
        TokensCommand::Create {
            role,
            name,
            project,
            expires,
            ..
        } => match NewToken::new(name, *role, project.as_deref(), *expires) {
            Ok(new) => Some(new),
            Err(err) => {
                say!("toolgate: {err}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    if let Some(spec) = remote {
        return remote::tokens(spec, command, new.is_some());
    }
    let url = match url_of(store.clone(), name) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let token = match &command {
        TokensCommand::Verify { .. } => match read_token() {
            Ok(token) => Some(token),
            Err(code) => return code,
        },
        _ => None,
    };
    on_runtime(async move {
        let mut store = match Store::connect(&url).await {
            Ok(store) => store,
            Err(err) => return failed(&err),
        };
        if let Err(err) = store.check_schema().await {
            return failed(&err);
        }
        match command {
            TokensCommand::Create { .. } => match new {
                Some(new) => create(&mut store, &new).await,
                None => ExitCode::from(2),
            },
            TokensCommand::List { json, .. } => list(&mut store, json).await,
            TokensCommand::Revoke { token, .. } => revoke(&mut store, &token).await,
            TokensCommand::Verify { .. } => {
                verify(&mut store, token.as_deref().unwrap_or("")).await
            }
        }
    })
}

async fn create(store: &mut Store, new: &NewToken) -> ExitCode {
    let secret = match Secret::generate() {
        Ok(secret) => secret,
        Err(err) => {
            say!("toolgate: no random bytes for a token: {err}");
            return ExitCode::from(1);
        }
    };
    match store.create_token(new, &secret).await {
        Ok(info) => print(&created_text(&info, secret.expose())),
        Err(err) => failed(&err),
    }
}

/// What `create` prints: a line about the token, then the token itself.
fn created_text(info: &TokenInfo, token: &str) -> String {
    format!(
        "created token `{}` ({}; {}; expires {}; id {}). It is shown once, on the next line:\n{}\n",
        shown(&info.name),
        info.role,
        project_text(info),
        info.expires_at
            .map_or_else(|| "never".to_string(), |at| utc_text(epoch_ms(at))),
        info.id,
        token
    )
}

fn project_text(info: &TokenInfo) -> String {
    match &info.project {
        Some(project) => format!("project {}", shown(project)),
        None => "every project".to_string(),
    }
}

async fn list(store: &mut Store, json: bool) -> ExitCode {
    let tokens = match store.tokens().await {
        Ok(tokens) => tokens,
        Err(err) => return failed(&err),
    };
    listed(&tokens, json, store.name())
}

/// What `list` prints (nothing, and a line on stderr, when there are none).
fn listed(tokens: &[TokenInfo], json: bool, store: &str) -> ExitCode {
    if tokens.is_empty() {
        say!("toolgate: no tokens in {store}");
        return ExitCode::SUCCESS;
    }
    if json {
        let mut text = String::new();
        for token in tokens {
            let row = serde_json::json!({
                "id": token.id.to_string(),
                "name": token.name,
                "role": token.role.as_str(),
                "project": token.project,
                "createdAt": epoch_ms(token.created_at),
                "expiresAt": token.expires_at.map(epoch_ms),
                "expired": token.expired,
                "revokedAt": token.revoked_at.map(epoch_ms),
            });
            text.push_str(&row.to_string());
            text.push('\n');
        }
        return print(&text);
    }
    print(&table(tokens))
}

/// The tokens as a table with aligned columns.
fn table(tokens: &[TokenInfo]) -> String {
    let mut rows = vec![[
        "NAME", "ROLE", "PROJECT", "CREATED", "EXPIRES", "REVOKED", "ID",
    ]
    .map(str::to_string)];
    for token in tokens {
        rows.push([
            shown(&token.name).into_owned(),
            token.role.to_string(),
            token
                .project
                .as_deref()
                .map_or_else(|| "*".to_string(), |project| shown(project).into_owned()),
            utc_text(epoch_ms(token.created_at)),
            match token.expires_at {
                None => "never".to_string(),
                Some(at) if token.expired => format!("{} (expired)", utc_text(epoch_ms(at))),
                Some(at) => utc_text(epoch_ms(at)),
            },
            token
                .revoked_at
                .map_or_else(|| "-".to_string(), |at| utc_text(epoch_ms(at))),
            token.id.to_string(),
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

async fn revoke(store: &mut Store, token: &str) -> ExitCode {
    match store.revoke_token(token).await {
        Ok(revoked) => revoked_outcome(revoked, token, store.name()),
        Err(err) => failed(&err),
    }
}

/// What `revoke` prints, and its exit code.
fn revoked_outcome(revoked: Revoked, token: &str, store: &str) -> ExitCode {
    match revoked {
        Revoked::Now(info) => print(&format!(
            "revoked token `{}` (id {})\n",
            shown(&info.name),
            info.id
        )),
        Revoked::Already(info) => print(&format!(
            "token `{}` (id {}) was revoked already, at {}\n",
            shown(&info.name),
            info.id,
            info.revoked_at
                .map_or_else(|| "?".to_string(), |at| utc_text(epoch_ms(at)))
        )),
        Revoked::Unknown => {
            say!(
                "toolgate: no token has the name or id `{}` in {store}",
                shown(token),
            );
            ExitCode::from(1)
        }
    }
}

/// The token on stdin: its first line, spaces around it removed. At most
/// 4 KiB are read.
fn read_token() -> Result<String, ExitCode> {
    let mut text = String::new();
    match std::io::stdin().lock().take(4096).read_to_string(&mut text) {
        Ok(_) => Ok(text.lines().next().unwrap_or("").trim().to_string()),
        Err(err) => {
            say!("toolgate: cannot read the token on stdin: {err}");
            Err(ExitCode::from(2))
        }
    }
}

async fn verify(store: &mut Store, token: &str) -> ExitCode {
    match store.verify(token).await {
        Ok(identity) => print(&format!(
            "valid: token `{}` ({}; {}; expires {}; id {})\n",
            shown(&identity.name),
            identity.role,
            match &identity.project {
                Some(project) => format!("project {}", shown(project)),
                None => "every project".to_string(),
            },
            identity
                .expires_at
                .map_or_else(|| "never".to_string(), |at| utc_text(epoch_ms(at))),
            identity.token_id
        )),
        Err(TokenRefused::Unverifiable(err)) => failed(&err),
        Err(refused) => {
            say!("toolgate: token refused: {refused}");
            ExitCode::from(1)
        }
    }
}

/// `tokens create|list|revoke --remote`: the same, through a broker with an
/// admin token (the frames `create_token`, `list_tokens`, `revoke_token`),
/// printed as the `--store` form prints it, with the same exit codes.
mod remote {
    use std::process::ExitCode;
    use std::time::{Duration, Instant, SystemTime};

    use toolgate::fleet::tokens::{Revoked, Role, TokenInfo};
    use toolgate::say;
    use toolgate::transport::client::{chosen, Client, ClientError, RemoteSpec};
    use toolgate_protocol as wire;
    use toolgate_protocol::{ErrorCode, ServerFrame};

    use super::TokensCommand;

    /// The longest the whole exchange may take: the broker gives the store
    /// 10 s.
    const WAIT: Duration = Duration::from_secs(30);

    /// Run `command` (not `verify`) at the broker `spec` names.
    pub fn tokens(spec: RemoteSpec, command: TokensCommand, checked: bool) -> ExitCode {
        let frame = match &command {
            TokensCommand::Create {
                role,
                name,
                project,
                expires,
                ..
            } if checked => {
                let mut frame = serde_json::json!({
                    "type": "create_token",
                    "name": name,
                    "role": role.as_str(),
                });
                if let Some(project) = project {
                    frame["project"] = serde_json::json!(project);
                }
                if let Some(expires) = expires {
                    frame["expiresIn"] = serde_json::json!(expires);
                }
                frame
            }
            TokensCommand::List { .. } => serde_json::json!({"type": "list_tokens"}),
            TokensCommand::Revoke { token, .. } => {
                serde_json::json!({"type": "revoke_token", "name": token})
            }
            _ => return ExitCode::from(2),
        };
        let endpoint = match chosen(None, spec) {
            Ok(Some(endpoint)) => endpoint,
            Ok(None) => {
                say!("toolgate: --remote names no broker");
                return ExitCode::from(2);
            }
            Err(err) => {
                say!("toolgate: {err}");
                return ExitCode::from(2);
            }
        };
        let label = endpoint.label();
        let deadline = Instant::now() + WAIT;
        let reply = Client::connect(&endpoint, wire::Role::Agent, "toolgate tokens", deadline)
            .and_then(|mut client| {
                client.send(&frame)?;
                loop {
                    match client.recv(Some(deadline))? {
                        frame @ (ServerFrame::TokenCreated(_)
                        | ServerFrame::Tokens(_)
                        | ServerFrame::TokenRevoked(_)
                        | ServerFrame::Error(_)) => return Ok(frame),
                        _ => continue,
                    }
                }
            });
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) => {
                say!("toolgate: {err}");
                return ExitCode::from(match err {
                    ClientError::BadRemote(_) | ClientError::Ambiguous => 2,
                    ClientError::Refused(_) | ClientError::Ended(_) | ClientError::Protocol(_) => 1,
                    _ => 3,
                });
            }
        };
        let store = format!("the store of the broker at {label}");
        match (command, reply) {
            (_, ServerFrame::Error(error)) => {
                say!("toolgate: {}", error.message);
                ExitCode::from(match error.code {
                    ErrorCode::StoreUnavailable => 3,
                    ErrorCode::InvalidFrame => 2,
                    _ => 1,
                })
            }
            (TokensCommand::Create { .. }, ServerFrame::TokenCreated(created)) => {
                match info(&created.info) {
                    Some(info) => super::print(&super::created_text(&info, &created.token)),
                    None => unreadable(&created.info),
                }
            }
            (TokensCommand::List { json, .. }, ServerFrame::Tokens(list)) => {
                let mut tokens = Vec::new();
                for token in &list.tokens {
                    match info(token) {
                        Some(token) => tokens.push(token),
                        None => return unreadable(token),
                    }
                }
                super::listed(&tokens, json, &store)
            }
            (TokensCommand::Revoke { token, .. }, ServerFrame::TokenRevoked(revoked)) => {
                match info(&revoked.info) {
                    Some(info) if revoked.already => {
                        super::revoked_outcome(Revoked::Already(info), &token, &store)
                    }
                    Some(info) => super::revoked_outcome(Revoked::Now(info), &token, &store),
                    None => unreadable(&revoked.info),
                }
            }
            (_, other) => {
                say!("toolgate: the broker answered with another frame: {other:?}");
                ExitCode::from(1)
            }
        }
    }

    fn unreadable(info: &wire::TokenInfo) -> ExitCode {
        say!(
            "toolgate: the broker sent a token that cannot be read (id {:?})",
            info.id
        );
        ExitCode::from(1)
    }

    /// A token as the broker sent it, as the store gives it.
    fn info(info: &wire::TokenInfo) -> Option<TokenInfo> {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        Some(TokenInfo {
            id: uuid::Uuid::parse_str(&info.id).ok()?,
            name: info.name.clone(),
            role: match info.role {
                wire::TokenRole::Agent => Role::Agent,
                wire::TokenRole::Approver => Role::Approver,
                wire::TokenRole::Observer => Role::Observer,
                wire::TokenRole::Admin => Role::Admin,
            },
            project: info.project.clone(),
            created_at: at(info.created_at),
            expires_at: info.expires_at.map(at),
            revoked_at: info.revoked_at.map(at),
            expired: info.expired,
        })
    }
}
