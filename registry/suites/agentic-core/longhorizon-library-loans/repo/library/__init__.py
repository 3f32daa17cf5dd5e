from library.core import Library

__all__ = ["Library"]
