"""Puts the vendored datefmt on the import path."""

import sys
from pathlib import Path

DATEFMT_DIR = Path(__file__).resolve().parent.parent / "vendor" / "datefmt-1.0"
if str(DATEFMT_DIR) not in sys.path:
    sys.path.insert(0, str(DATEFMT_DIR))

import datefmt  # noqa: E402

__all__ = ["datefmt"]
