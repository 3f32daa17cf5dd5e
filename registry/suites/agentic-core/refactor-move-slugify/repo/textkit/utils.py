"""Assorted text helpers."""

import re
import unicodedata


def slugify(text: str) -> str:
    """Lower-case ASCII words joined by '-'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    return "-".join(words)


def title_case(text: str) -> str:
    """Capitalise every word."""
    return " ".join(word.capitalize() for word in text.split())
