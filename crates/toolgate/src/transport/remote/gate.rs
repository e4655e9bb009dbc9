//! What a remote connection's token lets it say: the role its `hello` may
//! claim, the frames it may send, and the project it may reach. Pure: the
//! listener asks these before the owner sees a frame.
//!
//! | token | `hello` role | refused frames |
//! |---|---|---|
//! | `agent` | `agent` | `permission_response`, `list_pending`, `list_sessions`, `list_grants`, `revoke_grant`, `shutdown`, the token frames |
//! | `observer` | `observer` | `permission_response`, `revoke_grant`, `shutdown`, the token frames (and what the broker refuses every observer) |
//! | `approver` | any | `revoke_grant`, `shutdown`, the token frames |
//! | `admin` | any | none (its token frames, `create_token`, `list_tokens`, `revoke_token`, are done by [`super::admin`]) |
//!
//! A later `hello` is held to the same roles; a token in it is refused (a
//! connection is one token's, given once, in its first `hello`). A token
//! limited to a project (`tokens create --project`) may not follow every
//! project's questions (`"projects": "all"`): refused at any `hello`.

use std::path::Path;

use toolgate_protocol::{ClientFrame, Projects, Role};

use crate::fleet::tokens::Role as TokenRole;

/// Whose a connection is: its token's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The token's name (never the token).
    pub name: String,
    /// The token's role.
    pub role: TokenRole,
    /// The project it is limited to, if it is.
    pub project: Option<String>,
}

impl Holder {
    /// How answers given on its connection are signed: `token NAME (ROLE)`.
    pub fn signature(&self) -> String {
        format!("token {} ({})", self.name, self.role)
    }

    /// "the token `NAME` is an agent's" (every role begins with a vowel).
    fn whose(&self) -> String {
        format!("the token `{}` is an {}'s", self.name, self.role)
    }

    /// Whether `hello` may say `role`.
    fn may_be(&self, role: Role) -> bool {
        match self.role {
            TokenRole::Agent => role == Role::Agent,
            TokenRole::Observer => role == Role::Observer,
            TokenRole::Approver | TokenRole::Admin => true,
        }
    }

    /// Whether this connection may send `frame`; `Err` says why not, in
    /// words for the `error` frame.
    pub fn may_send(&self, frame: &ClientFrame) -> Result<(), String> {
        let admin = self.role == TokenRole::Admin;
        match frame {
            ClientFrame::Hello(hello) => {
                if hello.token.is_some() {
                    return Err("a connection gives its token once, in its first hello".into());
                }
                self.may_say(hello.role)?;
                self.may_follow(hello.projects)
            }
            ClientFrame::PermissionResponse(_) => match self.role {
                TokenRole::Agent => Err(format!(
                    "{}: an agent never answers a question",
                    self.whose()
                )),
                TokenRole::Observer => Err(format!("{}: an observer only watches", self.whose())),
                TokenRole::Approver | TokenRole::Admin => Ok(()),
            },
            ClientFrame::ListPending(_)
            | ClientFrame::ListSessions(_)
            | ClientFrame::ListGrants(_)
                if self.role == TokenRole::Agent =>
            {
                Err(format!(
                    "{}: an agent cannot list the sessions, questions or grants of others",
                    self.whose()
                ))
            }
            ClientFrame::RevokeGrant(_) if !admin => Err(format!(
                "{}: only an admin token may revoke grants",
                self.whose()
            )),
            ClientFrame::Shutdown(_) if !admin => Err(format!(
                "{}: only an admin token may shut the broker down",
                self.whose()
            )),
            ClientFrame::CreateToken(_)
            | ClientFrame::ListTokens(_)
            | ClientFrame::RevokeToken(_)
                if !admin =>
            {
                Err(format!(
                    "{}: only an admin token may make, list or revoke tokens",
                    self.whose()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether `hello` may ask for `projects`: every project's questions
    /// only with a token that is not limited to one project.
    pub fn may_follow(&self, projects: Option<Projects>) -> Result<(), String> {
        match (&self.project, projects) {
            (Some(project), Some(Projects::All)) => Err(format!(
                "the token `{}` is limited to the project {}: it cannot follow every project's questions (`\"projects\": \"all\"` needs a token made without --project)",
                self.name,
                crate::display::shown(project)
            )),
            _ => Ok(()),
        }
    }

    /// Whether `hello` may claim `role`.
    pub fn may_say(&self, role: Role) -> Result<(), String> {
        if self.may_be(role) {
            Ok(())
        } else {
            Err(format!(
                "{}: it cannot connect as {}",
                self.whose(),
                role.as_str()
            ))
        }
    }
}

/// Whether a token limited to `project` may reach a broker whose project
/// root is `root`: the two are compared as paths, component by component
/// (`/work/app/` and `/work/app/./` are `/work/app`), without resolving
/// links or `..`; a project that is not absolute reaches nothing.
pub fn project_matches(project: &str, root: &Path) -> bool {
    let project = Path::new(project);
    project.is_absolute() && project.components().eq(root.components())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic
    use super::*;

    fn frame(line: &str) -> ClientFrame {
        toolgate_protocol::decode_line(line.as_bytes(), 1).unwrap()
    }

    /// Each token role against each kind of frame: `ok` or the refusal.
    #[test]
    fn what_each_token_may_send() {
        let frames = [
            r#"{"type":"hello","role":"agent"}"#,
            r#"{"type":"hello","role":"approver"}"#,
            r#"{"type":"hello","role":"observer"}"#,
            r#"{"type":"hello","role":"agent","token":"tg_x"}"#,
            r#"{"type":"tool_call","callID":"c","tool":"Read","input":{}}"#,
            r#"{"type":"permission_response","permissionID":"per_1","response":"once"}"#,
            r#"{"type":"list_pending"}"#,
            r#"{"type":"list_grants"}"#,
            r#"{"type":"revoke_grant","grantID":"g"}"#,
            r#"{"type":"shutdown"}"#,
            r#"{"type":"set_mode","sessionID":"s","mode":"plan"}"#,
            r#"{"type":"cancel","sessionID":"s","callID":"c"}"#,
            r#"{"type":"create_token","name":"n","role":"agent"}"#,
            r#"{"type":"list_tokens"}"#,
            r#"{"type":"revoke_token","name":"n"}"#,
        ];
        let table = |role: TokenRole| -> Vec<String> {
            let holder = Holder {
                name: "t".into(),
                role,
                project: None,
            };
            frames
                .iter()
                .map(|line| match holder.may_send(&frame(line)) {
                    Ok(()) => "ok".to_string(),
                    Err(why) => why,
                })
                .collect()
        };
        let agent = table(TokenRole::Agent);
        assert_eq!(
            agent,
            [
                "ok",
                "the token `t` is an agent's: it cannot connect as approver",
                "the token `t` is an agent's: it cannot connect as observer",
                "a connection gives its token once, in its first hello",
                "ok",
                "the token `t` is an agent's: an agent never answers a question",
                "the token `t` is an agent's: an agent cannot list the sessions, questions or grants of others",
                "the token `t` is an agent's: an agent cannot list the sessions, questions or grants of others",
                "the token `t` is an agent's: only an admin token may revoke grants",
                "the token `t` is an agent's: only an admin token may shut the broker down",
                "ok",
                "ok",
                "the token `t` is an agent's: only an admin token may make, list or revoke tokens",
                "the token `t` is an agent's: only an admin token may make, list or revoke tokens",
                "the token `t` is an agent's: only an admin token may make, list or revoke tokens",
            ]
        );
        let observer = table(TokenRole::Observer);
        assert_eq!(
            observer,
            [
                "the token `t` is an observer's: it cannot connect as agent",
                "the token `t` is an observer's: it cannot connect as approver",
                "ok",
                "a connection gives its token once, in its first hello",
                "ok",
                "the token `t` is an observer's: an observer only watches",
                "ok",
                "ok",
                "the token `t` is an observer's: only an admin token may revoke grants",
                "the token `t` is an observer's: only an admin token may shut the broker down",
                "ok",
                "ok",
                "the token `t` is an observer's: only an admin token may make, list or revoke tokens",
                "the token `t` is an observer's: only an admin token may make, list or revoke tokens",
                "the token `t` is an observer's: only an admin token may make, list or revoke tokens",
            ]
        );
        let approver = table(TokenRole::Approver);
        assert_eq!(
            approver,
            [
                "ok",
                "ok",
                "ok",
                "a connection gives its token once, in its first hello",
                "ok",
                "ok",
                "ok",
                "ok",
                "the token `t` is an approver's: only an admin token may revoke grants",
                "the token `t` is an approver's: only an admin token may shut the broker down",
                "ok",
                "ok",
                "the token `t` is an approver's: only an admin token may make, list or revoke tokens",
                "the token `t` is an approver's: only an admin token may make, list or revoke tokens",
                "the token `t` is an approver's: only an admin token may make, list or revoke tokens",
            ]
        );
        let admin = table(TokenRole::Admin);
        assert_eq!(
            admin,
            [
                "ok",
                "ok",
                "ok",
                "a connection gives its token once, in its first hello",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
            ]
        );
    }

    #[test]
    fn a_token_limited_to_a_project_cannot_follow_every_project() {
        let limited = Holder {
            name: "p1".into(),
            role: TokenRole::Approver,
            project: Some("/p1".into()),
        };
        let all = frame(r#"{"type":"hello","role":"approver","projects":"all"}"#);
        let own = frame(r#"{"type":"hello","role":"approver","projects":"own"}"#);
        assert_eq!(
            limited.may_send(&all).unwrap_err(),
            "the token `p1` is limited to the project /p1: it cannot follow every project's questions (`\"projects\": \"all\"` needs a token made without --project)"
        );
        assert!(limited.may_send(&own).is_ok());
        let free = Holder {
            project: None,
            ..limited
        };
        assert!(free.may_send(&all).is_ok());
    }

    #[test]
    fn projects_are_compared_as_paths() {
        let root = Path::new("/work/app");
        for (project, matches) in [
            ("/work/app", true),
            ("/work/app/", true),
            ("/work/app/.", true),
            ("//work//app", true),
            ("/work/app2", false),
            ("/work", false),
            ("/work/app/sub", false),
            ("/work/other/../app", false),
            ("work/app", false),
            ("app", false),
        ] {
            assert_eq!(project_matches(project, root), matches, "{project}");
        }
    }
}
