"""Common base for the typed, frozen specifications."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Frozen pydantic model; unknown keys in files are accepted and ignored.

    File formats may carry extra keys (sources, notes); they are kept out of the
    typed object. ``unknown_keys`` reports them so that callers can warn about typos.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @classmethod
    def unknown_keys(cls, data: dict[str, Any]) -> list[str]:
        known = set(cls.model_fields)
        for f in cls.model_fields.values():
            if f.alias:
                known.add(f.alias)
        return sorted(k for k in data if k not in known)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, as written to YAML/JSON."""
        return self.model_dump(mode="json", exclude_none=True)
