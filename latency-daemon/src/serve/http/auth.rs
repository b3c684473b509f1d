//! HTTP basic auth against bcrypt hashes: an `Authorization` header, the client's address and the
//! users in; allowed, refused or not checked now out. bcrypt is slow on purpose (tens of ms at cost
//! 10), so it runs on a blocking worker, only as often as [`Throttle`] allows failures to cost, and
//! a success is remembered (by a SHA-256 of user, password and hash), as exporter-toolkit does: a
//! scraper pays it once, not every 15 s, and a remembered success skips the throttle.
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use base64::Engine as _;

use super::throttle::{Refusal, Throttle};

/// Remembered successes; cleared whole when full (a new user list changes the keys anyway).
const CACHE: usize = 1024;

/// The costs bcrypt can compute (it refuses others; config load refuses them too).
const COSTS: std::ops::RangeInclusive<u32> = 4..=31;

/// The cost of a bcrypt hash (`$2a$`, `$2b$`, `$2x$` or `$2y$`, then `NN$`), read by bcrypt's own
/// parser so that it is the cost `verify` will spend; None if it is not one bcrypt can verify.
fn cost(hash: &str) -> Option<u32> {
    let cost = hash.parse::<bcrypt::HashParts>().ok()?.get_cost();
    COSTS.contains(&cost).then_some(cost)
}

/// The cost an unknown user is checked at: the highest of the configured hashes', so that an
/// unknown user is indistinguishable from the costliest users (with one cost, from every user).
fn dummy_cost(users: &BTreeMap<String, String>) -> u32 {
    users.values().filter_map(|h| cost(h)).max().unwrap_or(bcrypt::DEFAULT_COST)
}

/// Checked against when the user is unknown, so that an unknown user costs what a wrong
/// password does (no timing hint about which users exist). Not the hash of anything: bcrypt
/// reads the cost from the string and recomputes from the salt (here all zero), so verifying
/// against it costs what a real hash of `cost` does, while making it costs nothing — hashing a
/// real one at the first unknown user of each cost would double that request's price. One per
/// cost, made once.
fn dummy(cost: u32) -> &'static str {
    static DUMMIES: [OnceLock<String>; 32] = [const { OnceLock::new() }; 32];
    let cost = cost.clamp(*COSTS.start(), *COSTS.end());
    // The clamp keeps the index within the 32 slots.
    DUMMIES[cost as usize].get_or_init(|| format!("$2b${cost:02}${}", ".".repeat(53)))
}

#[derive(Debug, Default)]
pub struct Verified {
    cache: Mutex<HashSet<[u8; 32]>>,
    throttle: Throttle,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Allowed,
    Refused,
    /// Not checked: see [`Refusal`].
    NotNow(Refusal),
}

impl Verified {
    /// Whether `authorization` names a user of `users` with the right password, asked by `peer`.
    pub(super) async fn check(
        &self,
        users: &BTreeMap<String, String>,
        authorization: Option<&[u8]>,
        peer: IpAddr,
    ) -> Verdict {
        let Some((user, password)) = authorization.and_then(basic) else { return Verdict::Refused };
        let hash = users.get(&user).cloned();
        let key = key(&user, &password, hash.as_deref().unwrap_or("-"));
        if self.cache.lock().unwrap_or_else(PoisonError::into_inner).contains(&key) {
            return Verdict::Allowed;
        }
        let mut admission = match self.throttle.admit(peer).await {
            Ok(admission) => admission,
            Err(refusal) => return Verdict::NotNow(refusal),
        };
        let known = hash.is_some();
        // Chosen for known users too, so both paths do the same work; it follows a reload, and
        // parsing the users' hashes is microseconds next to the verify.
        let dummy = dummy(dummy_cost(users));
        let started = Instant::now();
        let worker = admission.take_worker();
        let ok = tokio::task::spawn_blocking(move || {
            let _worker = worker;
            bcrypt::verify(password, hash.as_deref().unwrap_or(dummy)).unwrap_or(false)
        })
        .await
        .unwrap_or(false)
            && known;
        self.throttle.finish(admission, started.elapsed(), ok);
        if ok {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE {
                cache.clear();
            }
            cache.insert(key);
        }
        if ok { Verdict::Allowed } else { Verdict::Refused }
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
        let peer = IpAddr::from([127, 0, 0, 1]);
        let check = |u: &'static str, p: &'static str| {
            let header = header(u, p);
            let (v, users) = (&v, &users);
            async move { v.check(users, Some(header.as_bytes()), peer).await }
        };
        assert_eq!(check("alice", "pw").await, Verdict::Allowed);
        assert_eq!(v.cache.lock().unwrap().len(), 1);
        assert_eq!(check("alice", "pw").await, Verdict::Allowed);
        assert_eq!(check("alice", "wrong").await, Verdict::Refused);
        assert_eq!(check("bob", "pw").await, Verdict::Refused);
        assert_eq!(v.check(&users, None, peer).await, Verdict::Refused);
    }

    #[tokio::test]
    async fn failures_are_throttled_before_hashing_but_a_remembered_success_is_not() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let users = BTreeMap::from([("alice".to_owned(), hash)]);
        let v = Verified::default();
        let peer = IpAddr::from([127, 0, 0, 1]);
        let header =
            |p: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("alice:{p}")));
        assert_eq!(v.check(&users, Some(header("pw").as_bytes()), peer).await, Verdict::Allowed);
        // Cost 4 takes about a millisecond: well over a hundred failures fit the address's budget.
        let mut refused = 0;
        while v.check(&users, Some(header("wrong").as_bytes()), peer).await == Verdict::Refused {
            refused += 1;
            assert!(refused < 100_000, "never throttled");
        }
        assert!(matches!(
            v.check(&users, Some(header("wrong").as_bytes()), peer).await,
            Verdict::NotNow(Refusal::Throttled { .. })
        ));
        assert_eq!(v.check(&users, Some(header("pw").as_bytes()), peer).await, Verdict::Allowed, "remembered");
    }

    /// A well-formed hash of `cost` in `version` (salt and digest are all zero bits).
    fn shaped(version: &str, cost: &str) -> String {
        format!("${version}${cost}${}", ".".repeat(53))
    }

    #[test]
    fn cost_is_read_from_every_bcrypt_version_and_only_where_bcrypt_can_compute_it() {
        for (version, digits, want) in [
            ("2a", "10", Some(10)),
            ("2b", "04", Some(4)),
            ("2x", "05", Some(5)),
            ("2y", "12", Some(12)),
            ("2b", "31", Some(31)),
            ("2b", "03", None),
            ("2b", "32", None),
            ("2b", "99", None),
            ("2c", "10", None),
            ("2b", "1x", None),
        ] {
            assert_eq!(cost(&shaped(version, digits)), want, "${version}${digits}$");
        }
        assert_eq!(cost(&bcrypt::hash("pw", 5).unwrap()), Some(5), "a real hash");
        for bad in ["", "plaintext", "$2b$10$", "$2b$10$tooshort", "2b10"] {
            assert_eq!(cost(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_unknown_user_costs_what_the_costliest_configured_user_does() {
        let users = |costs: &[&str]| -> BTreeMap<String, String> {
            costs.iter().enumerate().map(|(i, c)| (format!("u{i}"), shaped("2b", c))).collect()
        };
        assert_eq!(dummy_cost(&users(&["10"])), 10, "deploy/web-config.yml's cost, not DEFAULT_COST");
        assert_eq!(dummy_cost(&users(&["04"])), 4);
        assert_eq!(dummy_cost(&users(&["10", "12", "05"])), 12);
        assert_eq!(dummy_cost(&users(&["10", "99"])), 10, "a cost bcrypt cannot compute is not chosen");
        assert_eq!(dummy_cost(&BTreeMap::new()), bcrypt::DEFAULT_COST);
    }

    #[test]
    fn the_dummy_has_its_cost_verifies_false_and_is_made_once() {
        for c in [4, 10, 12, 31] {
            assert_eq!(dummy(c).parse::<bcrypt::HashParts>().unwrap().get_cost(), c);
        }
        assert_eq!(cost(dummy(3)), Some(4), "clamped to what bcrypt computes");
        assert_eq!(cost(dummy(99)), Some(31));
        assert!(std::ptr::eq(dummy(6), dummy(6)), "cached");
        // Ok(false), not an error: bcrypt computed the digest at cost 4 and compared.
        assert!(!bcrypt::verify("x", dummy(4)).unwrap());
        assert!(!bcrypt::verify("", dummy(4)).unwrap());
    }
}
