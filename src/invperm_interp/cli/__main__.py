"""``python -m invperm_interp.cli``: the ``invperm`` command."""

import sys

from .main import main

sys.exit(main())
