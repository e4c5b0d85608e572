"""The one exception type the CLI turns into a one-line message and exit code 2."""


MAX_MESSAGE = 2000   # characters: a message quoting a user's value never grows with the value


class UserError(Exception):
    """Bad input from the user (a path, a field, a flag). The message names the file/field.

    The message is one line of at most MAX_MESSAGE characters, whatever value it quotes (a hostile
    preset's value can be megabytes; the line must stay readable and cheap)."""

    exit_code = 2

    def __init__(self, message="", *args):
        if isinstance(message, str):
            message = " ".join(message.splitlines()) if "\n" in message or "\r" in message else message
            if len(message) > MAX_MESSAGE:
                message = message[:MAX_MESSAGE - 40] + f"... ({len(message)} characters in all)"
        super().__init__(message, *args)


class RunFailure(RuntimeError):
    """A run that started and then failed (a model crashed mid-task); finished work is kept. Exit 1.
    `collective`: every rank of a data-parallel run raised it together (evalsuite/tasks/answers.py
    fail_together), so the ranks can still meet once more before they exit (evalsuite/commands/run.py)."""

    exit_code = 1
    collective = False


def say(line: str) -> None:
    """Write one line to stderr in ONE write call and flush it.

    Under torchrun every rank shares the launcher's stderr pipe; `print` writes the text and the newline
    separately, so two ranks failing together came out as "msg msg\\n\\n" (one line holding both). One write
    of a line this short is atomic on a pipe, so each rank's line stays whole. Bidi and zero-width control
    characters of a quoted value are written out visibly (evalsuite/bidi.py): a file name holding U+202E
    would otherwise display reversed in the terminal."""
    import sys

    from evalsuite.bidi import visible

    sys.stderr.write(visible(line) + "\n")
    sys.stderr.flush()
