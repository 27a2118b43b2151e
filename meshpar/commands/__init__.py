"""One module per ``meshpar`` subcommand: ``register(subparsers)`` and ``run(args)``."""
