from minilog import levels

TAGS = {levels.DEBUG: "DBG", levels.INFO: "INF", levels.WARNING: "WRN", levels.ERROR: "ERR"}


def format_line(level: int, message: str) -> str:
    return f"[{TAGS[level]}] {message}"
