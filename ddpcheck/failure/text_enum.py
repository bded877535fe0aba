"""The house's string enums: each says its value in text as in JSON (a plain str Enum says its name)."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """A str Enum whose str() and f-strings give its value, as its JSON does."""

    def __str__(self) -> str:
        return self.value
