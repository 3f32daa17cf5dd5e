"""Unified diffs: make one from two file trees, and apply one exactly (no fuzz).

Gold patches and SWE-bench ``patch``/``test_patch`` fields are unified diffs in ``git diff`` form
(``a/`` and ``b/`` prefixes, ``/dev/null`` for created files). Applying happens in memory on a
``{path: text}`` mapping so that validation and the oracle never need ``git`` or ``patch``. A hunk
whose context does not match exactly is an error: a gold patch that only applies with fuzz is a bug
in the task.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["FilePatch", "PatchError", "apply_patch", "make_patch", "parse_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DEV_NULL = "/dev/null"


class PatchError(ValueError):
    """A patch that cannot be parsed or does not apply exactly."""


@dataclass
class Hunk:
    """One ``@@`` block: where it starts in the old file and its lines with their ``' -+'`` marks."""

    old_start: int
    lines: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    """The changes to one file; ``old_path`` or ``new_path`` is None for a created or deleted file."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The file's path after the patch (before it, for a deletion)."""
        return self.new_path or self.old_path or ""


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t", 1)[0].strip()
    if name == DEV_NULL:
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff into per-file patches; raises :class:`PatchError` on a malformed one."""
    patches: list[FilePatch] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patches.append(FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not patches:
                raise PatchError(f"line {i + 1}: hunk before any '---'/'+++' header")
            old_len = int(match.group(2) or 1)
            new_len = int(match.group(4) or 1)
            hunk = Hunk(int(match.group(1)))
            i += 1
            old_seen = new_seen = 0
            while i < len(lines) and (old_seen < old_len or new_seen < new_len):
                body = lines[i]
                mark = body[:1] or " "
                if mark == "\\":
                    i += 1
                    continue
                if mark not in " -+":
                    raise PatchError(f"line {i + 1}: unexpected line in hunk: {body!r}")
                hunk.lines.append(mark + body[1:])
                old_seen += mark in " -"
                new_seen += mark in " +"
                i += 1
            if old_seen != old_len or new_seen != new_len:
                raise PatchError(f"hunk at line {match.group(0)} is truncated")
            patches[-1].hunks.append(hunk)
            continue
        i += 1
    if not patches:
        raise PatchError("no file changes found in the patch")
    return patches


def _apply_file(original: str | None, patch: FilePatch) -> str | None:
    if patch.new_path is None:
        return None
    old_lines = (original or "").splitlines(keepends=True)
    result: list[str] = []
    cursor = 0
    for hunk in patch.hunks:
        start = max(hunk.old_start - 1, 0) if any(line[0] in " -" for line in hunk.lines) else hunk.old_start
        if start < cursor:
            raise PatchError(f"{patch.path}: overlapping hunks")
        result.extend(old_lines[cursor:start])
        cursor = start
        for line in hunk.lines:
            mark, content = line[0], line[1:]
            if mark == "+":
                result.append(content + "\n")
                continue
            actual = old_lines[cursor].rstrip("\r\n") if cursor < len(old_lines) else None
            if actual != content:
                raise PatchError(
                    f"{patch.path}: hunk @@ -{hunk.old_start} does not apply at line {cursor + 1}: "
                    f"expected {content!r}, found {actual!r}"
                )
            if mark == " ":
                result.append(old_lines[cursor])
            cursor += 1
    result.extend(old_lines[cursor:])
    return "".join(result)


def apply_patch(files: Mapping[str, str], text: str) -> dict[str, str]:
    """Return a copy of ``files`` with the patch applied; raises :class:`PatchError` if it does not apply."""
    out = dict(files)
    for patch in parse_patch(text):
        if patch.old_path is not None and patch.old_path not in out:
            raise PatchError(f"{patch.old_path}: the patch changes a file that does not exist")
        if patch.old_path is None and patch.new_path in out:
            raise PatchError(f"{patch.new_path}: the patch creates a file that already exists")
        original = out.pop(patch.old_path) if patch.old_path is not None else None
        updated = _apply_file(original, patch)
        if updated is not None:
            out[patch.path] = updated
    return out


def make_patch(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """The unified diff (``git diff`` style, 3 lines of context) that turns ``before`` into ``after``."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        diff = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else DEV_NULL,
            tofile=f"b/{path}" if new is not None else DEV_NULL,
        )
        for line in diff:
            chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(chunks)
