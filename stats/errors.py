"""The one error of bad input: :class:`ContractError` (imports nothing of clinrel, so every
module of ``stats`` can raise it without a circle)."""
from __future__ import annotations

from collections.abc import Sequence


class ContractError(ValueError):
    """A table breaks its contract. The message says where, what and how to fix it."""

    def __init__(self, message: str, *, source: str | None = None, column: str | None = None,
                 rows: Sequence[int] | None = None):
        super().__init__(message)
        self.source = source
        self.column = column
        self.rows = list(rows) if rows is not None else []
