"""``python -m gemkd.experiments.cli``: the gemkd command line."""

import sys

from gemkd.experiments.cli import main

sys.exit(main())
