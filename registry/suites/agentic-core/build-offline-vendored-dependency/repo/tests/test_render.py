from docgen import render


def test_title():
    assert render.title(" Guide ") == "# Guide"


def test_section():
    assert render.section("Install", ["pip", "run"]) == "## Install\n\n- pip\n- run"
