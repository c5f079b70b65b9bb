"""``python -m experiments.cli``: the gemkd command line."""

import sys

from experiments.cli import main

sys.exit(main())
