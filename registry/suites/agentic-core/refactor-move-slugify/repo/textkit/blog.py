"""Blog posts and their URLs."""

from textkit.utils import slugify, title_case


def post_url(title: str, year: int) -> str:
    return f"/blog/{year}/{slugify(title)}/"


def headline(title: str) -> str:
    return title_case(title)
