from collections_extra.dedupe import dedupe

__all__ = ["dedupe"]
