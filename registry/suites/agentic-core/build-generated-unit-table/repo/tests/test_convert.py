import pytest

from units.convert import convert


def test_feet_to_inches():
    assert convert(1, "foot", "inch") == pytest.approx(12)


def test_mile_to_yards():
    assert convert(1, "mile", "yard") == pytest.approx(1760)
