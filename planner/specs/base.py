"""Common base for the typed, frozen specifications."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr


class Spec(BaseModel):
    """Frozen pydantic model; unknown keys in files are accepted and ignored.

    File formats may carry extra keys (sources, notes); they are kept out of the
    typed object. ``unknown_keys`` reports them so that callers can warn about typos.
    """

    # allow_inf_nan=False: an infinite or NaN number is never physics (latency, bandwidth,
    # peak FLOP/s, capacity); pydantic rejects it with the field's name
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True,
                              allow_inf_nan=False)
    _hash: int | None = PrivateAttr(default=None)

    def __hash__(self) -> int:
        # Frozen but holding lists/dicts: hash the canonical JSON once, so that pure
        # cost-model functions can be memoized on specs.
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((type(self).__name__, self.model_dump_json())))
        return self._hash  # type: ignore[return-value]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):  # type: ignore[override]
        out = super().model_copy(update=update, deep=deep)
        object.__setattr__(out, "_hash", None)  # a copy with updates hashes anew
        return out

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
