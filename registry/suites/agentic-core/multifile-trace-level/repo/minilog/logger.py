from minilog import levels
from minilog.format import format_line


class Logger:
    def __init__(self, level: int = levels.INFO) -> None:
        self.level = level
        self.lines: list[str] = []

    def log(self, level: int, message: str) -> None:
        if level >= self.level:
            self.lines.append(format_line(level, message))

    def debug(self, message: str) -> None:
        self.log(levels.DEBUG, message)

    def info(self, message: str) -> None:
        self.log(levels.INFO, message)

    def error(self, message: str) -> None:
        self.log(levels.ERROR, message)
