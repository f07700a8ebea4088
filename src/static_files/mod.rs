//! Static files, served entirely in Rust: no GIL, no Python objects.
//!
//! A mount maps a URL prefix to a directory. For each request path the
//! mount resolves once what it names (a file with its variants, a directory,
//! or nothing) and caches the answer with its precomputed header block:
//!
//! * `memory` mode keeps bodies up to a per-file limit (and a total budget)
//!   in memory; `filesystem` mode keeps only metadata and an open fd, and
//!   bodies go out with `sendfile` from the page cache.
//! * The cache of a mount is dropped whenever inotify reports any change
//!   under its directory (a write, a rename over a file, a create, a
//!   delete), so the next request sees the disk as it is, without a restart.
//!   Entries are re-resolved lazily; a burst of changes costs nothing more.
//!
//! Safety comes first in resolution: percent-encoded separators, NUL,
//! backslashes, `.` and `..` segments are refused before touching the disk,
//! dotfiles are hidden unless enabled, and a file whose real path (after
//! symlinks) leaves the mounted directory is refused unless allowed. Error
//! answers never reveal file-system paths.
//!
//! HTTP semantics follow RFC 9110: `ETag`/`Last-Modified` with 304 for
//! `If-None-Match`/`If-Modified-Since`, single byte ranges (206/416) with
//! `If-Range`, and precompressed `.br`/`.gz` siblings chosen by
//! `Accept-Encoding` with `Vary: Accept-Encoding`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

mod serve;

pub(crate) use serve::etag_list_matches;
use serve::write_plain;
#[cfg(test)]
use serve::*;
pub use serve::{load_app_file, load_single_file};
pub(crate) use serve::{serve_file, FileAnswer};

use crate::exchange::ResponseWriter;
pub use crate::http_write::OutgoingBody;
use crate::http_write::ResponseContext;

/// Bodies up to this size are copied into the output buffer (so pipelined
/// responses still leave in one write); larger ones go out as a separate
/// body segment without copying.
pub const INLINE_BODY_LIMIT: usize = 16 * 1024;
/// A mount's cache is dropped when it holds more entries than this, so
/// requests for random missing paths cannot grow memory without bound.
const MAX_CACHE_ENTRIES: usize = 20_000;
/// Most directories watched per mount; a larger tree is served uncached.
const MAX_WATCHED_DIRECTORIES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    Memory,
    Filesystem,
}

/// A mount as the app declared it (see `App.static`).
#[derive(Clone, Debug)]
pub struct MountSpec {
    pub prefix: String,
    pub root: PathBuf,
    pub cache_mode: CacheMode,
    pub max_file_size: u64,
    pub max_cache_size: u64,
    pub cache_control: Option<String>,
    pub dotfiles: bool,
    pub allow_symlinks_outside: bool,
}

/// One representation of a file: the file itself or a precompressed sibling.
struct Variant {
    /// `None` for the file itself; `Some("br")` or `Some("gzip")` for a sibling.
    encoding: Option<&'static str>,
    length: u64,
    etag: String,
    body: Option<Arc<[u8]>>,
    file: Option<Rc<File>>,
    path: PathBuf,
}

pub struct CachedFile {
    content_type: String,
    last_modified: String,
    modified_seconds: u64,
    /// The identity variant first.
    variants: Vec<Variant>,
}

enum Entry {
    File(Rc<CachedFile>),
    /// A directory requested without its trailing slash: redirect.
    Directory,
    Missing,
    /// Exists but may not be served (a symlink out of the mount).
    Forbidden,
}

struct Mount {
    spec: MountSpec,
    cache: HashMap<String, Entry>,
    cached_bytes: u64,
    /// Caching is on only while inotify watches the whole tree.
    caching: bool,
    /// The watch on the mount's root directory itself.
    root_watch: Option<WatchDescriptor>,
    /// The root was replaced or removed (a deploy), or events were lost:
    /// served uncached until the tree is watched again (retried by
    /// [`StaticFiles::rewatch_lost_mounts`]).
    rewatch: bool,
}

/// The request header fields static serving looks at.
#[derive(Default)]
pub struct ConditionalHeaders<'a> {
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    pub accept_encoding: Option<&'a [u8]>,
}

impl<'a> ConditionalHeaders<'a> {
    pub fn from_fields(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        let mut headers = ConditionalHeaders::default();
        for (name, value) in fields {
            let slot = if name.eq_ignore_ascii_case(b"if-none-match") {
                &mut headers.if_none_match
            } else if name.eq_ignore_ascii_case(b"if-modified-since") {
                &mut headers.if_modified_since
            } else if name.eq_ignore_ascii_case(b"range") {
                &mut headers.range
            } else if name.eq_ignore_ascii_case(b"if-range") {
                &mut headers.if_range
            } else if name.eq_ignore_ascii_case(b"accept-encoding") {
                &mut headers.accept_encoding
            } else {
                continue;
            };
            slot.get_or_insert(value);
        }
        headers
    }

    /// The fields that still count for a request of this method: a 304 is
    /// an answer to a GET or HEAD only (RFC 9110 13.1.2; another method's
    /// matching If-None-Match would be a 412, which rush leaves to the app
    /// as Starlette does), and a range is defined for GET alone (14.2;
    /// HEAD's answer mirrors GET's). Any other method gets the whole file.
    pub fn for_method(self, method: &[u8]) -> Self {
        if method == b"GET" || method == b"HEAD" {
            return self;
        }
        ConditionalHeaders {
            accept_encoding: self.accept_encoding,
            ..ConditionalHeaders::default()
        }
    }
}

/// A request under a static mount, as the mount reads it.
pub(crate) struct MountRequest<'a> {
    /// The raw path after the mount's prefix.
    pub rest: &'a [u8],
    /// The whole raw path (a directory's redirect keeps it).
    pub raw_path: &'a [u8],
    pub query: Option<&'a [u8]>,
    /// Only GET and HEAD are served; anything else gets 405.
    pub is_get_or_head: bool,
    /// Its conditional, range and encoding fields.
    pub conditional: &'a ConditionalHeaders<'a>,
}

/// What a static lookup wrote, for the access log and the connection.
pub struct StaticOutcome {
    pub status: u16,
    pub body_length: u64,
    pub body: Option<OutgoingBody>,
}

/// Every mount of a worker, and the inotify instance that keeps them fresh.
pub struct StaticFiles {
    mounts: Vec<Mount>,
    inotify: Option<Inotify>,
    watched: HashMap<WatchDescriptor, usize>,
    event_buffer: Vec<u8>,
}

const WATCH_MASK: WatchMask = WatchMask::MODIFY
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MOVE_SELF);

impl StaticFiles {
    /// Sets up the mounts; `warn` reports a mount that must run uncached.
    pub fn new(specs: Vec<MountSpec>, mut warn: impl FnMut(String)) -> StaticFiles {
        let mut mounts: Vec<Mount> = specs
            .into_iter()
            .map(|spec| Mount {
                spec,
                cache: HashMap::new(),
                cached_bytes: 0,
                caching: false,
                root_watch: None,
                rewatch: false,
            })
            .collect();
        // Longest prefix first, so `/static/img` wins over `/static` and `/`.
        mounts.sort_by_key(|mount| std::cmp::Reverse(mount.spec.prefix.len()));
        let mut static_files = StaticFiles {
            mounts,
            inotify: None,
            watched: HashMap::new(),
            event_buffer: vec![0; 16 * 1024],
        };
        if static_files.mounts.is_empty() {
            return static_files;
        }
        match Inotify::init() {
            Ok(inotify) => static_files.inotify = Some(inotify),
            Err(error) => {
                warn(format!(
                    "inotify unavailable ({error}); static files are served uncached"
                ));
                return static_files;
            }
        }
        for index in 0..static_files.mounts.len() {
            let root = static_files.mounts[index].spec.root.clone();
            match static_files.watch_tree(index, &root) {
                Ok(()) => static_files.mounts[index].caching = true,
                Err(error) => warn(format!(
                    "cannot watch static directory of mount {:?} ({error}); it is served uncached",
                    static_files.mounts[index].spec.prefix
                )),
            }
        }
        static_files
    }

    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    /// The inotify fd to register with the loop, if any.
    pub fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.inotify.as_ref().map(|inotify| inotify.as_raw_fd())
    }

    fn watch_tree(&mut self, mount: usize, root: &Path) -> io::Result<()> {
        if let Some(inotify) = &mut self.inotify {
            let descriptor = inotify.watches().add(root, WATCH_MASK)?;
            self.mounts[mount].root_watch = Some(descriptor);
        }
        let mut pending = vec![root.to_path_buf()];
        let mut count = 0;
        while let Some(directory) = pending.pop() {
            count += 1;
            if count > MAX_WATCHED_DIRECTORIES {
                return Err(io::Error::other("too many directories to watch"));
            }
            self.watch_directory(mount, &directory)?;
            for entry in std::fs::read_dir(&directory)? {
                let entry = entry?;
                // file_type() does not follow symlinks: linked directories are not watched.
                if entry.file_type()?.is_dir() {
                    pending.push(entry.path());
                }
            }
        }
        Ok(())
    }

    fn watch_directory(&mut self, mount: usize, directory: &Path) -> io::Result<()> {
        let Some(inotify) = &mut self.inotify else {
            return Ok(());
        };
        let descriptor = inotify.watches().add(directory, WATCH_MASK)?;
        self.watched.insert(descriptor, mount);
        Ok(())
    }

    /// Reads pending inotify events and drops the caches they concern.
    pub fn handle_file_events(&mut self) {
        loop {
            let Some(inotify) = &mut self.inotify else {
                return;
            };
            let events = match inotify.read_events(&mut self.event_buffer) {
                Ok(events) => events,
                Err(_) => return, // WouldBlock: drained.
            };
            let mut invalidated = Vec::new();
            let mut grown = Vec::new();
            let mut lost = Vec::new();
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    // Events were dropped: nothing cached can be trusted,
                    // and directories created meanwhile are not watched.
                    lost.extend(0..self.mounts.len());
                    continue;
                }
                let Some(&mount) = self.watched.get(&event.wd) else {
                    continue;
                };
                invalidated.push(mount);
                let root_went_away = self.mounts[mount].root_watch.as_ref() == Some(&event.wd)
                    && event.mask.intersects(
                        EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                    );
                if root_went_away {
                    // `rm -rf root && cp -r new root`, or `mv root old &&
                    // mv new root`: the watches follow the old tree.
                    lost.push(mount);
                }
                if event.mask.contains(EventMask::ISDIR)
                    && event
                        .mask
                        .intersects(EventMask::CREATE | EventMask::MOVED_TO)
                {
                    grown.push(mount);
                }
                if event.mask.contains(EventMask::IGNORED) {
                    self.watched.remove(&event.wd);
                }
            }
            for mount in invalidated {
                self.clear(mount);
            }
            lost.sort_unstable();
            lost.dedup();
            for mount in lost {
                self.forget_watches(mount);
            }
            for mount in grown {
                // A directory appeared: watch it (and anything moved in with it).
                // Re-walking the mount is simple and safe, since watching a
                // directory twice returns its existing descriptor.
                let root = self.mounts[mount].spec.root.clone();
                if self.watch_tree(mount, &root).is_err() {
                    self.mounts[mount].caching = false;
                    self.clear(mount);
                }
            }
        }
    }

    /// Drops every watch of a mount whose tree can no longer be trusted and
    /// serves it uncached until [`StaticFiles::rewatch_lost_mounts`] watches
    /// the tree at its path again.
    fn forget_watches(&mut self, mount: usize) {
        let descriptors: Vec<WatchDescriptor> = self
            .watched
            .iter()
            .filter(|&(_, &owner)| owner == mount)
            .map(|(descriptor, _)| descriptor.clone())
            .collect();
        for descriptor in descriptors {
            self.watched.remove(&descriptor);
            if let Some(inotify) = &mut self.inotify {
                // Already gone with its directory, at worst.
                let _ = inotify.watches().remove(descriptor);
            }
        }
        let state = &mut self.mounts[mount];
        state.root_watch = None;
        state.caching = false;
        state.rewatch = true;
        self.clear(mount);
        self.rewatch_lost_mounts();
    }

    /// Watches again the trees of mounts whose root was replaced (called
    /// after events and once a second by the loop): caching resumes once
    /// the directory at the mount's path is watched whole.
    pub fn rewatch_lost_mounts(&mut self) {
        for mount in 0..self.mounts.len() {
            if !self.mounts[mount].rewatch {
                continue;
            }
            let root = self.mounts[mount].spec.root.clone();
            if self.watch_tree(mount, &root).is_ok() {
                let state = &mut self.mounts[mount];
                state.rewatch = false;
                state.caching = true;
            }
            self.clear(mount);
        }
    }

    fn clear(&mut self, mount: usize) {
        let mount = &mut self.mounts[mount];
        mount.cache.clear();
        mount.cached_bytes = 0;
    }

    /// Which mount serves `raw_path` (still percent-encoded), and the rest of the path.
    pub fn find_mount<'p>(&self, raw_path: &'p [u8]) -> Option<(usize, &'p [u8])> {
        self.mounts.iter().enumerate().find_map(|(index, mount)| {
            let prefix = mount.spec.prefix.as_bytes();
            let rest = raw_path.strip_prefix(prefix)?;
            if prefix.ends_with(b"/") || rest.is_empty() || rest.starts_with(b"/") {
                Some((index, rest))
            } else {
                None
            }
        })
    }

    /// Answers a request under mount `mount`. Writes the head (and small
    /// bodies) to `out`.
    pub(crate) fn respond<W: ResponseWriter>(
        &mut self,
        mount: usize,
        request: MountRequest<'_>,
        context: &ResponseContext<'_>,
        out: &mut W,
    ) -> StaticOutcome {
        let MountRequest {
            rest,
            raw_path,
            query,
            is_get_or_head,
            ..
        } = request;
        if !is_get_or_head {
            return write_plain(
                out,
                405,
                b"Method Not Allowed",
                &[(b"Allow", b"GET, HEAD")],
                context,
            );
        }
        let Some(relative) = safe_relative_path(rest, self.mounts[mount].spec.dotfiles) else {
            return write_plain(out, 404, b"Not Found", &[], context);
        };
        let trailing_slash = raw_path.ends_with(b"/");
        let key = relative.join("/") + if trailing_slash { "/" } else { "" };
        let entry = self.lookup(mount, &key, &relative, trailing_slash);
        match entry {
            LookupResult::Missing => write_plain(out, 404, b"Not Found", &[], context),
            LookupResult::Forbidden => write_plain(out, 403, b"Forbidden", &[], context),
            LookupResult::Directory => {
                // Leading slashes collapse to one: `//evil.example` must not
                // become the scheme-relative `//evil.example/`, which a
                // browser follows to another host.
                let mut location = b"/".to_vec();
                location.extend_from_slice(without_leading_slashes(raw_path));
                location.push(b'/');
                if let Some(query) = query {
                    location.push(b'?');
                    location.extend_from_slice(query);
                }
                write_plain(out, 301, b"", &[(b"Location", &location)], context)
            }
            LookupResult::File(file) => {
                let cache_control = self.mounts[mount].spec.cache_control.clone();
                let answer = FileAnswer {
                    file: &file,
                    cache_control: cache_control.as_deref(),
                    extra_lines: b"",
                    status: None,
                };
                serve_file(answer, request.conditional, context, out)
            }
        }
    }

    fn lookup(
        &mut self,
        mount_index: usize,
        key: &str,
        relative: &[String],
        trailing_slash: bool,
    ) -> LookupResult {
        let mount = &self.mounts[mount_index];
        if mount.caching {
            if let Some(entry) = mount.cache.get(key) {
                crate::metrics::count(crate::metrics::Counter::StaticHits, 1);
                return LookupResult::from_entry(entry);
            }
        }
        crate::metrics::count(crate::metrics::Counter::StaticMisses, 1);
        let entry = resolve(&mount.spec, relative, trailing_slash, mount.cached_bytes);
        let result = LookupResult::from_entry(&entry);
        let mount = &mut self.mounts[mount_index];
        if mount.caching {
            if mount.cache.len() >= MAX_CACHE_ENTRIES {
                mount.cache.clear();
                mount.cached_bytes = 0;
            }
            if let Entry::File(file) = &entry {
                mount.cached_bytes += file
                    .variants
                    .iter()
                    .filter_map(|variant| variant.body.as_ref().map(|body| body.len() as u64))
                    .sum::<u64>();
            }
            mount.cache.insert(key.to_owned(), entry);
        }
        result
    }
}

enum LookupResult {
    File(Rc<CachedFile>),
    Directory,
    Missing,
    Forbidden,
}

impl LookupResult {
    fn from_entry(entry: &Entry) -> LookupResult {
        match entry {
            Entry::File(file) => LookupResult::File(file.clone()),
            Entry::Directory => LookupResult::Directory,
            Entry::Missing => LookupResult::Missing,
            Entry::Forbidden => LookupResult::Forbidden,
        }
    }
}

/// Splits the percent-encoded path after a mount prefix into decoded
/// segments, refusing anything that could leave the mount or is hidden.
fn safe_relative_path(rest: &[u8], dotfiles: bool) -> Option<Vec<String>> {
    let mut segments = Vec::new();
    for raw_segment in rest.split(|&byte| byte == b'/') {
        if raw_segment.is_empty() {
            continue;
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode(raw_segment).collect();
        // An encoded separator or NUL inside a segment is never a real file name here.
        if decoded.iter().any(|&byte| matches!(byte, b'/' | b'\\' | 0)) {
            return None;
        }
        let segment = String::from_utf8(decoded).ok()?;
        if segment == "." || segment == ".." {
            return None;
        }
        if segment.starts_with('.') && !dotfiles {
            return None;
        }
        segments.push(segment);
    }
    Some(segments)
}

/// Looks at the disk for what `relative` names under the mount.
fn resolve(
    spec: &MountSpec,
    relative: &[String],
    trailing_slash: bool,
    cached_bytes: u64,
) -> Entry {
    let mut path = spec.root.clone();
    for segment in relative {
        path.push(segment);
    }
    let Ok(metadata) = std::fs::metadata(&path) else {
        return Entry::Missing;
    };
    if metadata.is_dir() {
        if !trailing_slash {
            return Entry::Directory;
        }
        path.push("index.html");
    } else if trailing_slash {
        // `/file.txt/` names no directory.
        return Entry::Missing;
    }
    if !spec.allow_symlinks_outside {
        match path.canonicalize() {
            Ok(real) if real.starts_with(&spec.root) => {}
            Ok(_) => return Entry::Forbidden,
            Err(_) => return Entry::Missing,
        }
    }
    match load_file(spec, &path, cached_bytes) {
        Some(file) => Entry::File(Rc::new(file)),
        None => Entry::Missing,
    }
}

/// Opens a file and its precompressed siblings, with their headers' values.
fn load_file(spec: &MountSpec, path: &Path, cached_bytes: u64) -> Option<CachedFile> {
    let (identity, modified) = load_variant(spec, path, None, cached_bytes)?;
    let modified_seconds = modified
        .duration_since(UNIX_EPOCH)
        .map(|duration| duration.as_secs())
        .unwrap_or(0);
    let mut variants = vec![identity];
    for (suffix, encoding) in [("br", "br"), ("gz", "gzip")] {
        let mut sibling = path.as_os_str().to_owned();
        sibling.push(".");
        sibling.push(suffix);
        let budget_used = cached_bytes + variants.iter().map(|variant| variant.length).sum::<u64>();
        if let Some((variant, _)) =
            load_variant(spec, Path::new(&sibling), Some(encoding), budget_used)
        {
            variants.push(variant);
        }
    }
    Some(CachedFile {
        content_type: content_type_for(path),
        last_modified: httpdate::fmt_http_date(modified),
        modified_seconds,
        variants,
    })
}

fn load_variant(
    spec: &MountSpec,
    path: &Path,
    encoding: Option<&'static str>,
    cached_bytes: u64,
) -> Option<(Variant, SystemTime)> {
    let mut file = open_contained(spec, path)?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() {
        return None;
    }
    let length = metadata.len();
    let modified = clamp_to_http_date_range(metadata.modified().unwrap_or(UNIX_EPOCH));
    let modified_seconds = modified
        .duration_since(UNIX_EPOCH)
        .map(|duration| duration.as_secs())
        .unwrap_or(0);
    // Weak validators would forbid ranges; mtime + size is what nginx uses too.
    let etag = match encoding {
        None => format!("\"{modified_seconds:x}-{length:x}\""),
        Some(encoding) => format!("\"{modified_seconds:x}-{length:x}-{encoding}\""),
    };
    let in_memory = spec.cache_mode == CacheMode::Memory
        && length <= spec.max_file_size
        && cached_bytes + length <= spec.max_cache_size;
    let mut variant = Variant {
        encoding,
        length,
        etag,
        body: None,
        file: None,
        path: path.to_path_buf(),
    };
    if in_memory {
        let mut body = Vec::with_capacity(length as usize);
        file.read_to_end(&mut body).ok()?;
        // The file changed between stat and read: serve what was read,
        // consistently (inotify will drop this entry right away anyway).
        variant.length = body.len() as u64;
        variant.body = Some(body.into());
    } else {
        variant.file = Some(Rc::new(file));
    }
    Some((variant, modified))
}

/// `raw_path` after its leading slashes.
fn without_leading_slashes(raw_path: &[u8]) -> &[u8] {
    let start = raw_path
        .iter()
        .position(|&byte| byte != b'/')
        .unwrap_or(raw_path.len());
    &raw_path[start..]
}

/// Opens a file of the mount, refusing (None) one whose real path, once
/// open, lies outside the mount's root (a symlink leading out) unless the
/// mount allows that. The check is on the open descriptor itself, so a
/// symlink swapped in after a path check cannot slip through, and it
/// applies to every file served: the precompressed `.br`/`.gz` siblings
/// as much as the file asked for.
fn open_contained(spec: &MountSpec, path: &Path) -> Option<File> {
    let file = File::open(path).ok()?;
    if spec.allow_symlinks_outside {
        return Some(file);
    }
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    real.starts_with(&spec.root).then_some(file)
}

/// HTTP dates cover 1970 to 9999 (httpdate panics outside them); a file
/// dated otherwise (a touched `-d 1960` file, a clock gone wrong) is
/// served with the nearest representable date.
fn clamp_to_http_date_range(modified: SystemTime) -> SystemTime {
    const LAST_HTTP_DATE: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let latest = UNIX_EPOCH + std::time::Duration::from_secs(LAST_HTTP_DATE);
    modified.clamp(UNIX_EPOCH, latest)
}

fn content_type_for(path: &Path) -> String {
    let guess = mime_guess::from_path(path).first_or_octet_stream();
    let essence = guess.essence_str();
    let textual = guess.type_() == mime_guess::mime::TEXT
        || matches!(
            essence,
            "application/javascript" | "application/json" | "image/svg+xml" | "application/xml"
        );
    if textual {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(matches!(
            parse_range(b"bytes=0-9", 100),
            RangeRequest::Satisfiable(0, 10)
        ));
        assert!(matches!(
            parse_range(b"bytes=90-", 100),
            RangeRequest::Satisfiable(90, 100)
        ));
        assert!(matches!(
            parse_range(b"bytes=-10", 100),
            RangeRequest::Satisfiable(90, 100)
        ));
        assert!(matches!(
            parse_range(b"bytes=50-500", 100),
            RangeRequest::Satisfiable(50, 100)
        ));
        assert!(matches!(
            parse_range(b"bytes=100-", 100),
            RangeRequest::Unsatisfiable
        ));
        assert!(matches!(
            parse_range(b"bytes=-0", 100),
            RangeRequest::Unsatisfiable
        ));
        assert!(matches!(
            parse_range(b"bytes=0-1,5-6", 100),
            RangeRequest::Whole
        ));
        assert!(matches!(
            parse_range(b"bytes=9-1", 100),
            RangeRequest::Whole
        ));
        assert!(matches!(
            parse_range(b"items=0-1", 100),
            RangeRequest::Whole
        ));
        assert!(matches!(
            parse_range(b"bytes=x-1", 100),
            RangeRequest::Whole
        ));
    }

    #[test]
    fn encodings() {
        assert!(accepts_encoding(b"gzip, deflate, br", b"br"));
        assert!(accepts_encoding(b"gzip;q=0.5", b"gzip"));
        assert!(!accepts_encoding(b"gzip;q=0", b"gzip"));
        assert!(!accepts_encoding(b"br;q=0.0, gzip", b"br"));
        assert!(accepts_encoding(b"*", b"br"));
        assert!(!accepts_encoding(b"identity", b"gzip"));
    }

    #[test]
    fn redirect_locations_lose_their_leading_slashes() {
        assert_eq!(without_leading_slashes(b"//evil.example"), b"evil.example");
        assert_eq!(without_leading_slashes(b"/docs"), b"docs");
        assert_eq!(without_leading_slashes(b"///"), b"");
    }

    #[test]
    fn relative_paths() {
        let path = |raw: &[u8]| safe_relative_path(raw, false);
        assert_eq!(path(b"/a/b.css"), Some(vec!["a".into(), "b.css".into()]));
        assert_eq!(path(b"/a%20b"), Some(vec!["a b".into()]));
        assert_eq!(path(b"/../etc/passwd"), None);
        assert_eq!(path(b"/%2e%2e/etc/passwd"), None);
        assert_eq!(path(b"/a%2f..%2f..%2fetc"), None);
        assert_eq!(path(b"/a%5c..%5cb"), None);
        assert_eq!(path(b"/a%00b"), None);
        assert_eq!(path(b"/.env"), None);
        assert_eq!(
            safe_relative_path(b"/.env", true),
            Some(vec![".env".into()])
        );
    }

    #[test]
    fn etags() {
        assert!(etag_list_matches(b"\"a\", \"b\"", b"\"b\""));
        assert!(etag_list_matches(b"W/\"b\"", b"\"b\""));
        assert!(etag_list_matches(b"*", b"\"b\""));
        assert!(!etag_list_matches(b"\"c\"", b"\"b\""));
        // An app's weak tag matches itself, weak or not, and nothing else.
        assert!(etag_list_matches(b"W/\"v1\"", b"W/\"v1\""));
        assert!(etag_list_matches(b"\"v1\"", b"W/\"v1\""));
        assert!(!etag_list_matches(b"W/\"v2\"", b"W/\"v1\""));
    }
}
