import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_generated_table_matches_the_build():
    spec = importlib.util.spec_from_file_location("build_script", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert (ROOT / "units" / "_table.py").read_text() == build.generate()


def test_conversions():
    from units.convert import convert

    assert convert(3, "km", "mile") == pytest.approx(1.864113576712)
    assert convert(2, "yard", "foot") == pytest.approx(6)
