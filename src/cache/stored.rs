//! One stored answer, and the rules for what may be stored.
//!
//! A handler's response is stored as the server rendered it, split into a
//! head (status line and fields, without `Date` and `Connection`, which
//! every hit writes afresh) and the body, shared by every hit. What is not
//! stored: a status the policy does not list (2xx by default), a 206 (a part
//! is not the resource: Range requests go to the app), `Set-Cookie`,
//! `Cache-Control: no-store` or `private`, `Vary: *`, a chunked body. The
//! fields another `Vary` names are kept with the answer: it is stored as
//! one variant of its entry (key.rs, store.rs). A
//! handler's `Cache-Control: max-age=N` may shorten the route's TTL. A
//! strong `ETag` is derived from the body unless the handler set one, so a
//! client's `If-None-Match` gets a 304 from the cache.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CachePolicy;

/// One stored answer.
pub struct Stored {
    /// Status line and header fields, each ending in CRLF, without `Date`,
    /// `Connection` and the blank line.
    pub head: Box<[u8]>,
    pub body: Arc<[u8]>,
    pub status: u16,
    /// The `ETag` value (with its quotes), to compare with `If-None-Match`.
    pub etag: Box<[u8]>,
    /// The `ETag` was made here (the handler's answer did not have one).
    pub etag_added: bool,
    /// The request fields the answer's `Vary` names (lowercase, sorted,
    /// each once); empty when it does not vary.
    pub vary: Box<[Box<[u8]>]>,
    /// The head of the 304 that answers a matching `If-None-Match` (status
    /// line, `ETag` and the other validator and caching fields); empty when
    /// the status is not 200.
    pub not_modified_head: Box<[u8]>,
    pub stored_at: Instant,
    pub expires: Instant,
    /// Until when an expired answer may still be served while one request
    /// refreshes it (`stale=`), or instead of a refresh that failed.
    pub stale_until: Instant,
    /// The invalidation generation it was stored under (`generations.rs`).
    pub generation: u64,
}

/// Fields a 304 repeats from the 200 it stands for (RFC 9110, 15.4.5).
const NOT_MODIFIED_FIELDS: [&[u8]; 5] = [
    b"cache-control",
    b"content-location",
    b"expires",
    b"vary",
    b"last-modified",
];

/// Splits a response the server rendered into what is stored, if it may be.
pub fn cacheable(
    policy: &CachePolicy,
    rendered: &[u8],
    now: Instant,
    generation: u64,
) -> Option<Stored> {
    let head_end = memchr::memmem::find(rendered, b"\r\n\r\n")? + 2;
    let head = &rendered[..head_end];
    let status_line_end = memchr::memchr(b'\n', head)? + 1;
    let status: u16 = std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()?;
    if status == 206 || !policy.statuses.contains(&status) {
        return None;
    }
    let body: Arc<[u8]> = rendered[head_end + 2..].into();
    let mut kept = head[..status_line_end].to_vec();
    let mut not_modified = b"HTTP/1.1 304 Not Modified\r\n".to_vec();
    let mut etag: Option<Box<[u8]>> = None;
    let mut ttl = policy.ttl;
    let mut vary: Vec<Box<[u8]>> = Vec::new();
    for line in head[status_line_end..].split_inclusive(|&byte| byte == b'\n') {
        let colon = memchr::memchr(b':', line)?;
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        let is = |field: &[u8]| name.eq_ignore_ascii_case(field);
        if is(b"set-cookie") || is(b"transfer-encoding") {
            return None;
        }
        if is(b"vary") {
            for name in value.split(|&byte| byte == b',').map(<[u8]>::trim_ascii) {
                if name == b"*" {
                    return None;
                }
                if !name.is_empty() {
                    vary.push(name.to_ascii_lowercase().into_boxed_slice());
                }
            }
        }
        if is(b"cache-control") {
            ttl = ttl.min(allowed_ttl(value)?);
        }
        if is(b"date") || is(b"connection") {
            continue;
        }
        if is(b"etag") {
            etag = Some(value.into());
            not_modified.extend_from_slice(line);
        } else if NOT_MODIFIED_FIELDS.iter().any(|field| is(field)) {
            not_modified.extend_from_slice(line);
        }
        kept.extend_from_slice(line);
    }
    let etag_added = etag.is_none();
    let etag = etag.unwrap_or_else(|| {
        let value = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(&body));
        for head in [&mut kept, &mut not_modified] {
            head.extend_from_slice(b"ETag: ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        value.into_bytes().into_boxed_slice()
    });
    vary.sort_unstable();
    vary.dedup();
    let expires = now + ttl;
    Some(Stored {
        head: kept.into_boxed_slice(),
        body,
        status,
        etag,
        etag_added,
        vary: vary.into_boxed_slice(),
        not_modified_head: if status == 200 {
            not_modified.into_boxed_slice()
        } else {
            Box::default()
        },
        stored_at: now,
        expires,
        stale_until: expires + policy.stale,
        generation,
    })
}

/// The most a `Cache-Control` value lets the answer be kept; `None` when
/// it may not be stored at all.
fn allowed_ttl(value: &[u8]) -> Option<Duration> {
    let lowered = value.to_ascii_lowercase();
    let mut ttl = Duration::MAX;
    for directive in lowered.split(|&byte| byte == b',').map(<[u8]>::trim_ascii) {
        if directive == b"no-store" || directive == b"private" || directive == b"no-cache" {
            return None;
        }
        if let Some(seconds) = directive.strip_prefix(b"max-age=") {
            let seconds: u64 = std::str::from_utf8(seconds).ok()?.parse().ok()?;
            ttl = ttl.min(Duration::from_secs(seconds));
        }
    }
    Some(ttl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::policy;

    #[test]
    fn what_is_stored_and_what_is_not() {
        let policy = policy();
        let now = Instant::now();
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nDate: x\r\nConnection: close\r\n\r\nhi";
        let stored = cacheable(&policy, ok, now, 0).unwrap();
        let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(b"hi"));
        assert_eq!(
            String::from_utf8_lossy(&stored.head),
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nETag: {etag}\r\n")
        );
        assert_eq!(&*stored.body, b"hi");
        assert_eq!(&*stored.etag, etag.as_bytes());
        assert_eq!(
            String::from_utf8_lossy(&stored.not_modified_head),
            format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\n")
        );
        let refused: [&[u8]; 6] = [
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/9\r\nContent-Length: 1\r\n\r\nx",
            b"HTTP/1.1 200 OK\r\nVary: Origin, *\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nSet-Cookie: a=b\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nVary: *\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ];
        for response in refused {
            assert!(
                cacheable(&policy, response, now, 0).is_none(),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
        for control in ["no-store", "private", "public, no-store", "no-cache"] {
            let response =
                format!("HTTP/1.1 200 OK\r\nCache-Control: {control}\r\nContent-Length: 0\r\n\r\n");
            assert!(
                cacheable(&policy, response.as_bytes(), now, 0).is_none(),
                "{control}"
            );
        }
    }

    #[test]
    fn a_handlers_max_age_shortens_the_ttl_and_stale_follows_it() {
        let mut policy = policy();
        policy.stale = Duration::from_secs(30);
        let now = Instant::now();
        let short = cacheable(
            &policy,
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n",
            now,
            0,
        )
        .unwrap();
        assert_eq!(short.expires, now + Duration::from_secs(5));
        assert_eq!(short.stale_until, now + Duration::from_secs(35));
        assert!(String::from_utf8_lossy(&short.not_modified_head)
            .contains("Cache-Control: max-age=5\r\n"));
    }

    #[test]
    fn a_handlers_own_etag_is_kept() {
        let stored = cacheable(
            &policy(),
            b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 1\r\n\r\nx",
            Instant::now(),
            0,
        )
        .unwrap();
        assert_eq!(&*stored.etag, b"\"v1\"");
        assert_eq!(
            &*stored.head,
            b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 1\r\n"
        );
    }

    #[test]
    fn the_fields_an_answer_varies_on_are_kept_once_in_order() {
        let stored = cacheable(
            &policy(),
            b"HTTP/1.1 200 OK\r\nVary: Origin, accept-encoding\r\nVary: ORIGIN\r\nContent-Length: 1\r\n\r\nx",
            Instant::now(),
            0,
        )
        .unwrap();
        let names: Vec<&[u8]> = stored.vary.iter().map(|name| &name[..]).collect();
        assert_eq!(names, [&b"accept-encoding"[..], b"origin"]);
        assert!(String::from_utf8_lossy(&stored.not_modified_head).contains("Vary: Origin"));
    }
}
