from finance.rounding import round_half_up


def test_half_up():
    assert round_half_up(2.5) == 3
    assert round_half_up(0.125, 2) == 0.13


def test_negative():
    assert round_half_up(-1.7) == -2


def test_digits():
    assert round_half_up(1.234, 2) == 1.23
