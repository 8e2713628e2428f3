"""The exceptions of the tessel module, one per exit status of the `tessel` command.

Every message is exactly what the CLI prints after "tessel: error: " (file:line:col for .tsl and
.npu input, file:line and key for descriptions, the instruction for the simulator)."""


class Error(Exception):
    """Any failure of a tessel call; `exit_code` is the CLI's exit status for it."""

    exit_code = None

    def __init__(self, message, exit_code=None, stdout="", stderr=""):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr


class UserError(Error):
    """Bad input (exit 1): the message names the place and the reason."""

    exit_code = 1


class UsageError(Error):
    """A bad argument or option (exit 2), e.g. an unknown --sync mode."""

    exit_code = 2


class NoGpuError(UsageError):
    """A GPU target on a machine without a GPU (exit 2)."""


class InternalError(Error):
    """A bug in tessel (exit 3), or a tessel process that died (signal) or gave no result."""

    exit_code = 3


class TimeoutError(Error):
    """The child process ran past the call's `timeout` and was killed."""
