import ast
import inspect
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import library
from library import Library

PACKAGE = Path(library.__file__).resolve().parent


def test_checkout_signature_unchanged():
    assert list(inspect.signature(Library.checkout).parameters) == ["self", "item_id", "member_id"]


def test_exports_unchanged():
    assert library.__all__ == ["Library"]
    assert {n for n in vars(library) if not n.startswith("_")} <= {"Library", "core"}


def test_standard_library_only_and_no_wall_clock():
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        assert "today()" not in source, path
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top == "library" or top in sys.stdlib_module_names, (path, name)


def test_fee_cap_and_types():
    lib = Library(clock=lambda: date(2024, 1, 1))
    lib.add("x", "X")
    lib.checkout("x", "m")
    assert lib.late_fee("x", date(2024, 6, 1)) == Decimal("10.00")
    assert isinstance(lib.late_fee("x", date(2024, 1, 20)), Decimal)
    assert lib.late_fee("x", date(2024, 1, 20)) == Decimal("1.25")


def test_give_back_then_lend_again():
    lib = Library(clock=lambda: date(2024, 1, 1))
    lib.add("x", "X")
    lib.checkout("x", "m")
    lib.give_back("x")
    lib.checkout("x", "n")
    assert lib.overdue(date(2024, 1, 15)) == []
    assert lib.overdue(date(2024, 1, 16)) == ["x"]
