import sys

from meshpar.cli import main

sys.exit(main())
