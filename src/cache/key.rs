//! The key of a cached answer, and which requests may use the cache.
//!
//! A key is the route, then each named query parameter's values, then each
//! named header field's values, every value length-prefixed so that no two
//! different requests can spell the same key (values glued together, as in
//! ruspk, collide: `ab`+`c` and `a`+`bc`). The route and query part alone
//! name one *entry* for invalidation, whatever the headers were: see
//! [`CacheKey::entry`] and `generations.rs`.

use super::CachePolicy;

/// A request's key under a route's policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey {
    pub bytes: Vec<u8>,
    /// The length of the route and query part of `bytes`.
    entry_len: usize,
    /// The entry's invalidation generation when it was looked up (set by
    /// `ResponseCache::look_up`).
    pub generation: u64,
}

impl CacheKey {
    /// The route and query part: what `app.cache.invalidate(route, **query)`
    /// names.
    pub fn entry(&self) -> &[u8] {
        &self.bytes[..self.entry_len]
    }

    /// The key as a shared second level names it: the entry part and the
    /// rest in hex, `ENTRY:REST`, so that an invalidation can drop every
    /// name under a route's or an entry's prefix (hex has no glob
    /// characters, whatever bytes the values hold).
    pub fn shared_name(&self) -> String {
        let mut name = shared_entry_prefix(self.entry());
        push_hex(&mut name, &self.bytes[self.entry_len..]);
        name
    }
}

/// The shared-level prefix of every name of `route`.
pub fn shared_route_prefix(route: u32) -> String {
    let mut prefix = String::with_capacity(8);
    push_hex(&mut prefix, &route.to_le_bytes());
    prefix
}

/// The shared-level prefix of every name of one entry.
pub fn shared_entry_prefix(entry: &[u8]) -> String {
    let mut prefix = String::with_capacity(entry.len() * 2 + 1);
    push_hex(&mut prefix, entry);
    prefix.push(':');
    prefix
}

/// Lowercase hex, by hand: a few lines do not justify a dependency.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 15)] as char);
    }
}

/// The key of a request under `policy`, from its raw query string and its
/// header fields.
pub fn key<'h>(
    policy: &CachePolicy,
    raw_query: &[u8],
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
) -> CacheKey {
    let mut bytes = entry_key(policy, form_urlencoded::parse(raw_query));
    let entry_len = bytes.len();
    for name in &policy.vary_headers {
        bytes.push(b'h');
        for (field, value) in fields.clone() {
            if field.eq_ignore_ascii_case(name) {
                push_value(&mut bytes, value);
            }
        }
    }
    CacheKey {
        bytes,
        entry_len,
        generation: 0,
    }
}

/// The route and query part of a key, from decoded `(name, value)` pairs:
/// a request's query, or the values an invalidation names.
pub fn entry_key<N, V>(
    policy: &CachePolicy,
    parameters: impl Iterator<Item = (N, V)> + Clone,
) -> Vec<u8>
where
    N: AsRef<str>,
    V: AsRef<str>,
{
    let mut bytes = Vec::with_capacity(64);
    bytes.extend_from_slice(&policy.route.to_le_bytes());
    for name in &policy.vary_query {
        bytes.push(b'q');
        for (parameter, value) in parameters.clone() {
            if parameter.as_ref() == name.as_str() {
                push_value(&mut bytes, value.as_ref().as_bytes());
            }
        }
    }
    bytes
}

fn push_value(key: &mut Vec<u8>, value: &[u8]) {
    key.extend_from_slice(&(value.len() as u32).to_le_bytes());
    key.extend_from_slice(value);
}

/// Whether a request may use the cache: credentials bypass it unless the
/// route's policy says its answers do not depend on them.
pub fn request_may_use_cache<'h>(
    policy: &CachePolicy,
    mut fields: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> bool {
    policy.with_credentials
        || !fields.any(|(name, _)| {
            name.eq_ignore_ascii_case(b"authorization") || name.eq_ignore_ascii_case(b"cookie")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::policy;

    fn fields(host: &'static [u8]) -> impl Iterator<Item = (&'static [u8], &'static [u8])> + Clone {
        [(&b"Host"[..], host), (&b"Accept"[..], &b"*/*"[..])].into_iter()
    }

    #[test]
    fn keys_use_exactly_the_named_parameters_and_headers() {
        let policy = policy();
        let base = key(&policy, b"arch=x86&build=1", fields(b"a"));
        assert_eq!(
            base,
            key(&policy, b"build=1&arch=x86", fields(b"a")),
            "order of the query"
        );
        assert_eq!(
            base,
            key(&policy, b"arch=x86&build=1&noise=2", fields(b"a")),
            "other parameters"
        );
        assert_ne!(base, key(&policy, b"arch=arm&build=1", fields(b"a")));
        assert_ne!(
            base,
            key(&policy, b"arch=x86&build=1", fields(b"b")),
            "the host"
        );
        assert_ne!(
            base,
            key(&policy, b"arch=x86&arch=arm&build=1", fields(b"a")),
            "repeated values kept"
        );
        // Glued values cannot collide: lengths are part of the key.
        assert_ne!(
            key(&policy, b"arch=ab&build=c", fields(b"a")),
            key(&policy, b"arch=a&build=bc", fields(b"a"))
        );
        // Percent-encoding is decoded before keying.
        assert_eq!(
            key(&policy, b"arch=x%386&build=1", fields(b"a")),
            key(&policy, b"arch=x86&build=1", fields(b"a"))
        );
    }

    #[test]
    fn the_entry_part_ignores_headers_and_matches_named_values() {
        let policy = policy();
        let one = key(&policy, b"arch=x86&build=1", fields(b"a"));
        let other_host = key(&policy, b"arch=x86&build=1", fields(b"b"));
        assert_eq!(one.entry(), other_host.entry());
        let named = entry_key(&policy, [("build", "1"), ("arch", "x86")].into_iter());
        assert_eq!(one.entry(), &named[..]);
    }

    #[test]
    fn shared_names_sit_under_their_route_and_entry_prefixes() {
        let policy = policy();
        let one = key(&policy, b"arch=x86", fields(b"a"));
        let name = one.shared_name();
        assert!(name.starts_with(&shared_route_prefix(7)));
        assert!(name.starts_with(&shared_entry_prefix(one.entry())));
        assert_eq!(&name[..8], "07000000");
        let other_host = key(&policy, b"arch=x86", fields(b"b")).shared_name();
        assert_ne!(name, other_host);
        assert!(other_host.starts_with(&shared_entry_prefix(one.entry())));
        assert!(name
            .bytes()
            .all(|byte| byte.is_ascii_hexdigit() || byte == b':'));
    }

    #[test]
    fn credentials_bypass_unless_the_route_allows_them() {
        let mut policy = policy();
        let with_cookie = [(&b"Cookie"[..], &b"a=b"[..])];
        assert!(!request_may_use_cache(&policy, with_cookie.into_iter()));
        assert!(request_may_use_cache(&policy, fields(b"a")));
        policy.with_credentials = true;
        assert!(request_may_use_cache(&policy, with_cookie.into_iter()));
    }
}
