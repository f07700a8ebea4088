//! `wsgi.input` for a request without a body: one reader of nothing per
//! worker, shared by every such request instead of a new `io.BytesIO(b"")`
//! each time (its construction and teardown were ~660 instructions of a
//! ~18,700-instruction WSGI hello).
//!
//! Sharing is safe because the reader has no state: every read is at the
//! end, so `read()`, `readline()`, iteration and the rest answer the same
//! for every request whatever an earlier one did with it. `close()` does
//! nothing, so an app that closes its input cannot break a later request's.
//! It offers what PEP 3333 asks of `wsgi.input` (`read`, `readline`,
//! `readlines`, iteration) plus the usual file methods a `BytesIO` has.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// A readable binary file that is empty and stays so.
#[pyclass(module = "rush._rush", frozen)]
pub struct EmptyInput;

#[pymethods]
impl EmptyInput {
    #[pyo3(signature = (size=None))]
    fn read<'py>(&self, py: Python<'py>, size: Option<isize>) -> Bound<'py, PyBytes> {
        let _ = size;
        PyBytes::new(py, b"")
    }

    #[pyo3(signature = (size=None))]
    fn read1<'py>(&self, py: Python<'py>, size: Option<isize>) -> Bound<'py, PyBytes> {
        let _ = size;
        PyBytes::new(py, b"")
    }

    #[pyo3(signature = (size=None))]
    fn readline<'py>(&self, py: Python<'py>, size: Option<isize>) -> Bound<'py, PyBytes> {
        let _ = size;
        PyBytes::new(py, b"")
    }

    #[pyo3(signature = (hint=None))]
    fn readlines<'py>(&self, py: Python<'py>, hint: Option<isize>) -> Bound<'py, PyList> {
        let _ = hint;
        PyList::empty(py)
    }

    /// Fills nothing of `buffer`: 0 bytes read.
    fn readinto(&self, buffer: &Bound<'_, PyAny>) -> usize {
        let _ = buffer;
        0
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self) -> Option<Py<PyBytes>> {
        None
    }

    /// Does nothing: the reader is shared, and reading it after a close
    /// still finds the end, which is all an app could read anyway.
    fn close(&self) {}

    #[getter]
    fn closed(&self) -> bool {
        false
    }

    fn readable(&self) -> bool {
        true
    }

    fn writable(&self) -> bool {
        false
    }

    fn seekable(&self) -> bool {
        true
    }

    /// The position is always 0: there is nothing to move over, so a read
    /// after any seek finds the end, as it would in an empty `BytesIO`.
    #[pyo3(signature = (offset, whence=0))]
    fn seek(&self, offset: isize, whence: i32) -> PyResult<usize> {
        match whence {
            0 if offset < 0 => Err(PyValueError::new_err(format!(
                "negative seek value {offset}"
            ))),
            0..=2 => Ok(0),
            _ => Err(PyValueError::new_err(format!(
                "invalid whence ({whence}, should be 0, 1 or 2)"
            ))),
        }
    }

    fn tell(&self) -> usize {
        0
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) {}
}
