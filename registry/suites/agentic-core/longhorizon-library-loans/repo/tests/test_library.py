from datetime import date
from decimal import Decimal

import pytest

from library import Library


def make():
    lib = Library(clock=lambda: date(2024, 3, 1))
    lib.add("b1", "Dune")
    lib.add("b2", "Emma")
    return lib


def test_double_checkout_refused():
    lib = Library(clock=lambda: date(2024, 3, 1))
    lib.add("b1", "Dune")
    lib.checkout("b1", "m1")
    with pytest.raises(ValueError):
        lib.checkout("b1", "m2")


def test_due_date():
    lib = make()
    lib.checkout("b1", "m1")
    assert lib.due_date("b1") == date(2024, 3, 15)


def test_late_fee():
    lib = make()
    lib.checkout("b1", "m1")
    assert lib.late_fee("b1", date(2024, 3, 15)) == Decimal("0")
    assert lib.late_fee("b1", date(2024, 3, 19)) == Decimal("1.00")


def test_overdue_and_return():
    lib = make()
    lib.checkout("b2", "m1")
    lib.checkout("b1", "m2")
    assert lib.overdue(date(2024, 3, 16)) == ["b1", "b2"]
    lib.give_back("b1")
    assert lib.overdue(date(2024, 3, 16)) == ["b2"]
