import pytest

from timefmt import format_duration, parse_duration


def test_hours_and_minutes():
    assert parse_duration("1h30m") == 5400


def test_multi_digit_hours():
    assert parse_duration("12h") == 43200


def test_rejects_garbage():
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_format():
    assert format_duration(3725) == "1h2m5s"
