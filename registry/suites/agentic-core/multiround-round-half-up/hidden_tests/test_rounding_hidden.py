from finance.rounding import round_half_up


def test_negative_halves_go_away_from_zero():
    assert round_half_up(-2.5) == -3
    assert round_half_up(-0.125, 2) == -0.13


def test_decimal_representation():
    assert round_half_up(1.005, 2) == 1.01
    assert round_half_up(2.675, 2) == 2.68


def test_whole_numbers():
    assert round_half_up(7.0) == 7
    assert round_half_up(1234.5) == 1235
