from minilog.config import parse_level
from minilog.logger import Logger


def test_info_filters_debug():
    logger = Logger(parse_level("info"))
    logger.debug("hidden")
    logger.info("shown")
    assert logger.lines == ["[INF] shown"]


def test_trace():
    logger = Logger(parse_level("TRACE"))
    logger.trace("very detailed")
    logger.debug("detailed")
    assert logger.lines == ["[TRC] very detailed", "[DBG] detailed"]
