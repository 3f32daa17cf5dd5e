from codemoe.core.cli import main

raise SystemExit(main())
