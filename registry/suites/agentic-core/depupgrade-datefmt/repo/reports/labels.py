"""Labels printed on reports."""

from reports._vendor import datefmt


def day_label(day) -> str:
    return datefmt.format_date(day, "DD.MM.YYYY")


def month_label(day) -> str:
    return datefmt.format_date(day, "YYYY-MM")


def quarter_label(day) -> str:
    raise NotImplementedError
