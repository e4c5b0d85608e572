"""The one exception type the CLI turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad input from the user (a path, a field, a flag). The message names the file/field."""

    exit_code = 2
