import sys
from datetime import date


def test_only_the_new_version_is_imported():
    from reports import labels

    assert labels.datefmt.__version__ == "2.0"
    assert not any(p.endswith("datefmt-1.0") for p in sys.path)


def test_labels():
    from reports import labels

    assert labels.quarter_label(date(2023, 1, 31)) == "2023-Q1"
    assert labels.quarter_label(date(2023, 12, 1)) == "2023-Q4"
    assert labels.day_label(date(2023, 12, 1)) == "01.12.2023"
    assert labels.month_label(date(1999, 3, 3)) == "1999-03"
