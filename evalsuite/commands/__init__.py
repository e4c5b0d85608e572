"""One module per `evalsuite` subcommand: `register(subparsers)` (argparse only) + `main(args) -> int`."""
