"""Rendering documentation pages."""

import mdlite


def title(text: str) -> str:
    return mdlite.heading(text, 1)


def section(title: str, items: list[str]) -> str:
    raise NotImplementedError
