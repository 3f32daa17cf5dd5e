"""JSONL trajectories: one finished episode per line, usable as chat-format SFT data.

Each line holds ``messages`` (system, user, then assistant tool calls and tool observations),
``tools`` (the JSON schemas a chat template's ``tools=`` takes), the tool-call log, the outcome
and the agent's patch; see :meth:`codemoe.sandbox.agent.episode.Episode.to_record`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from codemoe.sandbox.agent.episode import Episode

__all__ = ["TrajectoryWriter", "read_trajectories"]


class TrajectoryWriter:
    """Appends episodes to a JSONL file (created with its folders when missing)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def write(self, episode: Episode, **extra: Any) -> None:
        """Append ``episode`` (plus ``extra`` keys, e.g. its reward) as one line."""
        record = {**episode.to_record(), **extra}
        # ASCII: a model's text may hold U+2028 and its kin (a line break to str.splitlines) or a lone
        # surrogate (no UTF-8), and the line must stay one line of valid UTF-8 whatever the text is
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trajectories(path: Path | str) -> list[dict[str, Any]]:
    """Every record of a trajectory file."""
    # lines end at "\n" only: files written before the writer escaped U+2028 hold it raw inside a record
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").split("\n") if line.strip()]
