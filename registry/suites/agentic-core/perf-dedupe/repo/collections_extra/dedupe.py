"""Removing duplicates from sequences."""


def dedupe(items):
    """The items without repeats, first occurrences in their original order."""
    result = []
    for item in items:
        seen = False
        for kept in result:
            if kept == item:
                seen = True
                break
        if not seen:
            result.append(item)
    return result
