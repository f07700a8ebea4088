//! `FileWatcher`: the inotify instance behind `--reload`, for the supervisor.
//!
//! How it works: the supervisor (python/rush/reloader.py) adds a watch per
//! directory of the tree it watches and registers [`FileWatcher::fileno`]
//! in the `poll` of its own loop; when the descriptor is readable,
//! [`FileWatcher::read`] returns what changed as `(directory, name,
//! is_directory)` tuples, and Python decides whether a change matters
//! (include and exclude patterns) and watches new directories. The kernel
//! tells us about every change: nothing is polled. inotify is not
//! recursive, hence one watch per directory. The descriptor is
//! non-blocking and close-on-exec, and no thread is involved, so the
//! supervisor may go on forking workers.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use pyo3::prelude::*;

/// What counts as a change: a file written and closed, created, deleted or
/// renamed (editors often save by renaming a temporary file over the old).
const MASK: WatchMask = WatchMask::CLOSE_WRITE
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ONLYDIR);

/// One inotify instance and the directories it watches.
#[pyclass(module = "rush._rush", unsendable)]
pub struct FileWatcher {
    inotify: Inotify,
    directories: HashMap<WatchDescriptor, PathBuf>,
    buffer: Vec<u8>,
}

#[pymethods]
impl FileWatcher {
    #[new]
    fn new() -> PyResult<Self> {
        Ok(FileWatcher {
            inotify: Inotify::init()?,
            directories: HashMap::new(),
            buffer: vec![0; 64 * 1024],
        })
    }

    /// The inotify descriptor, readable when changes are waiting.
    fn fileno(&self) -> RawFd {
        self.inotify.as_raw_fd()
    }

    /// Watches the entries of `directory` (not its subdirectories'); raises
    /// OSError if it cannot (gone, or out of inotify watches).
    fn add(&mut self, directory: PathBuf) -> PyResult<()> {
        let descriptor = self.inotify.watches().add(&directory, MASK)?;
        self.directories.insert(descriptor, directory);
        Ok(())
    }

    /// How many directories are watched.
    fn __len__(&self) -> usize {
        self.directories.len()
    }

    /// The changes waiting, without blocking: `(directory, name,
    /// is_directory)` each. A lost queue (overflow) is reported as
    /// `("", "", False)`: something changed, nobody knows what.
    fn read(&mut self) -> PyResult<Vec<(PathBuf, PathBuf, bool)>> {
        let mut changes = Vec::new();
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error.into()),
            };
            let mut forgotten = Vec::new();
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    changes.push((PathBuf::new(), PathBuf::new(), false));
                    continue;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    // The directory itself went away: its watch is gone.
                    forgotten.push(event.wd.clone());
                    continue;
                }
                let (Some(directory), Some(name)) = (self.directories.get(&event.wd), event.name)
                else {
                    continue;
                };
                changes.push((
                    directory.clone(),
                    PathBuf::from(name),
                    event.mask.contains(EventMask::ISDIR),
                ));
            }
            for descriptor in forgotten {
                self.directories.remove(&descriptor);
            }
        }
        Ok(changes)
    }
}
