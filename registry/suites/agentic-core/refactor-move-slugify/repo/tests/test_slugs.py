from textkit.slugs import slugify


def test_slugify_accents():
    assert slugify("Crème Brûlée  Recipe") == "creme-brulee-recipe"
