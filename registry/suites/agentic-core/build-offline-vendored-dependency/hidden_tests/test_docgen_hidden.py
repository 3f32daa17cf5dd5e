def test_uses_the_vendored_release():
    import mdlite

    assert mdlite.__version__ == "1.2"
    assert "third_party" in mdlite.__file__


def test_section_empty_and_spaces():
    from docgen import render

    assert render.section("  Notes ", []) == "## Notes\n\n"
    assert render.section("A", ["x y"]) == "## A\n\n- x y"
