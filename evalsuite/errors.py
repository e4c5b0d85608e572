"""The one exception type the CLI turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad input from the user (a path, a field, a flag). The message names the file/field."""

    exit_code = 2


class RunFailure(RuntimeError):
    """A run that started and then failed (a model crashed mid-task); finished work is kept. Exit 1."""

    exit_code = 1
