import pytest
from timefmt import format_duration, parse_duration


def test_round_trip_long():
    assert parse_duration("100h5m7s") == 360307
    assert parse_duration(format_duration(360307)) == 360307


def test_empty_rejected():
    with pytest.raises(ValueError):
        parse_duration("")


def test_whitespace():
    assert parse_duration(" 24h ") == 86400
