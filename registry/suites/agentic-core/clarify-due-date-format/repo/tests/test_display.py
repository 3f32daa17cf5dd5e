from datetime import date

from todo.display import due_label


def test_returns_text():
    assert isinstance(due_label(date(2024, 2, 5), date(2024, 2, 1)), str)
