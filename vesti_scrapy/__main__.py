from vesti_scrapy.cli import main

raise SystemExit(main())
