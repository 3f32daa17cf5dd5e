from releases.versions import is_newer


def test_numeric_components():
    assert is_newer("1.10.0", "1.9.0")


def test_prerelease_of_next_major():
    assert is_newer("2.0.0-rc1", "1.9.9")


def test_equal():
    assert not is_newer("1.2.0", "1.2.0")
