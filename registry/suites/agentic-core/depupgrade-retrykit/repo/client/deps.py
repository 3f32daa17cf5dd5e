"""Vendored third-party code used by the client."""

import importlib.util
from pathlib import Path

RETRYKIT_VERSION = "1.4"
_PATH = Path(__file__).resolve().parent.parent / "third_party" / f"retrykit-{RETRYKIT_VERSION}" / "retrykit.py"
_spec = importlib.util.spec_from_file_location("retrykit", _PATH)
retrykit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(retrykit)
