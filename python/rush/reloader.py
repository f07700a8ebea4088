"""``--reload``: which file changes restart the workers.

A `Reloader` watches directory trees (``--reload-dir``, the working
directory by default) with inotify through the native `FileWatcher`: one
watch per directory, added when the tree is walked at start and whenever a
directory is created. The supervisor polls its descriptor in its own loop
(no thread, no timer, no scanning) and calls `changes` when the kernel
reports something; only files matching an include pattern (``*.py`` by
default, ``--reload-include``) and no exclude pattern (``--reload-exclude``,
plus editors' temporary files) count. Patterns are shell globs matched
against the file's name and against its path relative to the watched
directory.

Not walked: hidden directories (``.git``, ``.venv``...), ``__pycache__``,
``node_modules``, virtual environments (a ``pyvenv.cfg`` inside), cache
directories (a ``CACHEDIR.TAG`` inside, as Cargo's ``target``) and
directories matching an exclude pattern: they hold many directories (each
costs an inotify watch) and no code of the app's own.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence

from rush import logs
from rush._rush import FileWatcher

DEFAULT_INCLUDE = ("*.py",)
# Editors' swap, backup and lock files, and compiled bytecode.
ALWAYS_EXCLUDED = (".*", "*~", "*.sw?", "*.py[cod]", "#*#")
SKIPPED_DIRECTORIES = ("__pycache__", "node_modules")


class Reloader:
    def __init__(
        self,
        directories: Sequence[str] | None,
        include: Sequence[str] | None,
        exclude: Sequence[str] | None,
    ) -> None:
        self.roots = [os.path.abspath(directory) for directory in directories or [os.getcwd()]]
        self.include = tuple(include or DEFAULT_INCLUDE)
        self.exclude = tuple(exclude or ()) + ALWAYS_EXCLUDED
        self.watcher = FileWatcher()
        self.warned = False
        for root in self.roots:
            self.watch_tree(root)

    def fileno(self) -> int:
        return self.watcher.fileno()

    def describe(self) -> str:
        return f"watching {len(self.watcher)} directories under {', '.join(self.roots)} for {', '.join(self.include)}"

    def _relative(self, path: str) -> str:
        for root in self.roots:
            if path == root or path.startswith(root + os.sep):
                return os.path.relpath(path, root)
        return path

    def _matches(self, path: str, patterns: Sequence[str]) -> bool:
        name = os.path.basename(path)
        relative = self._relative(path)
        return any(fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern) for pattern in patterns)

    def skipped_directory(self, path: str) -> bool:
        name = os.path.basename(path)
        if path in self.roots:
            return False
        return (
            name.startswith(".")
            or name in SKIPPED_DIRECTORIES
            or os.path.exists(os.path.join(path, "pyvenv.cfg"))
            or os.path.exists(os.path.join(path, "CACHEDIR.TAG"))
            or self._matches(path, self.exclude)
        )

    def watched_file(self, path: str) -> bool:
        return self._matches(path, self.include) and not self._matches(path, self.exclude)

    def watch_tree(self, top: str) -> list[str]:
        """Watches ``top`` and the directories under it; returns the watched
        files found there (a directory created with files in it, or moved
        in, brings changes the watch was too late to see)."""
        found: list[str] = []
        for directory, subdirectories, files in os.walk(top):
            try:
                self.watcher.add(directory)
            except OSError as error:
                if not self.warned:
                    self.warned = True
                    logs.error_logger.warning(
                        "--reload cannot watch %s (%s): changes there are not seen; "
                        "--reload-dir or --reload-exclude can narrow what is watched",
                        directory,
                        error.strerror or error,
                    )
            subdirectories[:] = [
                name for name in subdirectories if not self.skipped_directory(os.path.join(directory, name))
            ]
            found += [
                os.path.join(directory, name) for name in files if self.watched_file(os.path.join(directory, name))
            ]
        return found

    def changes(self) -> list[str]:
        """The watched files that changed since the last call (paths relative
        to their watched directory), reading what inotify has without waiting."""
        changed: list[str] = []
        for directory, name, is_directory in self.watcher.read():
            if not str(directory):
                # The kernel's queue overflowed: something changed, unknown what.
                changed.append("(many files)")
                continue
            path = os.path.join(directory, name)
            if is_directory:
                if os.path.isdir(path) and not self.skipped_directory(path):
                    changed += [self._relative(file) for file in self.watch_tree(path)]
                continue
            if self.watched_file(path):
                changed.append(self._relative(path))
        return sorted(set(changed))
