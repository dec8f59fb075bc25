"""`EvaluationResult` with the fields and methods of OpenEvolve's (openevolve/evaluation_result.py,
Apache-2.0), for evaluators that import it when `openevolve` is not installed.

`metrics` holds the scores (numbers; other values are kept as text), `artifacts` any side
information (text or bytes) that the search stores per program, shows in the report and feeds
to the next LLM prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvaluationResult:
    metrics: dict[str, Any]
    artifacts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, Any]) -> EvaluationResult:
        return cls(metrics=metrics)

    def to_dict(self) -> dict[str, Any]:
        return self.metrics

    def has_artifacts(self) -> bool:
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list[str]:
        return list(self.artifacts.keys())

    def get_artifact_size(self, key: str) -> int:
        if key not in self.artifacts:
            return 0
        value = self.artifacts[key]
        if isinstance(value, bytes):
            return len(value)
        return len(str(value).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        return sum(self.get_artifact_size(key) for key in self.artifacts)
