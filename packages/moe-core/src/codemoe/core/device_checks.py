"""What every prepared device check (``python -m codemoe.<package>.device_check``) shares: the name
of the device it ran on and one line per check, PASS or FAIL with its figures, and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["device_name", "report"]


def device_name(device: str) -> str:
    """The accelerator's own name for ``cuda[:N]``; the device string otherwise."""
    import torch

    return torch.cuda.get_device_name(device) if device.startswith("cuda") else device


def report(name: str, results: dict[str, dict[str, Any]], json_path: Path | None) -> int:
    """Print each check's line, write ``json_path`` when given; the exit status (0: every check passed)."""
    import torch

    for check, result in results.items():
        figures = ", ".join(f"{k}={v}" for k, v in result.items() if k != "ok")
        print(f"{'PASS' if result['ok'] else 'FAIL'} {check}" + (f" ({figures})" if figures else ""))
    if json_path:
        json_path.write_text(json.dumps({"device": name, "torch": torch.__version__, "checks": results}, indent=2))
    return 0 if all(r["ok"] for r in results.values()) else 1
