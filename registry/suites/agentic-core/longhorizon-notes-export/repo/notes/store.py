"""Notes kept in memory."""

from dataclasses import dataclass, field
from datetime import date


@dataclass
class Note:
    title: str
    created: date
    tags: list[str] = field(default_factory=list)


class NoteStore:
    """An in-memory collection of notes."""

    def __init__(self, notes=None) -> None:
        self.notes: list[Note] = list(notes or [])

    def add(self, note: Note) -> None:
        """Keep ``note``."""
        self.notes.append(note)
