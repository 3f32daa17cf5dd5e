from minilog.levels import LEVELS


def parse_level(text: str) -> int:
    try:
        return LEVELS[text.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown level {text!r}; known: {', '.join(LEVELS)}") from None
