"""The one way a table or view name enters SQL text: the project's own names, double-quoted.

Names read back from the warehouse's catalog are never formatted into SQL (whoever can write the
warehouse chooses them, and a name is text DuckDB would run); the code drops, re-creates, exports and
counts by the names its schema package defines, and quotes each through :func:`quoted`, which refuses
a name that could end the quoting or hide in a terminal instead of escaping it.
"""

from __future__ import annotations

import re

from strix_pipeline.warehouse.errors import WarehouseError

# a double quote would end the identifier; control characters have no place in a name and would act
# on the terminal of whoever reads the message that names it
_UNSAFE = re.compile('["\x00-\x1f\x7f-\x9f]')


class UnsafeName(WarehouseError):
    """A table or view name with a quote or a control character; refused, never quoted around."""


def quoted(name: str) -> str:
    """``name`` as a double-quoted SQL identifier; :class:`UnsafeName` for a quote or control character."""
    if not name or _UNSAFE.search(name):
        raise UnsafeName(f"the name {name!r} has a quote or a control character; refused, not put in SQL")
    return f'"{name}"'
