from stats import median


def test_even_unsorted_floats():
    assert median([10.0, -2.0, 7.5, 3.5]) == 5.5


def test_two_values():
    assert median([1, 2]) == 1.5


def test_odd_still_works():
    assert median([9, 8, 7, 6, 5]) == 7
