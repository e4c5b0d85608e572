"""`evalsuite` command line. Each subcommand lives in `evalsuite.commands.<module>`.

Only argparse is imported here and in the command modules' top level, so `evalsuite --help` and
`evalsuite tasks` return at once; a command's heavy imports happen inside its `main(args)`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from evalsuite.errors import RunFailure, UserError, say

# subcommand modules, in the order `--help` lists them
COMMANDS = [
    "run", "tasks", "table", "report",
    "chair", "chair_gt", "pope", "relevance",
    "world", "tiny_ckpt", "csr_convert",
]


class _Version(argparse.Action):
    """`--version`: the version every result row and report records (evalsuite/version.py: the package
    version plus `git describe` in a checkout), read only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from evalsuite.version import code_version

        print(f"evalsuite {code_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalsuite",
        description="Evaluate VLM checkpoints (lmms-eval tasks, CHAIR, CLIP relevance), keep versioned "
                    "results, and write HTML reports across training iterations.",
    )
    parser.add_argument("--version", action=_Version, help="the code version results and reports record, and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"evalsuite.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from evalsuite.env import setup_process

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # a command that reads its own arguments (`run`: the config loader) gets them unparsed in args.raw
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "raw_args", False):
        args.raw = argv[argv.index(args.command) + 1:]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    setup_process(verbose=args.verbose)  # offline env + logging, once, before any command runs
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        say(f"evalsuite: error: {exc}")
        return exc.exit_code
    except RunFailure as exc:
        say(f"evalsuite: failed: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("evalsuite: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
