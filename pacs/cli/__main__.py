"""`python -m pacs.cli <verb>`, as `pacs <verb>`."""

import sys

from pacs.cli.main import main

sys.exit(main())
