from releases.versions import is_newer


def test_release_beats_its_prerelease():
    assert is_newer("1.0.0", "1.0.0-rc1")
    assert not is_newer("1.0.0-rc1", "1.0.0")


def test_trailing_zeros_are_equal():
    assert not is_newer("2.0", "2.0.0")
    assert not is_newer("2.0.0", "2.0")


def test_prerelease_order():
    assert is_newer("1.0.0-rc2", "1.0.0-rc1")


def test_many_components():
    assert is_newer("1.2.10.1", "1.2.9.9")
