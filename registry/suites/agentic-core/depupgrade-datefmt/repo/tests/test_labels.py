from datetime import date

from reports import labels
from reports._vendor import datefmt


def test_day_label():
    assert labels.day_label(date(2024, 7, 9)) == "09.07.2024"


def test_month_label():
    assert labels.month_label(date(2024, 7, 9)) == "2024-07"


def test_uses_datefmt_2():
    assert datefmt.__version__ == "2.0"


def test_quarter_label():
    assert labels.quarter_label(date(2024, 7, 9)) == "2024-Q3"
