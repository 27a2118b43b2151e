"""The heterogeneous speed-up benchmark (same as ``meshpar bench hetero``).

    python benchmarks/hetero.py [--quick] [--speeds 0.9,0.3] [--out results/] [--json]

See meshpar/bench/hetero.py for what it measures.
"""
import sys

from meshpar.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "hetero"] + sys.argv[1:]))
