"""Catalog entries."""

from textkit import utils


def product_key(brand: str, name: str) -> str:
    return utils.slugify(f"{brand} {name}")
