from sample_app.run import main

raise SystemExit(main())
