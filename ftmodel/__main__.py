from ftmodel.cli import main

raise SystemExit(main())
