//! The native response cache: a route's answers kept per worker and served
//! again without calling Python.
//!
//! A route (or, for a WSGI/ASGI app, a path given with `--cache`) with a
//! `Cache(...)` has a [`CachePolicy`]. For a GET or HEAD request of it the
//! dispatcher makes a [`CacheKey`] (`key.rs`), asks the worker's
//! [`ResponseCache`] (`store.rs`) and acts on the [`Lookup`]:
//! * a hit is written through the response writer of the protocol that
//!   asked (HTTP/1.1 copies the pre-rendered head, HTTP/2 encodes the
//!   stored fields), with `Age` and the server's own `Date`/`Connection`;
//!   a matching `If-None-Match` gets a 304 (`stored.rs` keeps the app's
//!   `ETag`, or makes a strong one);
//! * a miss calls the handler; its answer, recorded as values as it goes
//!   through the writer, is stored if it may be (`stored.rs`), and requests
//!   of the same key that arrived meanwhile (HTTP/1.1 requests or HTTP/2
//!   streams, parked by `StreamKey`) are woken to be answered from it
//!   (single flight);
//! * an expired answer within `stale=` seconds is served at once while one
//!   refresh of it runs detached from every client, and kept when the
//!   refresh fails.
//!
//! Invalidation (`app.cache.invalidate`, `app.cache.clear`) reaches every
//! worker through generation counters in shared memory (`generations.rs`).
//! The dispatch side of all this is src/dispatch/cached.rs.

mod generations;
mod key;
mod store;
mod stored;

use std::time::Duration;

pub use generations::share as share_generations;

/// Makes every cached answer of `route` out of date, in every worker (from
/// any thread: only shared atomics change; the answers' memory is reused
/// as the bound evicts them or their keys are stored again).
pub fn invalidate_route(route: u32) {
    generations::bump_route(route);
}

/// Makes the answers of one entry (`CacheKey::entry`) out of date, in
/// every worker, whatever headers they varied on.
pub fn invalidate_entry(entry: &[u8]) {
    generations::bump_entry(entry);
}

/// Makes every cached answer out of date, in every worker.
pub fn invalidate_all() {
    generations::bump_all();
}
pub use key::{
    entry_key, key, request_may_use_cache, shared_entry_prefix, shared_route_prefix, CacheKey,
    RequestIdentity,
};
pub use store::{CacheCounters, Lookup, ResponseCache};
pub use stored::{Recording, Stored};

/// How one route's answers are cached.
#[derive(Debug)]
pub struct CachePolicy {
    /// Which route: part of every key, and what route invalidation names.
    pub route: u32,
    pub ttl: Duration,
    /// Query parameters that split the cache, in this order.
    pub vary_query: Vec<String>,
    /// Header fields that split the cache (lowercase names).
    pub vary_headers: Vec<Vec<u8>>,
    /// Statuses that may be stored.
    pub statuses: Vec<u16>,
    /// How long past its TTL an answer may still be served while it is
    /// refreshed, or when the refresh fails.
    pub stale: Duration,
    /// How long requests wait for another request's fill of their key
    /// before they go to the handler themselves.
    pub lock_timeout: Duration,
    /// Whether requests with `Authorization` or `Cookie` use the cache (the
    /// route says its answers do not depend on them).
    pub with_credentials: bool,
}

/// A cache entry that a handler's answer is to fill (kept with the request
/// while the handler runs).
pub struct CacheFill {
    pub policy: std::sync::Arc<CachePolicy>,
    pub key: CacheKey,
    /// The request was HTTP/1.0 (a stale answer sent instead of the
    /// handler's says keep-alive explicitly).
    pub http10: bool,
    /// The request's head (its header fields are what the answer's `Vary`
    /// names are read from): a copy, made only for a request that goes to
    /// the handler, which costs far more.
    pub request_head: Box<[u8]>,
    /// A detached refresh of a stale answer (no client waits for it).
    pub refresh: bool,
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Instant;

    use super::*;

    pub(crate) fn policy() -> CachePolicy {
        CachePolicy {
            route: 7,
            ttl: Duration::from_secs(60),
            vary_query: vec!["arch".into(), "build".into()],
            vary_headers: vec![b"host".to_vec()],
            statuses: vec![200],
            stale: Duration::ZERO,
            lock_timeout: Duration::from_secs(5),
            with_credentials: false,
        }
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";

    /// A rendered answer as the writer seam would have recorded it.
    fn rec(rendered: &[u8]) -> Recording {
        Recording::from_http1(rendered).expect("a whole answer")
    }

    fn waiter(number: u64) -> u64 {
        number
    }
    const FAILED: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
    const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

    /// A cache holding one answer (fresh for 60 s, then served stale for
    /// 30 s more), filled at the returned instant.
    fn filled_with_stale_grace() -> (CachePolicy, ResponseCache, CacheKey, Instant) {
        let mut policy = policy();
        policy.stale = Duration::from_secs(30);
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let start = Instant::now();
        let mut key = key_for(&policy, b"arch=x86");
        cache.look_up(&policy, &mut key, &[], true, waiter(1), start);
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], start);
        (policy, cache, key, start)
    }

    fn key_for(policy: &CachePolicy, query: &[u8]) -> CacheKey {
        let request = RequestIdentity {
            https: false,
            host: b"a",
            path: b"/nas/",
            raw_query: query,
        };
        key(policy, &request, std::iter::empty())
    }

    fn is(lookup: &Lookup) -> &'static str {
        match lookup {
            Lookup::Hit(_) => "hit",
            Lookup::Stale(_) => "stale",
            Lookup::Refresh(_) => "refresh",
            Lookup::Fill => "fill",
            Lookup::Wait => "wait",
            Lookup::Pass => "pass",
        }
    }

    #[test]
    fn concurrent_misses_wait_for_one_fill_and_are_woken() {
        let policy = policy();
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let mut key = key_for(&policy, b"arch=x86");
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), now)),
            "fill"
        );
        for number in 2..=100 {
            let mut same = key_for(&policy, b"arch=x86");
            assert_eq!(
                is(&cache.look_up(&policy, &mut same, &[], true, waiter(number), now)),
                "wait"
            );
        }
        let mut other = key_for(&policy, b"arch=arm");
        assert_eq!(
            is(&cache.look_up(&policy, &mut other, &[], true, waiter(101), now)),
            "fill"
        );
        let done = cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], now);
        assert_eq!(done.waiters, (2..=100).map(waiter).collect::<Vec<_>>());
        assert_eq!(cache.counters.snapshot()[3], ("coalesced", 99));
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), now)),
            "hit"
        );
        assert_eq!(cache.fills(), 1, "only the other key's fill is left");
    }

    #[test]
    fn an_uncacheable_answer_makes_the_key_a_pass_that_still_stores() {
        let policy = policy();
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let mut key = key_for(&policy, b"arch=x86");
        cache.look_up(&policy, &mut key, &[], true, waiter(1), now);
        cache.look_up(&policy, &mut key.clone(), &[], true, waiter(2), now);
        let done = cache.complete_fill(&policy, &key, Some(&rec(NOT_FOUND)), &[], now);
        assert_eq!(done.waiters, vec![waiter(2)]);
        // The woken waiter and later requests go to the handler at once...
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), now)),
            "pass"
        );
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(3), now)),
            "pass"
        );
        // ...and a cacheable answer replaces the pass.
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], now);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(3), now)),
            "hit"
        );
    }

    #[test]
    fn stale_answers_serve_while_one_request_refreshes_and_survive_errors() {
        let (policy, mut cache, mut key, start) = filled_with_stale_grace();
        let expired = start + Duration::from_secs(61);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), expired)),
            "refresh"
        );
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), expired)),
            "stale"
        );
        let done = cache.complete_fill(&policy, &key, Some(&rec(FAILED)), &[], expired);
        assert!(done.kept_stale, "stale-if-error");
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), expired)),
            "refresh"
        );
        let done = cache.complete_fill(&policy, &key, None, &[], expired);
        assert!(done.kept_stale, "an exception too");
        let past_grace = start + Duration::from_secs(91);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), past_grace)),
            "fill"
        );
    }

    #[test]
    fn a_request_that_may_not_fill_still_gets_the_stale_answer_and_starts_the_refresh() {
        let (policy, mut cache, mut key, start) = filled_with_stale_grace();
        let expired = start + Duration::from_secs(61);
        // A HEAD (or conditional) request: the refresh is a GET of its own.
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], false, waiter(1), expired)),
            "refresh"
        );
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), expired)),
            "stale"
        );
        assert_eq!(cache.fills(), 1, "one refresh of the entry");
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], expired);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), expired)),
            "hit"
        );
    }

    #[test]
    fn overdue_fills_release_their_waiters_to_the_handler() {
        let policy = policy();
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let mut key = key_for(&policy, b"arch=x86");
        cache.look_up(&policy, &mut key, &[], true, waiter(1), now);
        cache.look_up(&policy, &mut key.clone(), &[], true, waiter(2), now);
        assert!(cache.release_overdue_fills(now).is_empty());
        let late = now + Duration::from_secs(6);
        assert_eq!(cache.release_overdue_fills(late), vec![waiter(2)]);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(2), late)),
            "pass"
        );
        // The hung handler's answer, should it come, is still stored.
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], late);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(3), late)),
            "hit"
        );
    }

    #[test]
    fn head_requests_never_fill() {
        let policy = policy();
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let mut key = key_for(&policy, b"arch=x86");
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], false, waiter(1), now)),
            "pass"
        );
        assert_eq!(cache.fills(), 0);
    }

    #[test]
    fn invalidation_makes_answers_absent_also_when_stored_after_it_began() {
        let mut policy = policy();
        policy.route = 9001;
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let mut key = key_for(&policy, b"arch=x86&build=1");
        cache.look_up(&policy, &mut key, &[], true, waiter(1), now);
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], now);
        invalidate_entry(key.entry());
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), now)),
            "fill"
        );
        // Invalidated while the handler ran: stored, but already out of date.
        invalidate_route(policy.route);
        cache.complete_fill(&policy, &key, Some(&rec(OK)), &[], now);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, &[], true, waiter(1), now)),
            "fill"
        );
    }

    #[test]
    fn the_store_is_bounded_by_bytes_and_counts_evictions() {
        let policy = policy();
        let mut cache = ResponseCache::new(64 * 1024, Default::default());
        let now = Instant::now();
        let mut response = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
        response.extend_from_slice(&[b'x'; 1000]);
        for index in 0..10_000u32 {
            let mut key = key_for(&policy, format!("arch={index}").as_bytes());
            cache.look_up(&policy, &mut key, &[], true, waiter(1), now);
            cache.complete_fill(&policy, &key, Some(&rec(&response)), &[], now);
        }
        assert!(cache.weight() <= 64 * 1024, "{}", cache.weight());
        assert!(cache.len() < 100);
        let (name, evictions) = cache.counters.snapshot()[4];
        assert!(
            name == "evictions" && evictions > 9_000,
            "{:?}",
            cache.counters
        );
    }

    #[test]
    fn an_answer_that_varies_is_one_variant_per_value_and_the_variants_are_bounded() {
        let policy = policy();
        let mut cache = ResponseCache::new(1 << 20, Default::default());
        let now = Instant::now();
        let gzip: &[(&[u8], &[u8])] = &[(b"Accept-Encoding", b"gzip")];
        let plain: &[(&[u8], &[u8])] = &[];
        let varies = b"HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\nContent-Length: 1\r\n\r\nz";
        let mut key = key_for(&policy, b"arch=x86");
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, gzip, true, waiter(1), now)),
            "fill"
        );
        cache.complete_fill(&policy, &key, Some(&rec(varies)), gzip, now);
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, gzip, true, waiter(1), now)),
            "hit"
        );
        // Another value of the field is another variant: a miss, then a hit.
        assert_eq!(
            is(&cache.look_up(&policy, &mut key, plain, true, waiter(1), now)),
            "fill"
        );
        cache.complete_fill(&policy, &key, Some(&rec(OK_VARYING)), plain, now);
        match cache.look_up(&policy, &mut key, plain, true, waiter(1), now) {
            Lookup::Hit(stored) => assert_eq!(&*stored.body, b"hi"),
            other => panic!("{}", is(&other)),
        }
        match cache.look_up(&policy, &mut key, gzip, true, waiter(1), now) {
            Lookup::Hit(stored) => assert_eq!(&*stored.body, b"z"),
            other => panic!("{}", is(&other)),
        }
        // Past the bound, new variants are answered but not stored.
        let values: Vec<String> = (0..2 * store::MAX_VARIANTS)
            .map(|n| format!("x{n}"))
            .collect();
        let mut stored = 0;
        for value in &values {
            let fields: &[(&[u8], &[u8])] = &[(b"accept-encoding", value.as_bytes())];
            cache.look_up(&policy, &mut key, fields, true, waiter(1), now);
            let done = cache.complete_fill(&policy, &key, Some(&rec(varies)), fields, now);
            stored += usize::from(done.stored.is_some());
        }
        assert_eq!(stored, usize::from(store::MAX_VARIANTS) - 2);
        // Refreshing a stored variant is not a new one.
        cache.look_up(&policy, &mut key, gzip, true, waiter(1), now);
        assert!(cache
            .complete_fill(&policy, &key, Some(&rec(varies)), gzip, now)
            .stored
            .is_some());
    }

    const OK_VARYING: &[u8] =
        b"HTTP/1.1 200 OK\r\nVary: accept-encoding\r\nContent-Length: 2\r\n\r\nhi";
}
