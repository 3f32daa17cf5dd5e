"""How tasks are shown in the list."""

from datetime import date


def due_label(day: date, today: date) -> str:
    """The label shown next to a task due on ``day``."""
    raise NotImplementedError("ask the product team for the format")
