//! Who is logged in, and the checks every request that changes something
//! passes: the session cookie, the per-session CSRF token, and the
//! `Origin` (or `Referer`) of the request.
//!
//! A login is a row in a map held in memory: a random id (32 bytes from the
//! operating system, base64url) in an `HttpOnly`, `SameSite=Strict` cookie
//! (`Secure`, and named `__Host-toolgate`, over HTTPS), the token's name
//! and role, the token itself (checked again against the store before each
//! answer, so a revoked token stops answering at once), a CSRF token of its
//! own, and an end no later than the token's. Nothing of it is written
//! anywhere: a restart logs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;

use crate::fleet::tokens::{Identity, Role};

/// The longest a login lasts (the token's own end comes first).
pub const MAX_LOGIN: Duration = Duration::from_secs(12 * 3600);

/// The most logins held at once; past it the oldest is dropped.
pub const MAX_LOGINS: usize = 10_000;

/// One logged-in browser.
#[derive(Debug, Clone)]
pub struct Login {
    /// The token's name (written as `answered_by`).
    pub name: String,
    /// Its role: approver and admin answer, observer only watches.
    pub role: Role,
    /// The token, checked again before each answer.
    pub token: String,
    /// The CSRF token every form and `fetch` of this login carries.
    pub csrf: String,
    /// When the login ends.
    pub until: Instant,
}

impl Login {
    /// Whether this login may answer questions.
    pub fn answers(&self) -> bool {
        matches!(self.role, Role::Approver | Role::Admin)
    }
}

/// The logins, by cookie id.
#[derive(Debug, Default)]
pub struct Logins {
    map: Mutex<HashMap<String, Login>>,
}

impl Logins {
    /// Log `identity` in with `token`: the new cookie id and its login.
    pub fn add(
        &self,
        identity: &Identity,
        token: &str,
    ) -> Result<(String, Login), getrandom::Error> {
        let id = random_text()?;
        let csrf = random_text()?;
        let now = Instant::now();
        let mut life = MAX_LOGIN;
        if let Some(end) = identity.expires_at {
            let left = end.duration_since(SystemTime::now()).unwrap_or_default();
            life = life.min(left);
        }
        let login = Login {
            name: identity.name.clone(),
            role: identity.role,
            token: token.to_string(),
            csrf,
            until: now + life,
        };
        let mut map = self.map.lock().unwrap_or_else(|poison| poison.into_inner());
        map.retain(|_, login| login.until > now);
        if map.len() >= MAX_LOGINS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, login)| login.until)
                .map(|(id, _)| id.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(id.clone(), login.clone());
        Ok((id, login))
    }

    /// The live login of cookie id `id`.
    pub fn get(&self, id: &str) -> Option<Login> {
        let mut map = self.map.lock().unwrap_or_else(|poison| poison.into_inner());
        match map.get(id) {
            Some(login) if login.until > Instant::now() => Some(login.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Log out cookie id `id`.
    pub fn remove(&self, id: &str) {
        let mut map = self.map.lock().unwrap_or_else(|poison| poison.into_inner());
        map.remove(id);
    }
}

/// 32 random bytes as base64url text.
fn random_text() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The cookie's name: `__Host-toolgate` over HTTPS (the browser then
/// insists on `Secure`, `Path=/` and no `Domain`), `toolgate` over HTTP.
pub fn cookie_name(secure: bool) -> &'static str {
    if secure {
        "__Host-toolgate"
    } else {
        "toolgate"
    }
}

/// The `Set-Cookie` value that logs in `id` for `life`.
pub fn set_cookie(secure: bool, id: &str, life: Duration) -> String {
    format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        cookie_name(secure),
        life.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        cookie_name(secure),
        if secure { "; Secure" } else { "" }
    )
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        (key == name).then_some(value)
    })
}

/// Whether a request that changes something comes from the page itself:
/// its `Origin` is this server's (`scheme://host` of the `Host` header),
/// or, with no `Origin`, its `Referer` begins with it. Neither: refused.
pub fn same_origin(
    secure: bool,
    host: Option<&str>,
    origin: Option<&str>,
    referer: Option<&str>,
) -> bool {
    let Some(host) = host.filter(|host| !host.is_empty()) else {
        return false;
    };
    let ours = format!("{}://{host}", if secure { "https" } else { "http" });
    match (origin, referer) {
        (Some(origin), _) => origin == ours,
        (None, Some(referer)) => {
            referer == ours
                || referer
                    .strip_prefix(ours.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        }
        (None, None) => false,
    }
}

/// Whether `given` is `expected`, compared in time that does not depend
/// on where they differ.
pub fn same_secret(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

/// The fields of an `application/x-www-form-urlencoded` body, decoded
/// (`+` is a space, `%XX` a byte; text that is not UTF-8 after decoding is
/// replaced). A key given twice keeps its first value.
pub fn form(body: &[u8]) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    for pair in body.split(|&byte| byte == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = match pair.iter().position(|&byte| byte == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        fields.entry(decode(key)).or_insert_with(|| decode(value));
    }
    fields
}

fn decode(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut index = 0;
    while index < text.len() {
        match text[index] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(index + 1..index + 3)
                    .and_then(|pair| std::str::from_utf8(pair).ok())
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        index += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn forms_decode() {
        let fields = form(b"a=1&b=x+y%3C%2Fscript%3E&a=2&c&d=%zz&e=%E2%9C%93");
        assert_eq!(fields["a"], "1");
        assert_eq!(fields["b"], "x y</script>");
        assert_eq!(fields["c"], "");
        assert_eq!(fields["d"], "%zz");
        assert_eq!(fields["e"], "✓");
    }

    #[test]
    fn origins() {
        let table = [
            (false, Some("h:1"), Some("http://h:1"), None, true),
            (
                false,
                Some("h:1"),
                Some("http://evil"),
                Some("http://h:1/"),
                false,
            ),
            (false, Some("h:1"), Some("null"), None, false),
            (true, Some("h:1"), Some("http://h:1"), None, false),
            (true, Some("h:1"), Some("https://h:1"), None, true),
            (false, Some("h:1"), None, Some("http://h:1/x"), true),
            (false, Some("h:1"), None, Some("http://h:10/x"), false),
            (false, Some("h:1"), None, Some("http://h:1.evil/"), false),
            (false, Some("h:1"), None, None, false),
            (false, None, Some("http://h:1"), None, false),
        ];
        for (secure, host, origin, referer, expected) in table {
            assert_eq!(
                same_origin(secure, host, origin, referer),
                expected,
                "{host:?} {origin:?} {referer:?}"
            );
        }
    }

    #[test]
    fn cookies() {
        assert_eq!(cookie("a=1; toolgate=xyz; b=2", "toolgate"), Some("xyz"));
        assert_eq!(cookie("toolgatex=1", "toolgate"), None);
        assert!(set_cookie(true, "i", MAX_LOGIN).contains("; Secure"));
        assert!(!set_cookie(false, "i", MAX_LOGIN).contains("Secure"));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
