"""Errors that stop the service from starting."""

from __future__ import annotations


class StartupError(Exception):
    """The service cannot start. The message is one line that names the problem and the fix;
    ``tailor serve`` prints it to stderr and exits with ``EXIT_STATUS``, without a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


EXIT_STATUS = 1
