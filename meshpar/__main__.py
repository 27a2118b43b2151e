"""``python -m meshpar``: the same as the ``meshpar`` command (see :mod:`meshpar.cli`)."""
import sys

from meshpar.cli import main

if __name__ == "__main__":
    sys.exit(main())
