import importlib

import textkit.blog
import textkit.catalog
import textkit.slugs
import textkit.utils


def test_utils_no_longer_defines_slugify():
    assert not hasattr(importlib.reload(textkit.utils), "slugify")
    assert textkit.utils.title_case("a b") == "A B"


def test_callers_use_the_new_module():
    assert textkit.blog.post_url("Ünïcode Title", 2025) == "/blog/2025/unicode-title/"
    assert textkit.catalog.product_key("ACME", "Rocket Skates 2") == "acme-rocket-skates-2"


def test_slugify_behaviour_kept():
    assert textkit.slugs.slugify("  --Hello__World--  ") == "hello-world"
    assert textkit.slugs.slugify("") == ""
