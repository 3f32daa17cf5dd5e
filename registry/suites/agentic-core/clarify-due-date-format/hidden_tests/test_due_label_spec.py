from datetime import date

from todo.display import due_label

TODAY = date(2024, 2, 1)


def test_relative_words():
    assert due_label(TODAY, TODAY) == "today"
    assert due_label(date(2024, 2, 2), TODAY) == "tomorrow"
    assert due_label(date(2023, 12, 31), TODAY) == "overdue"


def test_later_dates():
    assert due_label(date(2024, 2, 5), TODAY) == "Mon 05.02."
    assert due_label(date(2025, 11, 30), TODAY) == "Sun 30.11."
