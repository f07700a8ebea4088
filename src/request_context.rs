//! The `contextvars` context each request's code runs in.
//!
//! Every handler call and every coroutine's first step runs in a context
//! of its own that starts as the worker's context was when its loop was
//! built: module-level `ContextVar` values are in it, nothing a request
//! sets is. Not a copy of the *current* context: when a suspended response
//! ends, its own task's context is current, and the pipelined request its
//! end lets start would inherit what the finished request set; and a rush
//! App's plain handler called in the thread's own context would leave what
//! it sets there for every later request. granian and hypercorn start every
//! request clean (uvicorn lets one pipelined request's values through to
//! the next; tests/differential compares them).
//!
//! How: a copy of the base context costs an object, not the variables'
//! map (a copy shares it until a variable is set): with its entry, exit and
//! release, 186 instructions on a rush App hello (callgrind; about 0.5% of
//! its CPU, benches/profiles/README.md).
//! Reusing a copy that a request left unchanged would save most of that,
//! but "unchanged" can only be asked of a context by comparing it with the
//! base, which calls the values' `__eq__` and finds a variable set to an
//! equal but different object unchanged (a fresh list would then pass from
//! one request to the next), so every request gets a new copy.

use pyo3::prelude::*;

/// The worker's base context, copied for each request.
pub(crate) struct RequestContexts {
    base: Py<PyAny>,
}

impl RequestContexts {
    /// Takes the worker's context as it is now; called once, when the loop
    /// is built, outside any request.
    pub(crate) fn capture(py: Python<'_>) -> PyResult<RequestContexts> {
        // SAFETY: called with the GIL held; returns a new reference or NULL
        // with an exception set, which from_owned_ptr_or_err turns into Err.
        let base = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyContext_CopyCurrent())? };
        Ok(RequestContexts {
            base: base.unbind(),
        })
    }

    /// A new copy of the base context, for one request.
    pub(crate) fn fresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: `base` is a live Context object (made by capture); the
        // call returns a new reference or NULL with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyContext_Copy(self.base.as_ptr())) }
    }

    /// Runs `call` (a plain handler) in a request context of its own.
    pub(crate) fn run<'py, T>(
        &self,
        py: Python<'py>,
        call: impl FnOnce() -> PyResult<T>,
    ) -> PyResult<T> {
        in_context(py, &self.fresh(py)?, call)
    }
}

/// Runs `call` with `context` entered.
pub(crate) fn in_context<'py, T>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    call: impl FnOnce() -> PyResult<T>,
) -> PyResult<T> {
    // SAFETY: `context` is a live Context object, fresh from
    // RequestContexts, so entered nowhere else; Enter/Exit are paired below
    // whatever `call` does, on this thread, with the GIL held.
    if unsafe { pyo3::ffi::PyContext_Enter(context.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let result = call();
    // SAFETY: pairs the successful PyContext_Enter above.
    unsafe { pyo3::ffi::PyContext_Exit(context.as_ptr()) };
    result
}
