//! One stored answer, how a handler's answer is recorded to become one,
//! and the rules for what may be stored.
//!
//! A cache fill records the handler's answer as it goes through the
//! response-writer seam (`crate::exchange`), whatever protocol asked: a
//! [`Recording`] of the status, the app's header fields (the protocol's
//! framing fields left out) and the body. When the answer is complete and
//! may be stored, [`cacheable`] makes it a [`Stored`]: the same values
//! (without `Date` and `Connection`, which every hit writes afresh), the
//! body shared by every hit, and, pre-rendered beside them, the HTTP/1.1
//! head (status line and fields), so an HTTP/1.1 hit is one copy of bytes
//! as it always was; HTTP/2 encodes its hits from the values.
//!
//! What is not stored: a status the policy does not list (2xx by
//! default), a 206 (a part is not the resource: Range requests go to the
//! app), `Set-Cookie`, `Cache-Control: no-store`, `no-cache` or `private`,
//! `Vary: *`, a body sent in parts of unknown total length (chunked), a
//! file body, trailers, or an answer cut short. The fields another `Vary`
//! names are kept with the answer: it is stored as one variant of its
//! entry (key.rs, store.rs). A handler's `Cache-Control: max-age=N` may
//! shorten the route's TTL. A strong `ETag` is derived from the body unless
//! the handler set one, so a client's `If-None-Match` gets a 304 from the
//! cache.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rush_proto::encode::{is_framing_header, status_has_no_body};
use rush_proto::response::{write_content_length, write_status_line};

use super::CachePolicy;

/// The most of a body that is recorded to fill a cache entry; a larger
/// answer is not stored.
pub const RECORD_LIMIT: usize = 16 * 1024 * 1024;

/// A header field as stored: name and value.
pub type Field = (Box<[u8]>, Box<[u8]>);

/// Where a recording stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Progress {
    /// Nothing sent yet.
    #[default]
    Empty,
    /// The head went out; body parts may follow.
    Head,
    /// The body ended.
    Complete,
    /// Something was sent that cannot be stored (or replayed).
    Unstorable,
}

/// A handler's answer as it went through the writer seam, recorded to fill
/// a cache entry (the writers call these as they frame it).
#[derive(Default, Debug)]
pub struct Recording {
    pub status: u16,
    /// The app's fields in order, the protocol's framing fields left out.
    pub fields: Vec<Field>,
    pub body: Vec<u8>,
    /// The body's length as the head announced it.
    declared: Option<u64>,
    progress: Progress,
    /// The policy of the route it fills (see [`Recording::etag_to_add`]).
    policy: Option<Arc<CachePolicy>>,
}

fn pairs<'f>(fields: impl Iterator<Item = (&'f [u8], &'f [u8])>) -> Vec<Field> {
    fields
        .filter(|(name, _)| !is_framing_header(name))
        .map(|(name, value)| (name.into(), value.into()))
        .collect()
}

impl Recording {
    /// A recording for a fill of a route with `policy`.
    pub fn for_fill(policy: Arc<CachePolicy>) -> Recording {
        Recording {
            policy: Some(policy),
            ..Recording::default()
        }
    }

    /// For a whole answer just recorded: the `ETag` the cache will add when
    /// it stores it, so a writer that cannot take its answer back (HTTP/2)
    /// sends it with the first answer too, as the hits will.
    pub fn etag_to_add(&self) -> Option<Box<[u8]>> {
        if self.progress != Progress::Complete {
            return None;
        }
        let policy = self.policy.as_deref()?;
        let stored = cacheable(policy, self, Instant::now(), 0)?;
        stored.etag_added.then_some(stored.etag)
    }

    /// A head went out (`ResponseWriter::send_head`); `declared`: the
    /// body's length as it announced it (0 for a bodyless status, `None`
    /// when it is sent in parts of unknown total length).
    pub fn head<'f>(
        &mut self,
        status: u16,
        declared: Option<u64>,
        head_only: bool,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        if status < 200 {
            // An interim answer (103 Early Hints): not part of the answer.
            return;
        }
        if self.progress != Progress::Empty || head_only || declared.is_none() {
            self.progress = Progress::Unstorable;
            return;
        }
        self.status = status;
        self.fields = pairs(fields);
        self.declared = declared;
        self.progress = Progress::Head;
    }

    /// A whole answer went out in one call (`ResponseWriter::send_whole`).
    pub fn whole<'f>(
        &mut self,
        status: u16,
        content_type: &[u8],
        body: &[u8],
        head_only: bool,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        if self.progress != Progress::Empty || head_only {
            self.progress = Progress::Unstorable;
            return;
        }
        self.status = status;
        self.fields.clear();
        if !content_type.is_empty() {
            self.fields
                .push((b"Content-Type"[..].into(), content_type.into()));
        }
        self.fields.extend(pairs(fields));
        self.body.clear();
        if !status_has_no_body(status) {
            self.body.extend_from_slice(body);
        }
        self.declared = Some(self.body.len() as u64);
        self.progress = Progress::Complete;
    }

    /// A part of the body went out.
    pub fn body(&mut self, data: &[u8]) {
        if self.progress != Progress::Head || self.body.len() + data.len() > RECORD_LIMIT {
            self.progress = Progress::Unstorable;
            return;
        }
        self.body.extend_from_slice(data);
    }

    /// The body ended; with trailers it is not stored (a hit could not
    /// carry them over HTTP/1.1).
    pub fn end(&mut self, trailers: bool) {
        match self.progress {
            Progress::Head if !trailers => self.progress = Progress::Complete,
            Progress::Complete if !trailers => {}
            _ => self.progress = Progress::Unstorable,
        }
    }

    /// A body that follows the head whole (shared bytes).
    pub fn shared(&mut self, data: &[u8]) {
        self.body(data);
        self.end(false);
    }

    /// Something that cannot be stored went out (a file body), or the
    /// answer was cut short.
    pub fn spoil(&mut self) {
        self.progress = Progress::Unstorable;
    }

    /// The answer so far was taken back (an error page replaces it).
    pub fn reset(&mut self) {
        let policy = self.policy.take();
        *self = Recording {
            policy,
            ..Recording::default()
        };
    }

    /// The recorded answer, if it is complete: every byte its head
    /// announced, nothing that cannot be replayed.
    pub fn finished(self) -> Option<Recording> {
        let complete = matches!(self.progress, Progress::Head | Progress::Complete)
            && self.declared == Some(self.body.len() as u64);
        complete.then_some(self)
    }

    /// An answer rendered as HTTP/1.1 bytes (the shared second level keeps
    /// answers that way): status line, fields, blank line, body. `None`
    /// when it is not one whole answer with a known length.
    pub fn from_http1(rendered: &[u8]) -> Option<Recording> {
        let head_end = memchr::memmem::find(rendered, b"\r\n\r\n")? + 2;
        let head = &rendered[..head_end];
        let status_line_end = memchr::memchr(b'\n', head)? + 1;
        let status: u16 = std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()?;
        let body = &rendered[head_end + 2..];
        let mut fields = Vec::new();
        let mut declared = None;
        for line in head[status_line_end..].split_inclusive(|&byte| byte == b'\n') {
            let colon = memchr::memchr(b':', line)?;
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                return None;
            }
            if name.eq_ignore_ascii_case(b"content-length") {
                declared = Some(std::str::from_utf8(value).ok()?.parse().ok()?);
                continue;
            }
            fields.push((name.into(), value.into()));
        }
        Recording {
            status,
            fields,
            body: body.to_vec(),
            declared: declared.or(Some(body.len() as u64)),
            progress: Progress::Complete,
            policy: None,
        }
        .finished()
    }
}

/// One stored answer.
pub struct Stored {
    pub status: u16,
    /// The answer's fields (with its `ETag`, made here if the handler set
    /// none), without `Date`, `Connection` and the framing fields.
    pub fields: Box<[Field]>,
    /// The fields of the 304 that answers a matching `If-None-Match`.
    pub not_modified_fields: Box<[Field]>,
    pub body: Arc<[u8]>,
    /// The HTTP/1.1 status line and fields (with `Content-Length`), each
    /// ending in CRLF, without `Date`, `Connection` and the blank line:
    /// what an HTTP/1.1 hit copies.
    pub http1_head: Box<[u8]>,
    /// The same for the 304; empty when the status is not 200.
    pub http1_not_modified_head: Box<[u8]>,
    /// The handler set its own `Server` field (the server's is left out).
    pub app_server: bool,
    /// The `ETag` value (with its quotes), to compare with `If-None-Match`.
    pub etag: Box<[u8]>,
    /// The `ETag` was made here (the handler's answer did not have one).
    pub etag_added: bool,
    /// The request fields the answer's `Vary` names (lowercase, sorted,
    /// each once); empty when it does not vary.
    pub vary: Box<[Box<[u8]>]>,
    pub stored_at: Instant,
    pub expires: Instant,
    /// Until when an expired answer may still be served while one refresh
    /// of it runs, or instead of a refresh that failed.
    pub stale_until: Instant,
    /// The invalidation generation it was stored under (`generations.rs`).
    pub generation: u64,
}

impl Stored {
    /// The bytes of the body a hit sends.
    pub fn weight(&self) -> usize {
        let fields: usize = self
            .fields
            .iter()
            .chain(self.not_modified_fields.iter())
            .map(|(name, value)| name.len() + value.len() + 16)
            .sum();
        fields + self.body.len() + self.http1_head.len() + self.http1_not_modified_head.len()
    }

    /// The answer as HTTP/1.1 bytes, for the shared second level (read
    /// back with [`Recording::from_http1`]).
    pub fn to_http1(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.http1_head.len() + 2 + self.body.len());
        bytes.extend_from_slice(&self.http1_head);
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Fields a 304 repeats from the 200 it stands for (RFC 9110, 15.4.5).
const NOT_MODIFIED_FIELDS: [&[u8]; 6] = [
    b"cache-control",
    b"content-location",
    b"expires",
    b"vary",
    b"last-modified",
    b"etag",
];

fn write_field(out: &mut Vec<u8>, (name, value): &Field) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Makes a recorded answer what is stored, if it may be.
pub fn cacheable(
    policy: &CachePolicy,
    recorded: &Recording,
    now: Instant,
    generation: u64,
) -> Option<Stored> {
    let status = recorded.status;
    if status == 206 || !policy.statuses.contains(&status) {
        return None;
    }
    let mut fields: Vec<Field> = Vec::with_capacity(recorded.fields.len() + 1);
    let mut etag: Option<Box<[u8]>> = None;
    let mut ttl = policy.ttl;
    let mut vary: Vec<Box<[u8]>> = Vec::new();
    let mut app_server = false;
    for (name, value) in &recorded.fields {
        let is = |field: &[u8]| name.eq_ignore_ascii_case(field);
        let value = value.trim_ascii();
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
        if is(b"date") || is(b"connection") || is_framing_header(name) {
            continue;
        }
        if is(b"etag") {
            etag = Some(value.into());
        }
        app_server |= is(b"server");
        fields.push((name.clone(), value.into()));
    }
    let body: Arc<[u8]> = recorded.body.as_slice().into();
    let etag_added = etag.is_none();
    let etag = etag.unwrap_or_else(|| {
        let value = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(&body));
        let value: Box<[u8]> = value.into_bytes().into_boxed_slice();
        fields.push((b"ETag"[..].into(), value.clone()));
        value
    });
    let not_modified_fields: Vec<Field> = if status == 200 {
        fields
            .iter()
            .filter(|(name, _)| {
                NOT_MODIFIED_FIELDS
                    .iter()
                    .any(|field| name.eq_ignore_ascii_case(field))
            })
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut http1_head = Vec::with_capacity(128);
    write_status_line(&mut http1_head, status);
    for field in &fields {
        write_field(&mut http1_head, field);
    }
    if !status_has_no_body(status) {
        write_content_length(&mut http1_head, body.len() as u64);
    }
    let mut http1_not_modified_head = Vec::new();
    if status == 200 {
        write_status_line(&mut http1_not_modified_head, 304);
        for field in &not_modified_fields {
            write_field(&mut http1_not_modified_head, field);
        }
    }
    vary.sort_unstable();
    vary.dedup();
    let expires = now + ttl;
    Some(Stored {
        status,
        fields: fields.into_boxed_slice(),
        not_modified_fields: not_modified_fields.into_boxed_slice(),
        body,
        http1_head: http1_head.into_boxed_slice(),
        http1_not_modified_head: http1_not_modified_head.into_boxed_slice(),
        app_server,
        etag,
        etag_added,
        vary: vary.into_boxed_slice(),
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

    fn store(rendered: &[u8]) -> Option<Stored> {
        let recorded = Recording::from_http1(rendered)?;
        cacheable(&policy(), &recorded, Instant::now(), 0)
    }

    #[test]
    fn what_is_stored_and_what_is_not() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nDate: x\r\nConnection: close\r\n\r\nhi";
        let stored = store(ok).unwrap();
        let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(b"hi"));
        assert_eq!(
            String::from_utf8_lossy(&stored.http1_head),
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: {etag}\r\nContent-Length: 2\r\n")
        );
        assert_eq!(&*stored.body, b"hi");
        assert_eq!(&*stored.etag, etag.as_bytes());
        assert_eq!(
            String::from_utf8_lossy(&stored.http1_not_modified_head),
            format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\n")
        );
        let names: Vec<&[u8]> = stored.fields.iter().map(|(name, _)| &name[..]).collect();
        assert_eq!(names, [&b"Content-Type"[..], b"ETag"]);
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
                store(response).is_none(),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
        for control in ["no-store", "private", "public, no-store", "no-cache"] {
            let response =
                format!("HTTP/1.1 200 OK\r\nCache-Control: {control}\r\nContent-Length: 0\r\n\r\n");
            assert!(store(response.as_bytes()).is_none(), "{control}");
        }
    }

    #[test]
    fn a_recording_is_stored_only_when_whole() {
        let fields = [(&b"Content-Type"[..], &b"text/plain"[..])];
        let mut recording = Recording::default();
        recording.head(200, Some(4), false, fields.iter().copied());
        recording.body(b"ab");
        assert!(Recording::default().finished().is_none());
        let mut cut_short = Recording::default();
        cut_short.head(200, Some(4), false, fields.iter().copied());
        cut_short.body(b"ab");
        cut_short.end(false);
        assert!(cut_short.finished().is_none(), "shorter than announced");
        recording.body(b"cd");
        let recording = recording.finished().expect("all four bytes");
        assert_eq!(recording.body, b"abcd");
        let mut streamed = Recording::default();
        streamed.head(200, None, false, fields.iter().copied());
        streamed.body(b"ab");
        streamed.end(false);
        assert!(streamed.finished().is_none(), "chunked is not stored");
        let mut file = Recording::default();
        file.whole(200, b"text/plain", b"", false, std::iter::empty());
        file.spoil();
        assert!(file.finished().is_none(), "a file body is not stored");
        let mut retried = Recording::default();
        retried.whole(200, b"text/plain", b"half", false, std::iter::empty());
        retried.reset();
        retried.whole(500, b"text/plain", b"error", false, std::iter::empty());
        assert_eq!(retried.finished().unwrap().status, 500);
        let mut hinted = Recording::default();
        hinted.head(103, Some(0), false, fields.iter().copied());
        hinted.whole(200, b"", b"x", false, std::iter::empty());
        assert_eq!(hinted.finished().unwrap().status, 200);
    }

    #[test]
    fn a_handlers_max_age_shortens_the_ttl_and_stale_follows_it() {
        let mut policy = policy();
        policy.stale = Duration::from_secs(30);
        let now = Instant::now();
        let recorded = Recording::from_http1(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
        let short = cacheable(&policy, &recorded, now, 0).unwrap();
        assert_eq!(short.expires, now + Duration::from_secs(5));
        assert_eq!(short.stale_until, now + Duration::from_secs(35));
        assert!(String::from_utf8_lossy(&short.http1_not_modified_head)
            .contains("Cache-Control: max-age=5\r\n"));
    }

    #[test]
    fn a_handlers_own_etag_is_kept() {
        let stored =
            store(b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 1\r\n\r\nx").unwrap();
        assert_eq!(&*stored.etag, b"\"v1\"");
        assert!(!stored.etag_added);
        assert_eq!(
            &*stored.http1_head,
            b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 1\r\n"
        );
        // What the shared level keeps reads back as the same answer.
        let again = Recording::from_http1(&stored.to_http1()).unwrap();
        assert_eq!(again.body, b"x");
        assert_eq!(again.fields.len(), 1);
    }

    #[test]
    fn the_fields_an_answer_varies_on_are_kept_once_in_order() {
        let stored = store(
            b"HTTP/1.1 200 OK\r\nVary: Origin, accept-encoding\r\nVary: ORIGIN\r\nContent-Length: 1\r\n\r\nx",
        )
        .unwrap();
        let names: Vec<&[u8]> = stored.vary.iter().map(|name| &name[..]).collect();
        assert_eq!(names, [&b"accept-encoding"[..], b"origin"]);
        assert!(String::from_utf8_lossy(&stored.http1_not_modified_head).contains("Vary: Origin"));
    }
}
