//! The native router: request path and method in, a decision out.
//!
//! Routes live in a radix tree (matchit), so matching costs the same whether
//! an app has five routes or five hundred. The router makes decisions only;
//! the loop acts on them. Everything that needs no Python is decided and
//! answered here: redirects are precomputed response heads, and unknown
//! paths (404) or known paths with a wrong method (405 + `Allow`) never call
//! into Python unless the app registered an error handler for that status.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;

use crate::cache::{CacheCounters, CachePolicy, ResponseCache};
use crate::static_files::{CacheMode, MountSpec};

/// A route's cache policy as Python passes it: `(ttl, vary_query,
/// vary_headers, statuses, stale, lock_timeout, with_credentials)`
/// (python/rush/cache.py, `Cache.native`).
type NativeCachePolicy = (f64, Vec<String>, Vec<String>, Vec<u16>, f64, f64, bool);

/// The response cache's bound per worker unless the app sets one.
const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
use pyo3::prelude::*;

/// A Python callable registered for a route or an error status.
pub struct Handler {
    pub callable: Py<PyAny>,
    /// `async def` handlers return a coroutine that the loop drives.
    pub is_async: bool,
    /// How the route's answers are cached, if they are.
    pub cache: Option<Arc<CachePolicy>>,
}

/// A redirect answered entirely in Rust.
pub struct Redirect {
    /// Where to: the `Location` value (checked when registered); the
    /// response writer frames it with an empty body.
    pub location: Vec<u8>,
    pub status: u16,
}

/// What one path leads to.
enum Endpoint {
    Methods {
        /// (method token, index into `Router::handlers`), in registration order.
        by_method: Vec<(Vec<u8>, usize)>,
        /// The value of the `Allow` header for a 405 on this path.
        allow: Vec<u8>,
    },
    Redirect(Redirect),
}

/// The router's answer for one request.
pub enum RouteDecision<'router, 'path> {
    Handler {
        handler: &'router Handler,
        params: matchit::Params<'router, 'path>,
    },
    Redirect(&'router Redirect),
    NotFound,
    MethodNotAllowed {
        allow: &'router [u8],
    },
}

/// Routes, redirects and error handlers of one app, built from Python
/// (`rush.App` registers into it before the worker starts serving).
#[pyclass(module = "rush._rush", unsendable)]
pub struct Router {
    tree: matchit::Router<usize>,
    endpoints: Vec<Endpoint>,
    /// Pattern string -> index in `endpoints`, so several registrations on one
    /// path (e.g. GET and POST separately) share an endpoint.
    endpoint_by_pattern: HashMap<String, usize>,
    handlers: Vec<Handler>,
    error_handlers: HashMap<u16, Handler>,
    static_mounts: Vec<MountSpec>,
    /// Paths of a WSGI/ASGI app whose answers are cached (`--cache`).
    cached_paths: Vec<CachedPath>,
    /// The worker's cached answers of routes with a `Cache` policy.
    pub response_cache: RefCell<ResponseCache>,
    /// Its counters, shared with the `CacheHandle`s given to Python.
    cache_counters: Arc<CacheCounters>,
    /// The shared second level (python/rush/cache_shared.py) of cached
    /// routes that have one, by route.
    shared_levels: HashMap<u32, Py<PyAny>>,
}

/// A path of a WSGI/ASGI app with a cache policy: exact, or every path
/// under a prefix (given as `/prefix/*`).
struct CachedPath {
    spec: String,
    path: String,
    prefix: bool,
    policy: Arc<CachePolicy>,
}

/// Cached paths are numbered from here in cache keys, apart from routes.
const FIRST_CACHED_PATH: u32 = 1 << 31;

impl Router {
    /// The shared second level of a cached route, if it has one.
    pub fn shared_level(&self, route: u32) -> Option<&Py<PyAny>> {
        self.shared_levels.get(&route)
    }

    /// The cache policy of a WSGI/ASGI app's path (percent-decoded), if
    /// `--cache` named it; the first match wins.
    pub fn cached_path(&self, path: &str) -> Option<&Arc<CachePolicy>> {
        self.cached_paths
            .iter()
            .find(|cached| {
                if cached.prefix {
                    path.starts_with(&cached.path)
                } else {
                    path == cached.path
                }
            })
            .map(|cached| &cached.policy)
    }

    /// Finds what `method` on `path` (percent-decoded) leads to.
    pub fn route<'router, 'path>(
        &'router self,
        method: &[u8],
        path: &'path str,
    ) -> RouteDecision<'router, 'path> {
        let Ok(matched) = self.tree.at(path) else {
            return RouteDecision::NotFound;
        };
        match &self.endpoints[*matched.value] {
            Endpoint::Redirect(redirect) => RouteDecision::Redirect(redirect),
            Endpoint::Methods { by_method, allow } => {
                let found = by_method
                    .iter()
                    .find(|(token, _)| token == method)
                    // HEAD is GET without the body (RFC 9110 9.3.2).
                    .or_else(|| {
                        (method == b"HEAD")
                            .then(|| by_method.iter().find(|(token, _)| token == b"GET"))
                            .flatten()
                    });
                match found {
                    Some((_, index)) => RouteDecision::Handler {
                        handler: &self.handlers[*index],
                        params: matched.params,
                    },
                    None => RouteDecision::MethodNotAllowed { allow },
                }
            }
        }
    }

    /// The static-file mounts, for the worker's loop to serve.
    pub fn static_mounts(&self) -> Vec<MountSpec> {
        self.static_mounts.clone()
    }

    pub fn error_handler(&self, status: u16) -> Option<&Handler> {
        self.error_handlers.get(&status)
    }

    pub fn has_async_handlers(&self) -> bool {
        self.handlers.iter().any(|handler| handler.is_async)
            || self.error_handlers.values().any(|handler| handler.is_async)
    }

    fn endpoint_for(&mut self, pattern: &str, endpoint: Endpoint) -> PyResult<usize> {
        if let Some(&index) = self.endpoint_by_pattern.get(pattern) {
            return Ok(index);
        }
        let index = self.endpoints.len();
        self.tree
            .insert(pattern, index)
            .map_err(|error| PyValueError::new_err(format!("route {pattern:?}: {error}")))?;
        self.endpoints.push(endpoint);
        self.endpoint_by_pattern.insert(pattern.to_owned(), index);
        Ok(index)
    }
}

#[pymethods]
impl Router {
    #[new]
    fn new() -> Self {
        let cache_counters = Arc::new(CacheCounters::default());
        Router {
            tree: matchit::Router::new(),
            endpoints: Vec::new(),
            endpoint_by_pattern: HashMap::new(),
            handlers: Vec::new(),
            error_handlers: HashMap::new(),
            static_mounts: Vec::new(),
            cached_paths: Vec::new(),
            response_cache: RefCell::new(ResponseCache::new(
                DEFAULT_CACHE_BYTES,
                cache_counters.clone(),
            )),
            cache_counters,
            shared_levels: HashMap::new(),
        }
    }

    /// Registers `handler` for `methods` on `pattern` (`/users/{id}`, `/files/{*rest}`).
    /// `cache` is `(ttl, vary_query, vary_headers, statuses)` for a route
    /// whose answers the worker caches (see src/cache.rs).
    #[pyo3(signature = (pattern, methods, handler, is_async, cache=None, shared=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_route(
        &mut self,
        pattern: &str,
        methods: Vec<String>,
        handler: Py<PyAny>,
        is_async: bool,
        cache: Option<NativeCachePolicy>,
        shared: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let endpoint = self.endpoint_for(
            pattern,
            Endpoint::Methods {
                by_method: Vec::new(),
                allow: Vec::new(),
            },
        )?;
        let handler_index = self.handlers.len();
        let cache = match cache {
            None => None,
            Some(policy) => Some(Arc::new(cache_policy(handler_index as u32, policy)?)),
        };
        if let Some(shared) = shared {
            self.shared_levels.insert(handler_index as u32, shared);
        }
        self.handlers.push(Handler {
            callable: handler,
            is_async,
            cache,
        });
        let Endpoint::Methods { by_method, allow } = &mut self.endpoints[endpoint] else {
            return Err(PyValueError::new_err(format!(
                "route {pattern:?} is already a redirect"
            )));
        };
        for method in methods {
            let method = method.to_ascii_uppercase();
            if !rush_proto::response::is_valid_header_name(method.as_bytes()) {
                return Err(PyValueError::new_err(format!("invalid method {method:?}")));
            }
            if by_method
                .iter()
                .any(|(token, _)| token == method.as_bytes())
            {
                return Err(PyValueError::new_err(format!(
                    "{method} {pattern} is registered twice"
                )));
            }
            by_method.push((method.into_bytes(), handler_index));
        }
        let mut names: Vec<&[u8]> = by_method.iter().map(|(token, _)| &token[..]).collect();
        let has_get = names.contains(&&b"GET"[..]);
        if has_get && !names.contains(&&b"HEAD"[..]) {
            names.push(b"HEAD");
        }
        *allow = names.join(&b", "[..]);
        Ok(())
    }

    /// Registers a redirect from `pattern` to `location`, answered without Python.
    fn add_redirect(&mut self, pattern: &str, location: &str, status: u16) -> PyResult<()> {
        if !(300..400).contains(&status) {
            return Err(PyValueError::new_err("redirect status must be 3xx"));
        }
        if !rush_proto::response::is_valid_header_value(location.as_bytes()) {
            return Err(PyValueError::new_err("invalid redirect location"));
        }
        if self.endpoint_by_pattern.contains_key(pattern) {
            return Err(PyValueError::new_err(format!(
                "route {pattern:?} is already registered"
            )));
        }
        // The same check the head's writer would make, at registration.
        rush_proto::response::write_header(&mut Vec::new(), b"Location", location.as_bytes())
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        self.endpoint_for(
            pattern,
            Endpoint::Redirect(Redirect {
                location: location.as_bytes().to_vec(),
                status,
            }),
        )?;
        Ok(())
    }

    /// Serves the files under `directory` at URL `prefix`, natively.
    #[pyo3(signature = (
        prefix, directory, *, cache="memory", max_file_size=1024 * 1024,
        max_cache_size=64 * 1024 * 1024, cache_control=None, dotfiles=false,
        allow_symlinks_outside=false,
    ))]
    // A mount's settings: keyword-only from Python, one per option of
    // `App.static` (as the settings objects of server/settings.rs).
    #[allow(clippy::too_many_arguments)]
    fn add_static(
        &mut self,
        prefix: &str,
        directory: std::path::PathBuf,
        cache: &str,
        max_file_size: u64,
        max_cache_size: u64,
        cache_control: Option<String>,
        dotfiles: bool,
        allow_symlinks_outside: bool,
    ) -> PyResult<()> {
        if !prefix.starts_with('/') {
            return Err(PyValueError::new_err("a static prefix must start with '/'"));
        }
        let cache_mode = match cache {
            "memory" => CacheMode::Memory,
            "filesystem" => CacheMode::Filesystem,
            other => {
                return Err(PyValueError::new_err(format!(
                    "cache must be 'memory' or 'filesystem', not {other:?}"
                )))
            }
        };
        if let Some(value) = &cache_control {
            if !rush_proto::response::is_valid_header_value(value.as_bytes()) {
                return Err(PyValueError::new_err("invalid cache_control value"));
            }
        }
        let root = directory.canonicalize().map_err(|error| {
            PyValueError::new_err(format!("static directory {directory:?}: {error}"))
        })?;
        if !root.is_dir() {
            return Err(PyValueError::new_err(format!(
                "static directory {directory:?} is not a directory"
            )));
        }
        // `/static/` and `/static` mean the same mount; `/` stays `/`.
        let prefix = match prefix.trim_end_matches('/') {
            "" => "/".to_owned(),
            trimmed => trimmed.to_owned(),
        };
        if self
            .static_mounts
            .iter()
            .any(|mount| mount.prefix == prefix)
        {
            return Err(PyValueError::new_err(format!(
                "static prefix {prefix:?} is mounted twice"
            )));
        }
        self.static_mounts.push(MountSpec {
            prefix,
            root,
            cache_mode,
            max_file_size,
            max_cache_size,
            cache_control,
            dotfiles,
            allow_symlinks_outside,
        });
        Ok(())
    }

    /// Registers a handler called instead of the native answer for `status`
    /// (404 for unknown paths, 405 for wrong methods, 500 for handler errors).
    /// Sets the bound of the worker's response cache, in bytes (drops what
    /// it holds).
    fn set_cache_size(&self, max_bytes: u64) {
        *self.response_cache.borrow_mut() =
            ResponseCache::new(max_bytes, self.cache_counters.clone());
    }

    /// Caches the answers of a WSGI/ASGI app for `spec`: a path, or every
    /// path under a prefix written `/prefix/*` (`--cache`).
    #[pyo3(signature = (spec, policy, shared=None))]
    fn add_cached_path(
        &mut self,
        spec: &str,
        policy: NativeCachePolicy,
        shared: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        if !spec.starts_with('/') {
            return Err(PyValueError::new_err(format!(
                "a cached path starts with '/' (got {spec:?})"
            )));
        }
        let (path, prefix) = match spec.strip_suffix('*') {
            Some(prefix) => (prefix.to_owned(), true),
            None => (spec.to_owned(), false),
        };
        let route = FIRST_CACHED_PATH + self.cached_paths.len() as u32;
        if let Some(shared) = shared {
            self.shared_levels.insert(route, shared);
        }
        self.cached_paths.push(CachedPath {
            spec: spec.to_owned(),
            path,
            prefix,
            policy: Arc::new(cache_policy(route, policy)?),
        });
        Ok(())
    }

    /// A handle on the worker's cache that any thread may use (a WSGI
    /// app's pool threads too): invalidation and counters. Made after every
    /// route and cached path is registered.
    fn cache_handle(&self) -> CacheHandle {
        let mut policies: Vec<(String, Arc<CachePolicy>)> = self
            .endpoint_by_pattern
            .iter()
            .filter_map(|(pattern, &endpoint)| match &self.endpoints[endpoint] {
                Endpoint::Methods { by_method, .. } => Some((pattern, by_method)),
                Endpoint::Redirect(_) => None,
            })
            .flat_map(|(pattern, by_method)| {
                by_method.iter().filter_map(|(_, handler)| {
                    let policy = self.handlers[*handler].cache.clone()?;
                    Some((pattern.clone(), policy))
                })
            })
            .collect();
        policies.extend(
            self.cached_paths
                .iter()
                .map(|cached| (cached.spec.clone(), cached.policy.clone())),
        );
        CacheHandle {
            policies,
            counters: self.cache_counters.clone(),
        }
    }

    fn add_error_handler(&mut self, status: u16, handler: Py<PyAny>, is_async: bool) {
        self.error_handlers.insert(
            status,
            Handler {
                callable: handler,
                is_async,
                cache: None,
            },
        );
    }

    /// Whether any handler is `async def` (the worker then runs an asyncio loop).
    #[getter]
    fn needs_asyncio(&self) -> bool {
        self.has_async_handlers()
    }
}

/// A route's cache policy from what Python passes (`Cache.native`).
fn cache_policy(route: u32, policy: NativeCachePolicy) -> PyResult<CachePolicy> {
    let (ttl, vary_query, vary_headers, statuses, stale, lock_timeout, with_credentials) = policy;
    let seconds_or_zero = |name: &str, value: f64| {
        if value == 0.0 {
            Ok(std::time::Duration::ZERO)
        } else {
            crate::options::seconds(name, value)
        }
    };
    Ok(CachePolicy {
        route,
        ttl: crate::options::seconds("cache ttl", ttl)?,
        vary_query,
        vary_headers: vary_headers
            .into_iter()
            .map(|name| name.to_ascii_lowercase().into_bytes())
            .collect(),
        statuses,
        stale: seconds_or_zero("cache stale", stale)?,
        lock_timeout: seconds_or_zero("cache lock_timeout", lock_timeout)?,
        with_credentials,
    })
}

/// `app.cache` / `rush.cache.worker_cache` in Python: invalidates through
/// the shared generation counters (src/cache/generations.rs) and reads the
/// worker's counters, both atomics, so any thread may call it.
#[pyclass(module = "rush._rush", frozen)]
pub struct CacheHandle {
    /// (route pattern or cached path spec, its policy).
    policies: Vec<(String, Arc<CachePolicy>)>,
    counters: Arc<CacheCounters>,
}

#[pymethods]
impl CacheHandle {
    /// Makes cached answers out of date in every worker: all of them
    /// (`pattern` None), those of the route or cached path `pattern`, or,
    /// with `query`, only those of `pattern` for exactly these values of
    /// its `vary_query` parameters (whatever headers they varied on).
    /// Returns the name prefixes (see `crate::cache::shared_name`) a shared
    /// second level drops for this invalidation (`""`: everything).
    #[pyo3(signature = (pattern=None, query=None))]
    fn invalidate(
        &self,
        pattern: Option<&str>,
        query: Option<Vec<(String, String)>>,
    ) -> PyResult<Vec<String>> {
        let Some(pattern) = pattern else {
            crate::cache::invalidate_all();
            return Ok(vec![String::new()]);
        };
        let named: Vec<&Arc<CachePolicy>> = self
            .policies
            .iter()
            .filter(|(name, _)| name == pattern)
            .map(|(_, policy)| policy)
            .collect();
        if named.is_empty() {
            return Err(PyValueError::new_err(format!(
                "no cached route or path {pattern:?}"
            )));
        }
        let mut prefixes = Vec::new();
        for policy in named {
            match &query {
                None => {
                    crate::cache::invalidate_route(policy.route);
                    prefixes.push(crate::cache::shared_route_prefix(policy.route));
                }
                Some(query) => {
                    let pairs = query.iter().map(|(name, value)| (name, value));
                    let entry = crate::cache::entry_key(policy, pairs);
                    crate::cache::invalidate_entry(&entry);
                    prefixes.push(crate::cache::shared_entry_prefix(&entry));
                }
            }
        }
        Ok(prefixes)
    }

    /// The worker's cache counters by name.
    fn stats(&self) -> HashMap<&'static str, u64> {
        self.counters.snapshot().into_iter().collect()
    }
}
