//! Answering one request from a resolved static file: conditional
//! requests (304), byte ranges (206/416), the encoding variant chosen by
//! `Accept-Encoding`, and the response head and body (copied, shared
//! memory, or `sendfile` from a cached fd). The lookup and the cache that
//! feed it live in the parent module.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::*;
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter, WholeResponse};
use crate::http_write::ResponseContext;
use crate::request::trim_whitespace as trim;

/// A file to answer with, and what its sender adds to the answer.
pub(crate) struct FileAnswer<'a> {
    pub file: &'a CachedFile,
    /// A static mount's `Cache-Control` value.
    pub cache_control: Option<&'a str>,
    /// Whole, already validated header lines (`Name: value\r\n`) to add.
    pub extra_lines: &'a [u8],
    /// An app's own status: other than 200, the whole file is sent under
    /// it, with no conditional or range answer.
    pub status: Option<u16>,
}

/// Serves one file, honouring conditional requests, ranges and encodings.
/// Used by static mounts, `Response.file` and ASGI's pathsend.
pub(crate) fn serve_file<W: ResponseWriter>(
    answer: FileAnswer<'_>,
    headers: &ConditionalHeaders<'_>,
    context: &ResponseContext<'_>,
    writer: &mut W,
) -> StaticOutcome {
    let FileAnswer {
        file,
        cache_control,
        extra_lines,
        status,
    } = answer;
    let whole_with = status.filter(|&status| status != 200);
    let variant = choose_variant(file, headers.accept_encoding);
    let varies = file.variants.len() > 1;
    // Declared before the fields that borrow it (a 206's range; empty
    // otherwise, which allocates nothing).
    let mut content_range = String::new();
    // The validators and the caller's lines, as fields in their wire order.
    let validators = [
        Some((&b"ETag"[..], variant.etag.as_bytes())),
        Some((&b"Last-Modified"[..], file.last_modified.as_bytes())),
        cache_control.map(|value| (&b"Cache-Control"[..], value.as_bytes())),
        varies.then_some((&b"Vary"[..], &b"Accept-Encoding"[..])),
    ];
    let validators = validators
        .into_iter()
        .flatten()
        .chain(header_lines(extra_lines));
    if whole_with.is_none() && not_modified(file, variant, headers) {
        let head = ResponseHead {
            status: 304,
            length: BodyLength::Empty,
            close: false,
            context: *context,
        };
        writer.send_head(&head, validators);
        writer.end_body(std::iter::empty());
        return StaticOutcome {
            status: 304,
            body_length: 0,
            body: None,
        };
    }
    let length = variant.length;
    let range = match headers.range {
        Some(range) if whole_with.is_none() && range_applies(file, variant, headers.if_range) => {
            parse_range(range, length)
        }
        _ => RangeRequest::Whole,
    };
    let (status, start, end) = match range {
        RangeRequest::Whole => (whole_with.unwrap_or(200), 0, length),
        RangeRequest::Satisfiable(start, end) => (206, start, end),
        RangeRequest::Unsatisfiable => {
            let content_range = format!("bytes */{length}");
            return write_plain(
                writer,
                416,
                b"Range Not Satisfiable",
                &[(b"Content-Range", content_range.as_bytes())],
                context,
            );
        }
    };
    if status == 206 {
        content_range = format!("bytes {}-{}/{length}", start, end - 1);
    }
    let fields = std::iter::once((&b"Content-Type"[..], file.content_type.as_bytes()))
        .chain(validators)
        .chain(std::iter::once((&b"Accept-Ranges"[..], &b"bytes"[..])))
        .chain(
            variant
                .encoding
                .map(|encoding| (&b"Content-Encoding"[..], encoding.as_bytes())),
        )
        .chain((status == 206).then_some((&b"Content-Range"[..], content_range.as_bytes())));
    let head = ResponseHead {
        status,
        length: BodyLength::Known(end - start),
        close: false,
        context: *context,
    };
    writer.send_head(&head, fields);
    let mut outcome = StaticOutcome {
        status,
        body_length: end - start,
        body: None,
    };
    if context.head_only || start == end {
        writer.end_body(std::iter::empty());
        return outcome;
    }
    if let Some(data) = &variant.body {
        let (start, end) = (start as usize, end as usize);
        if end - start <= INLINE_BODY_LIMIT {
            writer.send_body(&data[start..end]);
        } else {
            outcome.body = Some(OutgoingBody::Shared {
                data: data.clone(),
                offset: start,
                end,
            });
        }
    } else if let Some(handle) = &variant.file {
        outcome.body = Some(OutgoingBody::File {
            file: handle.clone(),
            offset: start,
            end,
        });
    } else if let Ok(handle) = File::open(&variant.path) {
        outcome.body = Some(OutgoingBody::File {
            file: Rc::new(handle),
            offset: start,
            end,
        });
    }
    outcome
}

/// Loads a file an ASGI app sends with `http.response.pathsend`, under the
/// validators the app sent with it (when it did), so that conditional and
/// range requests are judged by what the client was told.
pub fn load_app_file(
    path: &Path,
    content_type: Option<&str>,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> io::Result<Rc<CachedFile>> {
    let mut file = load_single_file(path, content_type)?;
    let loaded = Rc::get_mut(&mut file).expect("not shared yet");
    if let Some(etag) = etag {
        loaded.variants[0].etag = etag.trim().to_owned();
    }
    let modified = last_modified.and_then(|text| {
        let time = httpdate::parse_http_date(text.trim()).ok()?;
        Some((text.trim(), time.duration_since(UNIX_EPOCH).ok()?.as_secs()))
    });
    if let Some((text, seconds)) = modified {
        loaded.last_modified = text.to_owned();
        loaded.modified_seconds = seconds;
    }
    Ok(file)
}

/// Loads a single file for `Response.file` (not cached: handlers decide per request).
pub fn load_single_file(path: &Path, content_type: Option<&str>) -> io::Result<Rc<CachedFile>> {
    let spec = MountSpec {
        prefix: String::new(),
        root: PathBuf::new(),
        cache_mode: CacheMode::Filesystem,
        max_file_size: 0,
        max_cache_size: 0,
        cache_control: None,
        dotfiles: true,
        allow_symlinks_outside: true,
    };
    let (variant, modified) = load_variant(&spec, path, None, 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file not found"))?;
    Ok(Rc::new(CachedFile {
        content_type: content_type
            .map(str::to_owned)
            .unwrap_or_else(|| content_type_for(path)),
        last_modified: httpdate::fmt_http_date(modified),
        modified_seconds: modified
            .duration_since(UNIX_EPOCH)
            .map(|duration| duration.as_secs())
            .unwrap_or(0),
        variants: vec![variant],
    }))
}

pub(super) fn choose_variant<'f>(
    file: &'f CachedFile,
    accept_encoding: Option<&[u8]>,
) -> &'f Variant {
    let identity = &file.variants[0];
    let Some(accept) = accept_encoding else {
        return identity;
    };
    for preferred in ["br", "gzip"] {
        if accepts_encoding(accept, preferred.as_bytes()) {
            if let Some(variant) = file
                .variants
                .iter()
                .find(|variant| variant.encoding == Some(preferred))
            {
                return variant;
            }
        }
    }
    identity
}

/// Whether an `Accept-Encoding` value accepts `coding` (with a q-value above 0).
pub(super) fn accepts_encoding(accept: &[u8], coding: &[u8]) -> bool {
    let mut wildcard = false;
    for item in accept.split(|&byte| byte == b',') {
        let mut parts = item.split(|&byte| byte == b';');
        let name = trim(parts.next().unwrap_or_default());
        let mut quality_zero = false;
        for parameter in parts {
            let parameter = trim(parameter);
            if let Some(value) = parameter
                .strip_prefix(b"q=")
                .or_else(|| parameter.strip_prefix(b"Q="))
            {
                let value = trim(value);
                quality_zero = value.iter().all(|&byte| matches!(byte, b'0' | b'.'));
            }
        }
        if name.eq_ignore_ascii_case(coding) {
            return !quality_zero;
        }
        if name == b"*" {
            wildcard = !quality_zero;
        }
    }
    wildcard
}

/// RFC 9110 13.2.2: If-None-Match decides when present; otherwise If-Modified-Since.
pub(super) fn not_modified(
    file: &CachedFile,
    variant: &Variant,
    headers: &ConditionalHeaders<'_>,
) -> bool {
    if let Some(candidates) = headers.if_none_match {
        return etag_list_matches(candidates, variant.etag.as_bytes());
    }
    if let Some(since) = headers.if_modified_since {
        if let Some(since) = std::str::from_utf8(since)
            .ok()
            .and_then(|text| httpdate::parse_http_date(text.trim()).ok())
        {
            let since = since
                .duration_since(UNIX_EPOCH)
                .map(|duration| duration.as_secs())
                .unwrap_or(0);
            return file.modified_seconds <= since;
        }
    }
    false
}

/// Weak comparison (RFC 9110 8.8.3.2) of an If-None-Match list against our
/// tag: the opaque tags match, whichever of the two is weak.
pub(crate) fn etag_list_matches(candidates: &[u8], etag: &[u8]) -> bool {
    let candidates = trim(candidates);
    if candidates == b"*" {
        return true;
    }
    fn opaque(tag: &[u8]) -> &[u8] {
        tag.strip_prefix(b"W/").unwrap_or(tag)
    }
    let etag = opaque(trim(etag));
    candidates
        .split(|&byte| byte == b',')
        .any(|candidate| opaque(trim(candidate)) == etag)
}

/// If-Range: the range applies only if the validator still matches (strongly).
pub(super) fn range_applies(file: &CachedFile, variant: &Variant, if_range: Option<&[u8]>) -> bool {
    match if_range.map(trim) {
        None => true,
        Some(value) if value.starts_with(b"\"") => value == variant.etag.as_bytes(),
        Some(value) => value == file.last_modified.as_bytes(),
    }
}

pub(super) enum RangeRequest {
    Whole,
    /// Half-open byte interval `[start, end)`.
    Satisfiable(u64, u64),
    Unsatisfiable,
}

/// Parses a single `bytes=` range. Several ranges or an invalid header mean
/// the whole representation (RFC 9110 14.2 allows ignoring Range).
pub(super) fn parse_range(value: &[u8], length: u64) -> RangeRequest {
    let Some(spec) = trim(value).strip_prefix(b"bytes=") else {
        return RangeRequest::Whole;
    };
    if spec.contains(&b',') {
        return RangeRequest::Whole;
    }
    let Some(dash) = spec.iter().position(|&byte| byte == b'-') else {
        return RangeRequest::Whole;
    };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    let number = |digits: &[u8]| -> Option<u64> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    if first.is_empty() {
        // Suffix range: the last N bytes.
        let Some(suffix) = number(last) else {
            return RangeRequest::Whole;
        };
        if suffix == 0 || length == 0 {
            return RangeRequest::Unsatisfiable;
        }
        return RangeRequest::Satisfiable(length.saturating_sub(suffix), length);
    }
    let Some(start) = number(first) else {
        return RangeRequest::Whole;
    };
    let end = if last.is_empty() {
        length
    } else {
        match number(last) {
            Some(last) if last >= start => last.saturating_add(1).min(length),
            _ => return RangeRequest::Whole,
        }
    };
    if start >= length {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Satisfiable(start, end)
}

/// A short text/plain answer (errors, redirects), with extra header fields.
pub(super) fn write_plain<W: ResponseWriter>(
    writer: &mut W,
    status: u16,
    body: &[u8],
    extra: &[(&[u8], &[u8])],
    context: &ResponseContext<'_>,
) -> StaticOutcome {
    let response = WholeResponse {
        status,
        content_type: if body.is_empty() {
            b""
        } else {
            b"text/plain; charset=utf-8"
        },
        body,
        close: false,
        context,
    };
    writer.send_whole(&response, extra.iter().map(|(name, value)| (*name, *value)));
    StaticOutcome {
        status,
        body_length: body.len() as u64,
        body: None,
    }
}

/// Whole header lines (`Name: value\r\n`, built and validated by the
/// caller) as fields, without copying.
fn header_lines(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines.split(|&byte| byte == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&byte| byte == b':')?;
        let value = &line[colon + 1..];
        Some((&line[..colon], value.strip_prefix(b" ").unwrap_or(value)))
    })
}
