//! The native response cache: a route's answers kept per worker and served
//! again without calling Python.
//!
//! How it works:
//! * A route registered with `Cache(ttl=..., vary_query=..., vary_headers=...)`
//!   has a [`CachePolicy`]. The key of a request is the route plus exactly
//!   the named query parameters (in the policy's order, every value in the
//!   request's order) and the named header fields, each length-prefixed so
//!   no two different requests can spell the same key.
//! * A fresh entry is answered from here: the stored head (status line and
//!   fields, without `Date` and `Connection`), an `Age` field, then the
//!   server's own `Date`/`Connection` and the shared body bytes. HEAD uses
//!   the GET entry.
//! * A miss calls the handler as usual; its rendered response is stored
//!   when it is cacheable: a status the policy lists (2xx by default), no
//!   `Set-Cookie`, no `Cache-Control: no-store` or `private`. Requests with
//!   `Authorization` or `Cookie` bypass the cache.
//! * Entries are weighed by their bytes in a quick_cache store (S3-FIFO
//!   eviction) bounded per worker, so any number of distinct keys costs at
//!   most that bound.
//!
//! Not here yet: single flight for async handlers (a sync handler runs one
//! request at a time on the loop thread, so concurrent misses of one key
//! cannot happen in one worker), stale-while-revalidate, invalidation
//! across workers, a Redis second level, WSGI/ASGI routes.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_cache::Weighter;

/// How one route's answers are cached.
pub struct CachePolicy {
    /// Which route (the handler's index): part of every key.
    pub route: u32,
    pub ttl: Duration,
    /// Query parameters that split the cache, in this order.
    pub vary_query: Vec<String>,
    /// Header fields that split the cache (lowercase names).
    pub vary_headers: Vec<Vec<u8>>,
    /// Statuses that may be stored.
    pub statuses: Vec<u16>,
}

/// One stored answer.
pub struct Stored {
    /// Status line and header fields, each ending in CRLF, without `Date`,
    /// `Connection` and the blank line.
    pub head: Box<[u8]>,
    pub body: Arc<[u8]>,
    pub status: u16,
    pub stored_at: Instant,
    pub expires: Instant,
}

/// Weighs an entry by the bytes it holds.
#[derive(Clone)]
struct ByBytes;

impl Weighter<Vec<u8>, Rc<Stored>> for ByBytes {
    fn weight(&self, key: &Vec<u8>, value: &Rc<Stored>) -> u64 {
        (key.len() + value.head.len() + value.body.len() + 64) as u64
    }
}

/// A worker's cached answers, bounded by bytes.
pub struct ResponseCache {
    entries: quick_cache::unsync::Cache<Vec<u8>, Rc<Stored>, ByBytes>,
    pub hits: u64,
    pub misses: u64,
}

impl ResponseCache {
    pub fn new(max_bytes: u64) -> ResponseCache {
        ResponseCache {
            entries: quick_cache::unsync::Cache::with_weighter(1024, max_bytes.max(1), ByBytes),
            hits: 0,
            misses: 0,
        }
    }

    /// The entry for `key` if it is still fresh.
    pub fn fresh(&mut self, key: &[u8], now: Instant) -> Option<Rc<Stored>> {
        match self.entries.get(key) {
            Some(stored) if now < stored.expires => {
                self.hits += 1;
                Some(stored.clone())
            }
            _ => {
                self.misses += 1;
                None
            }
        }
    }

    /// Stores a rendered response (head and body as the server wrote them)
    /// if it is cacheable under `policy`.
    pub fn store(&mut self, policy: &CachePolicy, key: Vec<u8>, rendered: &[u8], now: Instant) {
        let Some(stored) = cacheable(policy, rendered, now) else {
            return;
        };
        self.entries.insert(key, Rc::new(stored));
    }

    /// Drops every entry of `route`.
    pub fn invalidate_route(&mut self, route: u32) {
        let prefix = route.to_le_bytes();
        self.entries.retain(|key, _| !key.starts_with(&prefix));
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn weight(&self) -> u64 {
        self.entries.weight()
    }
}

/// The key of a request under `policy`: route, then each named query
/// parameter's values, then each named header's values, length-prefixed.
pub fn key<'h>(
    policy: &CachePolicy,
    raw_query: &[u8],
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    key.extend_from_slice(&policy.route.to_le_bytes());
    let push = |key: &mut Vec<u8>, value: &[u8]| {
        key.extend_from_slice(&(value.len() as u32).to_le_bytes());
        key.extend_from_slice(value);
    };
    for name in &policy.vary_query {
        key.push(b'q');
        for (parameter, value) in form_urlencoded::parse(raw_query) {
            if parameter == name.as_str() {
                push(&mut key, value.as_bytes());
            }
        }
    }
    for name in &policy.vary_headers {
        key.push(b'h');
        for (field, value) in fields.clone() {
            if field.eq_ignore_ascii_case(name) {
                push(&mut key, value);
            }
        }
    }
    key
}

/// Whether a request may use the cache at all: credentials bypass it.
pub fn request_may_use_cache<'h>(mut fields: impl Iterator<Item = (&'h [u8], &'h [u8])>) -> bool {
    !fields.any(|(name, _)| {
        name.eq_ignore_ascii_case(b"authorization") || name.eq_ignore_ascii_case(b"cookie")
    })
}

/// Splits a response the server rendered into what is stored, if it may be.
fn cacheable(policy: &CachePolicy, rendered: &[u8], now: Instant) -> Option<Stored> {
    let head_end = memchr::memmem::find(rendered, b"\r\n\r\n")? + 2;
    let head = &rendered[..head_end];
    let status_line_end = memchr::memchr(b'\n', head)? + 1;
    let status: u16 = std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()?;
    if !policy.statuses.contains(&status) {
        return None;
    }
    let mut kept = head[..status_line_end].to_vec();
    let mut ttl = policy.ttl;
    for line in head[status_line_end..].split_inclusive(|&byte| byte == b'\n') {
        let colon = memchr::memchr(b':', line)?;
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"set-cookie") {
            return None;
        }
        if name.eq_ignore_ascii_case(b"cache-control") {
            let lowered = value.to_ascii_lowercase();
            let directives = lowered.split(|&byte| byte == b',').map(<[u8]>::trim_ascii);
            for directive in directives {
                if directive == b"no-store" || directive == b"private" {
                    return None;
                }
                // A handler's max-age may shorten the route's TTL.
                if let Some(seconds) = directive.strip_prefix(b"max-age=") {
                    let seconds: u64 = std::str::from_utf8(seconds).ok()?.parse().ok()?;
                    ttl = ttl.min(Duration::from_secs(seconds));
                }
            }
        }
        if name.eq_ignore_ascii_case(b"date") || name.eq_ignore_ascii_case(b"connection") {
            continue;
        }
        kept.extend_from_slice(line);
    }
    Some(Stored {
        head: kept.into_boxed_slice(),
        body: rendered[head_end + 2..].into(),
        status,
        stored_at: now,
        expires: now + ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CachePolicy {
        CachePolicy {
            route: 7,
            ttl: Duration::from_secs(60),
            vary_query: vec!["arch".into(), "build".into()],
            vary_headers: vec![b"host".to_vec()],
            statuses: vec![200],
        }
    }

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
    }

    #[test]
    fn what_is_stored_and_what_is_not() {
        let policy = policy();
        let now = Instant::now();
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nDate: x\r\nConnection: close\r\n\r\nhi";
        let stored = cacheable(&policy, ok, now).unwrap();
        assert_eq!(
            &*stored.head,
            &b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"[..]
        );
        assert_eq!(&*stored.body, b"hi");
        assert!(cacheable(
            &policy,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            now
        )
        .is_none());
        assert!(cacheable(
            &policy,
            b"HTTP/1.1 200 OK\r\nSet-Cookie: a=b\r\nContent-Length: 0\r\n\r\n",
            now
        )
        .is_none());
        for control in ["no-store", "private", "public, no-store"] {
            let response =
                format!("HTTP/1.1 200 OK\r\nCache-Control: {control}\r\nContent-Length: 0\r\n\r\n");
            assert!(
                cacheable(&policy, response.as_bytes(), now).is_none(),
                "{control}"
            );
        }
        let short = cacheable(
            &policy,
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n",
            now,
        )
        .unwrap();
        assert_eq!(short.expires, now + Duration::from_secs(5));
    }

    #[test]
    fn the_store_is_bounded_by_bytes() {
        let policy = policy();
        let mut cache = ResponseCache::new(64 * 1024);
        let now = Instant::now();
        let body = vec![b'x'; 1000];
        let mut response = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
        response.extend_from_slice(&body);
        for index in 0..10_000u32 {
            cache.store(&policy, index.to_le_bytes().to_vec(), &response, now);
        }
        assert!(cache.weight() <= 64 * 1024, "{}", cache.weight());
        assert!(cache.len() < 100);
    }
}
