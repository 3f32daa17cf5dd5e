"""``python -m codemoe.sandbox run|doctor|serve ...``."""

from codemoe.sandbox.cli import main

raise SystemExit(main())
