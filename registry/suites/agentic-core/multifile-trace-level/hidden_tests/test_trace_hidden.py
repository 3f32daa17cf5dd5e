from minilog import levels
from minilog.config import parse_level
from minilog.format import format_line
from minilog.logger import Logger


def test_level_value_and_table():
    assert levels.TRACE == 5 < levels.DEBUG
    assert levels.LEVELS["TRACE"] == 5


def test_parse_mixed_case():
    assert parse_level(" Trace ") == 5


def test_format_and_filter():
    assert format_line(5, "x") == "[TRC] x"
    logger = Logger(parse_level("debug"))
    logger.trace("no")
    assert logger.lines == []
