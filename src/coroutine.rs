//! Every call into CPython's coroutine machinery, in one place.
//!
//! How it works: a coroutine's first step runs right here on the loop
//! thread ([`start`]), with `PyIter_Send` (no StopIteration is raised for a
//! coroutine that returns) and with the runner's spare asyncio task made
//! current, so libraries that ask for `current_task()` (anyio) see a real
//! task (an ASGI worker keeps it current from one start to the next
//! within a pass of the loop, see [`start`]'s `hold`). A coroutine that
//! returns is answered in the same pass; one that
//! suspends is handed to the runner (python/rush/coroutines.py), which
//! continues it as that same task and reports its end to the loop.
//!
//! Every first step runs in a request context of its own
//! ([`crate::request_context`]).

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::request_context::in_context;

/// The worker's `CoroutineRunner` (python/rush/coroutines.py), with the
/// two attributes every coroutine start needs read once: its event loop,
/// which never changes, and its spare task, which changes only when
/// `adopt(...)` takes it (and is read again then). Reading both as Python
/// attributes cost ~330 instructions a request.
pub(crate) struct Runner {
    object: Py<PyAny>,
    event_loop: Py<PyAny>,
    spare: RefCell<Py<PyAny>>,
    /// `cancelled` of the future the spare waits on, bound once per spare:
    /// the spare's own `cancel()` cancels that future, which is how a
    /// cancelled spare is noticed (see [`start`]).
    assignment_cancelled: RefCell<Py<PyAny>>,
    /// The spare's `get_name`, bound once per spare (a method looked up per
    /// request cost ~250 instructions), and its name when it was made: a
    /// request that renames its task leaves a different one (see
    /// [`Runner::renew_spare_if_touched`]).
    spare_name: RefCell<(Py<PyAny>, Py<PyAny>)>,
    /// The spare, while it stays the current task between coroutine starts
    /// (see [`start`]'s `hold`); [`Runner::release`] ends that.
    held: RefCell<Option<Py<PyAny>>>,
}

impl Runner {
    pub(crate) fn new(py: Python<'_>, object: Py<PyAny>) -> PyResult<Runner> {
        let runner = object.bind(py);
        let event_loop = runner.getattr(pyo3::intern!(py, "loop"))?.unbind();
        let spare = runner.getattr(pyo3::intern!(py, "spare"))?;
        let spare_name = RefCell::new(name_of(&spare)?);
        let assignment_cancelled = RefCell::new(cancelled_of_assignment(runner)?);
        Ok(Runner {
            object,
            event_loop,
            spare: RefCell::new(spare.unbind()),
            assignment_cancelled,
            spare_name,
            held: RefCell::new(None),
        })
    }

    /// Reads the spare and its future again, after the runner made new ones.
    fn reread_spare(&self, py: Python<'_>) -> PyResult<()> {
        let runner = self.object.bind(py);
        let spare = runner.getattr(pyo3::intern!(py, "spare"))?;
        *self.spare_name.borrow_mut() = name_of(&spare)?;
        *self.spare.borrow_mut() = spare.unbind();
        *self.assignment_cancelled.borrow_mut() = cancelled_of_assignment(runner)?;
        Ok(())
    }

    /// After a first step that did not suspend: if the step left something
    /// on its task (the spare) that a task of its own would have taken
    /// away, the spare is replaced, so that the next request does not find
    /// it. Under uvicorn or hypercorn every request is a new task. Seen:
    /// the task cancelled (`current_task().cancel()`: the next request to
    /// suspend would get the cancellation), renamed (`set_name`), or
    /// referred to by something the step left behind (`marked`: its strong
    /// or weak reference count changed across the step, as a registry
    /// keyed by task changes it, such as SQLAlchemy's
    /// `async_scoped_session(scopefunc=current_task)`, or anyio's per-task
    /// state). Not seen: done callbacks. The checks cost about 100
    /// instructions a request (the bound `cancelled` and `get_name` calls);
    /// a new spare, an asyncio task, costs a few microseconds, and none of
    /// the benchmark apps (raw ASGI, FastAPI, Starlette) ever needs one.
    fn renew_spare_if_touched(&self, py: Python<'_>, marked: bool) -> PyResult<()> {
        let touched = marked
            || self
                .assignment_cancelled
                .borrow()
                .bind(py)
                .call0()?
                .is_truthy()?
            || {
                let (get_name, name) = &*self.spare_name.borrow();
                !get_name.bind(py).call0()?.is(name)
            };
        if touched {
            self.release(py);
            self.object
                .bind(py)
                .call_method0(pyo3::intern!(py, "renew_spare"))?;
            self.reread_spare(py)?;
        }
        Ok(())
    }

    /// Stops holding the spare as the current task (see [`start`]). Called
    /// when the loop hands control back to asyncio, so that no task seems
    /// current while asyncio runs its own.
    pub(crate) fn release(&self, py: Python<'_>) {
        let Some(task) = self.held.borrow_mut().take() else {
            return;
        };
        let left = task_switchers(py)
            .and_then(|(_, leave_task)| leave_task.call1((self.event_loop.bind(py), task)));
        if let Err(error) = left {
            // Only if something else changed the current task meanwhile,
            // which nothing in the loop does; asyncio would then refuse to
            // run its next task step, so say why.
            error.write_unraisable(py, None);
        }
    }
}

/// What a step can leave on the task it ran as, counted before and after:
/// strong references and weak ones.
#[derive(PartialEq, Eq)]
struct TaskMarks {
    references: isize,
    weak_references: usize,
}

impl TaskMarks {
    fn of(task: &Bound<'_, PyAny>) -> TaskMarks {
        let object = task.as_ptr();
        // SAFETY: `task` is alive (the Bound holds it) and the GIL is held.
        // Py_REFCNT reads its header. A type with a non-zero
        // tp_weaklistoffset keeps the head of its weak reference list at
        // that offset from the object: a positive one inside the object
        // (asyncio.Task up to 3.12), a negative one in the pre-header that
        // CPython allocates before the object for a type with
        // Py_TPFLAGS_MANAGED_WEAKREF (asyncio.Task from 3.13, offset -32);
        // CPython's own _PyObject_GET_WEAKREFS_LISTPTR adds the offset either
        // way. Reading only positive offsets missed every weak reference to
        // a 3.13 task, so a request that kept one found the next request
        // running as the same task. The list is linked through wr_next and
        // is not changed while we hold the GIL.
        unsafe {
            let references = pyo3::ffi::Py_REFCNT(object);
            let offset = (*pyo3::ffi::Py_TYPE(object)).tp_weaklistoffset;
            let mut weak_references = 0;
            if offset != 0 {
                let head = object
                    .cast::<u8>()
                    .offset(offset)
                    .cast::<*mut pyo3::ffi::PyWeakReference>();
                let mut reference = *head;
                while !reference.is_null() {
                    weak_references += 1;
                    reference = (*reference).wr_next;
                }
            }
            TaskMarks {
                references,
                weak_references,
            }
        }
    }
}

/// A task's bound `get_name` and the name it gives now, kept to notice a
/// `set_name`.
fn name_of(task: &Bound<'_, PyAny>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let get_name = task.getattr(pyo3::intern!(task.py(), "get_name"))?;
    let name = get_name.call0()?.unbind();
    Ok((get_name.unbind(), name))
}

/// `runner.assignment.cancelled`, the bound method.
fn cancelled_of_assignment(runner: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = runner.py();
    Ok(runner
        .getattr(pyo3::intern!(py, "assignment"))?
        .getattr(pyo3::intern!(py, "cancelled"))?
        .unbind())
}

/// Runs a coroutine's first step inline, as the runner's spare asyncio
/// task (see python/rush/coroutines.py), in `context`: the request's own
/// (`RequestContexts::fresh`; an ASGI app was called in it too). A
/// coroutine that suspends is handed to `runner.adopt(...)` and goes on
/// as that task. Without a runner (no asyncio loop), a coroutine that
/// finishes at once is still fine; one that would suspend is an error.
///
/// `(key, request_id)` name the request the adopted task completes: its
/// stream's key as a token, and the id its request unit carries.
///
/// With `hold`, the spare stays the current task after a step that
/// finished, until the next step needs it or [`Runner::release`] (when the
/// loop returns to asyncio): the requests answered in one pass of the
/// loop then make it current once, not once each (`_enter_task` and
/// `_leave_task` cost ~780 instructions a request). Only for ASGI workers:
/// the app's steps see the same current task as before, and the Python
/// code that runs between them (the app's own synchronous call, the
/// loggers) runs inside a task, as all of it does under uvicorn. A rush
/// `App` does not hold: its plain handlers must see no task.
pub(crate) fn start<'py>(
    py: Python<'py>,
    runner: Option<&Runner>,
    context: &Bound<'py, PyAny>,
    coroutine: &Bound<'py, PyAny>,
    (key, request_id): (u64, u64),
    hold: bool,
) -> PyResult<CoroutineStart<'py>> {
    let Some(runner) = runner else {
        return match in_context(py, context, || send_none(py, coroutine))? {
            Step::Returned(value) => Ok(CoroutineStart::Finished(value)),
            Step::Yielded(_) => {
                let _ = coroutine.call_method0(pyo3::intern!(py, "close"));
                Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "a coroutine suspended but no asyncio loop is running",
                ))
            }
        };
    };
    let task = runner.spare.borrow().clone_ref(py).into_bound(py);
    let event_loop = runner.event_loop.bind(py);
    let (enter_task, leave_task) = task_switchers(py)?;
    // A held task is always the spare: the spare changes only in `adopt`,
    // and the hold is released before that.
    let already_current = runner.held.borrow().is_some();
    if already_current && !hold {
        runner.release(py);
    }
    if !already_current || !hold {
        enter_task.call1((event_loop, &task))?;
        if hold {
            *runner.held.borrow_mut() = Some(task.clone().unbind());
        }
    }
    let marks_before = TaskMarks::of(&task);
    let step = in_context(py, context, || send_none(py, coroutine));
    let marks_after = TaskMarks::of(&task);
    if !hold {
        leave_task.call1((event_loop, &task))?;
    }
    if !matches!(step, Ok(Step::Yielded(_))) {
        runner.renew_spare_if_touched(py, marks_before != marks_after)?;
    }
    match step? {
        Step::Returned(value) => Ok(CoroutineStart::Finished(value)),
        Step::Yielded(yielded) => {
            // The spare goes on with this coroutine: asyncio makes it
            // current whenever it runs it from now on.
            runner.release(py);
            let runner_object = runner.object.bind(py);
            let adopted = runner_object.call_method1(
                pyo3::intern!(py, "adopt"),
                (coroutine, yielded, context, key, request_id),
            );
            // `adopt` made a new spare (unless it failed before that): the
            // next coroutine starts as that one.
            runner.reread_spare(py)?;
            adopted?;
            Ok(CoroutineStart::Continuing)
        }
    }
}

/// What `coroutine.send(None)` did.
pub(crate) enum Step<'py> {
    Returned(Bound<'py, PyAny>),
    Yielded(Bound<'py, PyAny>),
}

/// `coroutine.send(None)` without the StopIteration exception that a
/// Python-level `send` raises on return (creating it costs about as much as
/// a small handler).
pub(crate) fn send_none<'py>(
    py: Python<'py>,
    coroutine: &Bound<'py, PyAny>,
) -> PyResult<Step<'py>> {
    let mut result: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: the GIL is held, `coroutine` is a live object and Py_None a
    // valid borrowed argument; PyIter_Send stores a new reference in
    // `result` for PYGEN_RETURN and PYGEN_NEXT, and sets an exception
    // (leaving `result` NULL) for PYGEN_ERROR.
    let status =
        unsafe { pyo3::ffi::PyIter_Send(coroutine.as_ptr(), pyo3::ffi::Py_None(), &mut result) };
    match status {
        pyo3::ffi::PySendResult::PYGEN_RETURN => {
            // SAFETY: a new reference returned by PyIter_Send (see above).
            Ok(Step::Returned(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_NEXT => {
            // SAFETY: a new reference returned by PyIter_Send (see above).
            Ok(Step::Yielded(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
    }
}

pub(crate) static ENTER_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
pub(crate) static LEAVE_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// asyncio's `_enter_task` and `_leave_task`, which make a task current.
pub(crate) fn task_switchers(py: Python<'_>) -> PyResult<(&Bound<'_, PyAny>, &Bound<'_, PyAny>)> {
    let load = |name: &str| -> PyResult<Py<PyAny>> {
        Ok(py.import("asyncio.tasks")?.getattr(name)?.unbind())
    };
    let enter = ENTER_TASK.get_or_try_init(py, || load("_enter_task"))?;
    let leave = LEAVE_TASK.get_or_try_init(py, || load("_leave_task"))?;
    Ok((enter.bind(py), leave.bind(py)))
}

/// What the first step of a coroutine led to.
pub(crate) enum CoroutineStart<'py> {
    /// It returned this value.
    Finished(Bound<'py, PyAny>),
    /// It suspended and continues as an asyncio task.
    Continuing,
}
