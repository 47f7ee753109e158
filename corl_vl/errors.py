"""User-facing errors.

Bad input (a corrupt image, a missing column, a misaligned paired dataset, an unknown adapter, bad YAML)
raises :class:`CorlError` with one line that names the file/row/field. The CLI prints that line and exits
with status 2 instead of a traceback; library callers can catch it like any exception.
"""


class CorlError(Exception):
    """An error caused by the user's input or configuration, reported as one clear line."""
