"""mdlite 1.2: a very small Markdown writer."""

__version__ = "1.2"


def heading(text: str, level: int = 1) -> str:
    """An ATX heading: '#' * level, a space, the text."""
    if not 1 <= level <= 6:
        raise ValueError("heading level must be 1..6")
    return "#" * level + " " + text.strip()


def bullet_list(items) -> str:
    return "\n".join(f"- {item}" for item in items)
