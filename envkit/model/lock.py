"""envkit.lock.json as a value: the query a context was resolved from, the matrix it was resolved with (its
sha256), how it was generated, and the solution, so that `generate --lock` replays it exactly."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from envkit.model.flags import ResolveFlags
from envkit.model.solution import SolutionRecord

LOCK_SCHEMA = 1


@dataclass(frozen=True)
class Lock:
    envkit: str
    matrix_sha256: str
    query: ResolveFlags
    offline: bool
    site: Optional[str]
    host_march: str
    solution: SolutionRecord

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": LOCK_SCHEMA,
            "envkit": self.envkit,
            "matrix_sha256": self.matrix_sha256,
            "query": self.query.to_dict(),
            "generate": {"offline": self.offline, "site": self.site, "host_march": self.host_march},
            "solution": self.solution.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> "Lock":
        """Raises ValueError naming what is wrong when `doc` is not a lock this envkit reads."""
        if not isinstance(doc, dict) or doc.get("schema") != LOCK_SCHEMA:
            raise ValueError(f"not schema {LOCK_SCHEMA}")
        query, generate = doc.get("query"), doc.get("generate") or {}
        if not isinstance(query, dict) or not isinstance(generate, dict) or "solution" not in doc:
            raise ValueError("no query and solution")
        site = generate.get("site")
        return cls(envkit=str(doc.get("envkit", "")), matrix_sha256=str(doc.get("matrix_sha256", "")),
                   query=ResolveFlags.from_mapping({str(k): str(v) for k, v in query.items()}),
                   offline=bool(generate.get("offline", False)), site=None if site is None else str(site),
                   host_march=str(generate.get("host_march", "")), solution=SolutionRecord.from_json(doc["solution"]))
