"""JSON numbers in the status: rounded when written, checked when read back.

`finite` rounds a figure for the status (None when there is none to report); `number` reads
one back and refuses anything that is not a finite number. Used by the other modules of
`slascaler.status` only.
"""

from __future__ import annotations

import math


def finite(value: float | None, digits: int = 1) -> float | None:
    """`value` rounded; None when there is no finite value to report."""
    return round(value, digits) if value is not None and math.isfinite(value) else None


def number(item: object, key: str) -> float:
    """`item` as a float; ValueError naming `key` when it is not a finite number."""
    if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
        raise ValueError(f"{key} holds {item!r}")
    return float(item)
