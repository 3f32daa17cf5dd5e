"""The agent's working copy of a task repository, and the only way tools touch files.

Every path an agent gives is relative to the workspace root. :meth:`Workspace.resolve` refuses
absolute paths, ``..`` components and anything whose real location (after following symlinks) is
outside the root, so hidden tests and the host's files cannot be named at all. Read-only patterns
make writes fail with the same "Permission denied" a production checkout would give.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

__all__ = ["ToolError", "Workspace", "matches_readonly"]

_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache"}
NAME_MAX = 255  # bytes in one path component (Linux)
PATH_MAX = 1024  # characters in a workspace path: far above any repository's, far below the kernel's 4096


class ToolError(Exception):
    """A tool call that was well formed but failed (missing file, denied path, no match ...).

    ``kind`` names the failure for the tool-call log; these are not format errors.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for an error message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def matches_readonly(rel: str, patterns: Iterable[str]) -> bool:
    """Whether workspace path ``rel`` matches one of the read-only ``patterns`` (fnmatch globs)."""
    clean = PurePosixPath(rel).as_posix()
    return any(fnmatch.fnmatch(clean, pattern) for pattern in patterns)


class Workspace:
    """A private copy of a repository in a fresh temporary directory."""

    def __init__(self, source: Path | None, readonly: Iterable[str] = (), reserved: Iterable[str] = (),
                 prefix: str = "codemoe-agent-") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        if source is not None:
            shutil.copytree(source, self.root, symlinks=True, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(*_SKIP_DIRS))
        self.readonly = tuple(readonly)
        self.reserved = tuple(r.rstrip("/") for r in reserved)  # paths grading overwrites: never writable

    # -- paths -----------------------------------------------------------------------------

    def resolve(self, rel: str, *, must_exist: bool = True) -> Path:
        """The host path of workspace path ``rel``; raises ``ToolError('denied')`` for escapes."""
        if not isinstance(rel, str) or not rel or "\x00" in rel:
            raise ToolError("denied", f"invalid path {rel!r}")
        pure = PurePosixPath(rel.replace("\\", "/"))
        if pure.is_absolute() or rel.startswith("~"):
            raise ToolError("denied", f"{rel}: absolute paths are not allowed; use a path relative to the repository root")
        if ".." in pure.parts:
            raise ToolError("denied", f"{rel}: '..' is not allowed; paths stay inside the repository")
        if len(rel) > PATH_MAX or any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in pure.parts):
            raise ToolError("invalid_path", f"{_short(rel)}: path too long (at most {NAME_MAX} bytes a component, "
                                            f"{PATH_MAX} characters in all)")
        path = self.root.joinpath(*pure.parts)
        try:
            real = path.resolve()
            if real != self.root and self.root not in real.parents:
                raise ToolError("denied", f"{rel}: resolves outside the repository")
            if must_exist and not path.exists():
                raise ToolError("not_found", f"{rel}: no such file or directory")
        except OSError as exc:  # a name the filesystem refuses: the agent's error, not ours
            raise ToolError("invalid_path", f"{_short(rel)}: {exc.strerror or exc}") from None
        except RuntimeError:  # Path.resolve's symlink loop (Python < 3.13)
            raise ToolError("invalid_path", f"{_short(rel)}: too many levels of symbolic links") from None
        return path

    def relative(self, path: Path) -> str:
        """The workspace path of host path ``path``."""
        return path.relative_to(self.root).as_posix()

    def is_readonly(self, rel: str) -> bool:
        """Whether ``rel`` matches one of the task's read-only patterns."""
        return matches_readonly(rel, self.readonly)

    # -- files -----------------------------------------------------------------------------

    def iter_files(self, start: Path | None = None) -> Iterator[Path]:
        """Every regular file under ``start`` (default: the root) that stays inside the root, sorted."""
        base = start or self.root
        if base.is_file():
            yield base
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and self._inside(Path(dirpath, d)))
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if path.is_file() and self._inside(path):
                    yield path

    def _inside(self, path: Path) -> bool:
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop leads nowhere, least of all inside
            return False
        return self.root in real.parents

    def read_text(self, rel: str) -> str:
        """The text of file ``rel``."""
        path = self.resolve(rel)
        if path.is_dir():
            raise ToolError("is_dir", f"{rel} is a directory; use list_files")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ToolError("binary", f"{rel} is not UTF-8 text") from None
        except OSError as exc:
            raise ToolError("os_error", f"{rel}: {exc.strerror or exc}") from None

    def write_text(self, rel: str, content: str) -> bool:
        """Write ``content`` to ``rel`` (creating folders); returns whether the file is new."""
        path = self.resolve(rel, must_exist=False)
        clean = self.relative(path)
        if any(clean == r or clean.startswith(r + "/") for r in self.reserved):
            raise ToolError("denied", f"{rel}: reserved for the grader's hidden tests")
        if self.is_readonly(clean):
            raise ToolError("permission_denied", f"PermissionError: [Errno 13] Permission denied: '{rel}'")
        if path.is_dir():
            raise ToolError("is_dir", f"{rel} is a directory")
        created = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        except OSError as exc:  # a file where a folder must be, a full disk: the call fails, the episode goes on
            raise ToolError("os_error", f"{rel}: {exc.strerror or exc}") from None
        return created

    def snapshot(self) -> dict[str, str]:
        """Every text file of the workspace, keyed by workspace path (what executions receive)."""
        files: dict[str, str] = {}
        for path in self.iter_files():
            try:
                files[self.relative(path)] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
        return files

    def close(self) -> None:
        """Delete the working copy."""
        shutil.rmtree(self.root, ignore_errors=True)
