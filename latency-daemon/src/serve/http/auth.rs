//! HTTP basic auth against bcrypt hashes: an `Authorization` header and the users in; allowed or
//! not out. bcrypt is slow on purpose (tens of ms at cost 10), so it runs on a blocking worker and
//! a success is remembered (by a SHA-256 of user, password and hash), as exporter-toolkit does:
//! a scraper pays it once, not every 15 s.
use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};

use base64::Engine as _;

/// Remembered successes; cleared whole when full (a new user list changes the keys anyway).
const CACHE: usize = 1024;

/// Checked against when the user is unknown, so that an unknown user costs what a wrong
/// password does (no timing hint about which users exist).
fn dummy() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| bcrypt::hash("x", bcrypt::DEFAULT_COST).unwrap_or_default())
}

#[derive(Debug, Default)]
pub struct Verified(Mutex<HashSet<[u8; 32]>>);

impl Verified {
    /// Whether `authorization` names a user of `users` with the right password.
    pub async fn check(&self, users: &BTreeMap<String, String>, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(basic) else { return false };
        let hash = users.get(&user).cloned();
        let key = key(&user, &password, hash.as_deref().unwrap_or("-"));
        if self.0.lock().unwrap_or_else(PoisonError::into_inner).contains(&key) {
            return true;
        }
        let known = hash.is_some();
        let ok = tokio::task::spawn_blocking(move || {
            let hash = match &hash {
                Some(h) => h.as_str(),
                None => dummy(),
            };
            bcrypt::verify(password, hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false)
            && known;
        if ok {
            let mut cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE {
                cache.clear();
            }
            cache.insert(key);
        }
        ok
    }
}

/// `Basic base64(user:password)` → (user, password).
fn basic(header: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn key(user: &str, password: &str, hash: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, password, hash] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_basic_only() {
        assert_eq!(basic(b"Basic YWxpY2U6cHc="), Some(("alice".into(), "pw".into())));
        assert_eq!(basic(b"basic YWxpY2U6OnB3"), Some(("alice".into(), ":pw".into())));
        assert_eq!(basic(b"Bearer YWxpY2U6cHc="), None);
        assert_eq!(basic(b"Basic !!"), None);
        assert_eq!(basic(b"Basic YWxpY2U="), None, "no colon");
    }

    #[tokio::test]
    async fn right_password_only_and_remembered() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let users = BTreeMap::from([("alice".to_owned(), hash)]);
        let v = Verified::default();
        let header = |u: &str, p: &str| {
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")))
        };
        assert!(v.check(&users, Some(header("alice", "pw").as_bytes())).await);
        assert_eq!(v.0.lock().unwrap().len(), 1);
        assert!(v.check(&users, Some(header("alice", "pw").as_bytes())).await);
        assert!(!v.check(&users, Some(header("alice", "wrong").as_bytes())).await);
        assert!(!v.check(&users, Some(header("bob", "pw").as_bytes())).await);
        assert!(!v.check(&users, None).await);
        assert!(dummy().parse::<bcrypt::HashParts>().is_ok());
    }
}
