//! The key of a cached answer, and which requests may use the cache.
//!
//! By default a key is what names a resource to the app, as nginx's
//! `$scheme$host$request_uri` does: the route, the scheme and the host the
//! app sees (after a trusted proxy's headers), the path as sent, and the
//! query exactly as sent; then the values of each `vary_headers` field.
//! A route's `vary_query` narrows the query part on purpose to the named
//! parameters (a catalog that ignores tracking parameters). Every value is
//! length-prefixed, so that no two different requests can spell the same
//! key (values glued together collide: `ab`+`c` and `a`+`bc`).
//!
//! Two parts of a key have names of their own:
//! * the *entry* ([`CacheKey::entry`]): the route and its query, decoded
//!   and in a canonical order (only the `vary_query` parameters, when the
//!   route names some). It is what `app.cache.invalidate(route, **query)`
//!   names, whatever the path, host and headers were (`generations.rs`);
//! * the *primary* key ([`CacheKey::primary`]): everything but the answer's
//!   own `Vary`. An answer that varies is stored under the primary key
//!   plus the request's values of the fields its `Vary` names
//!   ([`push_variant`]), one variant per combination (store.rs).
//!
//! The raw query, not the canonical one, is in the key: frameworks hand
//! the parameters to the app in the order sent (a JSON echo of them differs
//! by order), so only requests that spell their query alike share answers.

use std::borrow::Cow;

use super::CachePolicy;

/// What names the resource a request asks for, as the app sees it.
#[derive(Clone, Copy, Debug)]
pub struct RequestIdentity<'r> {
    /// The scheme is https (the transport's, or a trusted proxy's word).
    pub https: bool,
    /// The Host (or a trusted proxy's forwarded host); empty when absent.
    pub host: &'r [u8],
    /// The path as sent, still percent-encoded.
    pub path: &'r [u8],
    /// The query as sent, after the `?`.
    pub raw_query: &'r [u8],
}

/// A request's key under a route's policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey {
    pub bytes: Vec<u8>,
    /// The length of the route and query part of `bytes`.
    entry_len: usize,
    /// The length of the key before any variant values (`push_variant`).
    primary_len: usize,
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

    /// The key without the values of an answer's `Vary` fields.
    pub fn primary(&self) -> &[u8] {
        &self.bytes[..self.primary_len]
    }

    /// Makes the key the primary key again (a variant is added by the store
    /// at each lookup).
    pub fn reset_to_primary(&mut self) {
        self.bytes.truncate(self.primary_len);
    }

    /// The key as a shared second level names it: the entry part and the
    /// rest in hex, `ENTRY:REST`, so that an invalidation can drop every
    /// name under a route's or an entry's prefix (hex has no glob
    /// characters, whatever bytes the values hold).
    pub fn shared_name(&self) -> String {
        let mut name = shared_entry_prefix(self.entry());
        push_hex(&mut name, &self.bytes[self.entry_len..self.primary_len]);
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

/// The key of a request under `policy`, from what names its resource and
/// its header fields.
pub fn key<'h>(
    policy: &CachePolicy,
    request: &RequestIdentity<'_>,
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
) -> CacheKey {
    let parameters = parse_query(request.raw_query);
    let mut bytes = entry_key(policy, parameters.iter().map(|(name, value)| (name, value)));
    let entry_len = bytes.len();
    bytes.push(if request.https { b'S' } else { b's' });
    push_value(&mut bytes, request.host);
    push_value(&mut bytes, request.path);
    if policy.vary_query.is_empty() {
        push_value(&mut bytes, request.raw_query);
    }
    for name in &policy.vary_headers {
        bytes.push(b'h');
        push_field_values(&mut bytes, name, fields.clone());
    }
    let primary_len = bytes.len();
    CacheKey {
        bytes,
        entry_len,
        primary_len,
        generation: 0,
    }
}

/// Adds a request's values of the fields an answer's `Vary` names (sorted,
/// lowercase) to its primary key: the key of that answer's variant.
pub fn push_variant<'h>(
    key: &mut Vec<u8>,
    names: &[Box<[u8]>],
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
) {
    for name in names {
        key.push(b'v');
        push_field_values(key, name, fields.clone());
    }
}

/// Every value of the field `name`, each length-prefixed and marked, so
/// that an absent field and an empty one are different keys.
fn push_field_values<'h>(
    key: &mut Vec<u8>,
    name: &[u8],
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) {
    for (field, value) in fields {
        if field.eq_ignore_ascii_case(name) {
            key.push(b'=');
            push_value(key, value);
        }
    }
    key.push(b';');
}

/// The route and query part of a key, from decoded `(name, value)` pairs:
/// a request's query, or the values an invalidation names. With
/// `vary_query`, the named parameters' values in the policy's order;
/// without, every parameter, ordered by name (the values of one name keep
/// their order), so an invalidation may name them in any order.
pub fn entry_key<N, V>(
    policy: &CachePolicy,
    parameters: impl Iterator<Item = (N, V)> + Clone,
) -> Vec<u8>
where
    N: AsRef<str>,
    V: AsRef<str>,
{
    // Room for a typical key whole (route, query, host, path): one allocation.
    let mut bytes = Vec::with_capacity(256);
    bytes.extend_from_slice(&policy.route.to_le_bytes());
    if policy.vary_query.is_empty() {
        let mut all: Vec<(N, V)> = parameters.collect();
        all.sort_by(|(a, _), (b, _)| a.as_ref().cmp(b.as_ref()));
        bytes.push(b'a');
        for (name, value) in &all {
            push_value(&mut bytes, name.as_ref().as_bytes());
            push_value(&mut bytes, value.as_ref().as_bytes());
        }
        return bytes;
    }
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

/// A query's `(name, value)` pairs, decoded exactly as
/// `form_urlencoded::parse` decodes them, split once: a hit's key reads
/// them once per `vary_query` name. A pair of plain ASCII (no `%`, no `+`)
/// is its own decoding and is borrowed as it is; only the others go
/// through the decoder (which also makes invalid UTF-8 U+FFFD).
fn parse_query(raw: &[u8]) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    let mut pairs = Vec::with_capacity(8);
    for pair in raw.split(|&byte| byte == b'&') {
        let plain = pair
            .iter()
            .all(|&byte| byte.is_ascii() && byte != b'%' && byte != b'+');
        match std::str::from_utf8(pair) {
            _ if pair.is_empty() => {}
            Ok(text) if plain => {
                let (name, value) = text.split_once('=').unwrap_or((text, ""));
                pairs.push((Cow::Borrowed(name), Cow::Borrowed(value)));
            }
            _ => pairs.extend(form_urlencoded::parse(pair)),
        }
    }
    pairs
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

    /// A plain-http request of `/nas/?QUERY` for host `a`.
    fn at(raw_query: &'static [u8]) -> RequestIdentity<'static> {
        RequestIdentity {
            https: false,
            host: b"a",
            path: b"/nas/",
            raw_query,
        }
    }

    #[test]
    fn with_vary_query_keys_use_exactly_the_named_parameters_and_headers() {
        let policy = policy();
        let base = key(&policy, &at(b"arch=x86&build=1"), fields(b"a"));
        assert_eq!(
            base,
            key(&policy, &at(b"build=1&arch=x86"), fields(b"a")),
            "order of the query"
        );
        assert_eq!(
            base,
            key(&policy, &at(b"arch=x86&build=1&noise=2"), fields(b"a")),
            "other parameters"
        );
        assert_ne!(base, key(&policy, &at(b"arch=arm&build=1"), fields(b"a")));
        assert_ne!(
            base,
            key(&policy, &at(b"arch=x86&build=1"), fields(b"b")),
            "the host field (vary_headers)"
        );
        assert_ne!(
            base,
            key(&policy, &at(b"arch=x86&arch=arm&build=1"), fields(b"a")),
            "repeated values kept"
        );
        // Glued values cannot collide: lengths are part of the key.
        assert_ne!(
            key(&policy, &at(b"arch=ab&build=c"), fields(b"a")),
            key(&policy, &at(b"arch=a&build=bc"), fields(b"a"))
        );
        // Percent-encoding is decoded before keying.
        assert_eq!(
            key(&policy, &at(b"arch=x%386&build=1"), fields(b"a")),
            key(&policy, &at(b"arch=x86&build=1"), fields(b"a"))
        );
    }

    #[test]
    fn by_default_the_scheme_host_path_and_raw_query_are_the_key() {
        let mut policy = policy();
        policy.vary_query.clear();
        policy.vary_headers.clear();
        let base = key(&policy, &at(b"page=1"), fields(b"a"));
        let mut other = at(b"page=1");
        other.https = true;
        assert_ne!(base, key(&policy, &other, fields(b"a")), "the scheme");
        other = at(b"page=1");
        other.host = b"evil.example";
        assert_ne!(base, key(&policy, &other, fields(b"a")), "the host");
        other = at(b"page=1");
        other.path = b"/nas/2";
        assert_ne!(base, key(&policy, &other, fields(b"a")), "the path");
        for query in [&b"page=7"[..], b"page=1&token=secret", b"page=%31", b""] {
            assert_ne!(
                base,
                key(&policy, &at(query), fields(b"a")),
                "{}",
                String::from_utf8_lossy(query)
            );
        }
        // Another order is another key, but the same entry.
        let reordered = key(&policy, &at(b"b=2&a=1"), fields(b"a"));
        let ordered = key(&policy, &at(b"a=1&b=2"), fields(b"a"));
        assert_ne!(reordered, ordered);
        assert_eq!(reordered.entry(), ordered.entry());
        let named = entry_key(&policy, [("b", "2"), ("a", "1")].into_iter());
        assert_eq!(ordered.entry(), &named[..]);
        assert_ne!(
            ordered.entry(),
            key(&policy, &at(b"a=1&b=2&c=3"), fields(b"a")).entry()
        );
    }

    #[test]
    fn variants_add_each_named_fields_values_and_tell_absent_from_empty() {
        let policy = policy();
        let base = key(&policy, &at(b"arch=x86"), fields(b"a"));
        let names: Vec<Box<[u8]>> = vec![b"accept-encoding".to_vec().into_boxed_slice()];
        let variant = |headers: &[(&'static [u8], &'static [u8])]| {
            let mut bytes = base.primary().to_vec();
            push_variant(&mut bytes, &names, headers.iter().copied());
            bytes
        };
        let absent = variant(&[]);
        let empty = variant(&[(b"Accept-Encoding", b"")]);
        let gzip = variant(&[(b"accept-encoding", b"gzip")]);
        let twice = variant(&[(b"Accept-Encoding", b"gzip"), (b"Accept-Encoding", b"br")]);
        for (one, two) in [(&absent, &empty), (&empty, &gzip), (&gzip, &twice)] {
            assert_ne!(one, two);
        }
        assert!(gzip.starts_with(base.primary()));
    }

    #[test]
    fn the_entry_part_ignores_the_host_and_headers_and_matches_named_values() {
        let policy = policy();
        let one = key(&policy, &at(b"arch=x86&build=1"), fields(b"a"));
        let mut elsewhere = at(b"arch=x86&build=1");
        elsewhere.host = b"b";
        let other_host = key(&policy, &elsewhere, fields(b"b"));
        assert_eq!(one.entry(), other_host.entry());
        let named = entry_key(&policy, [("build", "1"), ("arch", "x86")].into_iter());
        assert_eq!(one.entry(), &named[..]);
    }

    #[test]
    fn shared_names_sit_under_their_route_and_entry_prefixes() {
        let policy = policy();
        let one = key(&policy, &at(b"arch=x86"), fields(b"a"));
        let name = one.shared_name();
        assert!(name.starts_with(&shared_route_prefix(7)));
        assert!(name.starts_with(&shared_entry_prefix(one.entry())));
        assert_eq!(&name[..8], "07000000");
        let other_host = key(&policy, &at(b"arch=x86"), fields(b"b")).shared_name();
        assert_ne!(name, other_host);
        assert!(other_host.starts_with(&shared_entry_prefix(one.entry())));
        assert!(name
            .bytes()
            .all(|byte| byte.is_ascii_hexdigit() || byte == b':'));
    }

    #[test]
    fn the_query_is_decoded_as_form_urlencoded_decodes_it() {
        for raw in [
            &b""[..],
            b"a=1&b=2",
            b"&&a=1&&b&=3&c==4&",
            b"name=a+b&x%20y=%41%zz&plus=%2B",
            b"utf=\xc3\xa9&raw=\xc3\xa9&bad=\xff\xfe&bad%FF=1",
            b"only",
            b"=v",
        ] {
            let ours: Vec<(String, String)> = parse_query(raw)
                .into_iter()
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect();
            let theirs: Vec<(String, String)> = form_urlencoded::parse(raw)
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(raw));
        }
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
