//! Awaitables the native ASGI callables hand out: [`Ready`], complete at
//! once (awaiting `send()` or a `receive()` that has its message never
//! suspends), with native await slots so that awaiting one raises no
//! `StopIteration` on Python 3.11, and [`settle`], which resolves an
//! asyncio future its task may have given up on.

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// An awaitable that is already complete: `await Ready(v)` is `v`, at once.
///
/// Awaiting one costs no exception where CPython allows: the type's
/// `am_send` slot (see [`install_fast_await`]) hands the value back as a
/// return, which `await` on Python 3.11 takes without the `StopIteration`
/// that `__next__` must otherwise raise (creating it cost about as much as
/// the rest of a `send()`). A `Ready` for `None` is one shared object
/// whose `__next__` ends without raising at all, on every version.
#[pyclass(module = "rush._rush")]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> PyResult<Option<Py<PyAny>>> {
        match self.value.take() {
            Some(value) => Err(PyStopIteration::new_err((value,))),
            // Ending with no exception set is "returned None" to `await`.
            None => Ok(None),
        }
    }
}

static READY_NONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();

pub(crate) fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<Ready>> {
    if value.is_none(py) {
        // Nothing to hand over: every such awaitable can be the same one.
        let shared = READY_NONE.get_or_try_init(py, || Py::new(py, Ready { value: None }))?;
        return Ok(shared.clone_ref(py));
    }
    Py::new(py, Ready { value: Some(value) })
}

/// Gives the [`Ready`] type native `am_await` and `am_send` slots (called
/// once, when the module is made). `am_await` returns the object itself
/// without a trip through PyO3's method wrapper; `am_send` returns the
/// value as `PYGEN_RETURN`, which `PyIter_Send` (the `await` of Python
/// 3.11) passes on without an exception. Later versions' `await` calls
/// `__next__` instead, which still works the same way, only slower.
pub(crate) fn install_fast_await(py: Python<'_>) -> PyResult<()> {
    let ready_type = py.get_type::<Ready>();
    let type_object = ready_type.as_type_ptr();
    // SAFETY: the GIL is held and `type_object` is the live heap type PyO3
    // made for `Ready`; its `tp_as_async` (set because `Ready` defines
    // `__await__`) points into that type object, which lives as long as the
    // module. Both functions keep the slots' contracts (see below).
    unsafe {
        let slots = (*type_object).tp_as_async;
        if slots.is_null() {
            return Ok(());
        }
        (*slots).am_await = Some(ready_await);
        (*slots).am_send = Some(ready_send);
        pyo3::ffi::PyType_Modified(type_object);
    }
    Ok(())
}

/// `Ready.__await__`: the object itself (a new reference).
unsafe extern "C" fn ready_await(ready: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls the slot with the GIL held and a live object.
    unsafe { pyo3::ffi::Py_IncRef(ready) };
    ready
}

/// `am_send` for `Ready`: the value, returned (a new reference in
/// `result`); `None` once it was taken.
unsafe extern "C" fn ready_send(
    ready: *mut pyo3::ffi::PyObject,
    _sent: *mut pyo3::ffi::PyObject,
    result: *mut *mut pyo3::ffi::PyObject,
) -> pyo3::ffi::PySendResult {
    // SAFETY: CPython calls the slot with the GIL held, `ready` a live
    // object of the type the slot belongs to (a `Ready`), and `result` a
    // valid place for the new reference.
    unsafe {
        let py = Python::assume_attached();
        let ready = Borrowed::from_ptr(py, ready).cast_unchecked::<Ready>();
        // A `Ready` is borrowed only here and in `__next__`, never across
        // Python code, so the borrow cannot fail; if it did, None is safe.
        let value = ready
            .try_borrow_mut()
            .ok()
            .and_then(|mut ready| ready.value.take())
            .unwrap_or_else(|| py.None());
        *result = value.into_ptr();
    }
    pyo3::ffi::PySendResult::PYGEN_RETURN
}

/// Resolves an asyncio future unless it is already done (cancelled by its
/// task, say). Errors are ignored: the future belongs to a task that is gone.
pub(crate) fn settle<'py>(
    py: Python<'py>,
    future: &Bound<'py, PyAny>,
    resolve: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) {
    let done = future
        .call_method0(pyo3::intern!(py, "done"))
        .and_then(|done| done.is_truthy())
        .unwrap_or(true);
    if !done {
        let _ = resolve(future);
    }
}
