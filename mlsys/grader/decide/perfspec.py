"""A lab's performance spec: ``labs/source/<lab>/perf.toml``, one :class:`PerfCase` per ``perf_*`` cell.

The TOML keys are documented in :mod:`mlsys.grader.decide.trusted` (the API for lab authors); this module reads
and checks them, and finds the spec of a lab. Moved out of ``trusted.py`` (issue 48, "a size it can keep").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PerfCase:
    """One ``perf_*`` cell's spec (see the module docstring for the TOML keys)."""

    grade_id: str
    function: str
    points: float
    args: dict[str, list[int]]
    quick_args: dict[str, list[int]]
    dtype: str
    reference: str
    baseline: str = "reference"
    forbid: str = "matmul"
    full_at: float = 0.5
    zero_at: float = 0.0
    rtol: float = 1e-2
    atol: float = 1e-2
    repeats: int = 20
    warmup: int = 3
    baseline_expr: str = ""
    fresh_args: dict[str, list[int]] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    flops: str = ""
    bytes: str = ""
    kernels: str = "any"
    rounds: int = 3
    world: int = 1

    @classmethod
    def from_dict(cls, grade_id: str, d: dict[str, Any]) -> PerfCase:
        known = {"function", "points", "args", "quick_args", "dtype", "reference", "baseline", "forbid", "full_at",
                 "zero_at", "rtol", "atol", "repeats", "warmup", "baseline_expr", "fresh_args", "kwargs",
                 "flops", "bytes", "kernels", "rounds", "world"}
        missing = {"function", "points", "args", "dtype", "reference"} - set(d)
        if missing:
            raise ValueError(f"perf spec [{grade_id}]: missing keys {sorted(missing)}")
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"perf spec [{grade_id}]: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
        if d.get("baseline", "reference") not in ("reference", "copy"):
            raise ValueError(f"perf spec [{grade_id}]: baseline must be 'reference' or 'copy', got {d['baseline']!r}")
        if d.get("forbid", "matmul") not in ("matmul", "compute", "collectives", "none"):
            raise ValueError(f"perf spec [{grade_id}]: forbid must be 'matmul', 'compute', 'collectives' or 'none', "
                             f"got {d['forbid']!r}")
        if not isinstance(d.get("world", 1), int) or not 1 <= d.get("world", 1) <= 64:
            raise ValueError(f"perf spec [{grade_id}]: world must be a number of ranks from 1 to 64")
        if not float(d.get("full_at", 0.5)) > float(d.get("zero_at", 0.0)):
            raise ValueError(f"perf spec [{grade_id}]: expected full_at > zero_at")
        if not isinstance(d["args"], dict) or not d["args"]:
            raise ValueError(f"perf spec [{grade_id}]: args must be a table name -> shape, e.g. {{ x = [1024] }}")
        if "fresh_args" in d and (not isinstance(d["fresh_args"], dict) or list(d["fresh_args"]) != list(d["args"])):
            raise ValueError(f"perf spec [{grade_id}]: fresh_args must name the same arguments as args, in order")
        kw = d.get("kwargs", {})
        if not isinstance(kw, dict) or not all(isinstance(v, (bool, int, float, str)) for v in kw.values()):
            raise ValueError(f"perf spec [{grade_id}]: kwargs must be a table of plain values, e.g. {{ causal = true }}")
        if d.get("kernels", "any") not in ("any", "triton"):
            raise ValueError(f"perf spec [{grade_id}]: kernels must be 'any' or 'triton', got {d['kernels']!r}")
        if int(d.get("rounds", 3)) < 1 or int(d.get("repeats", 20)) < 1:
            raise ValueError(f"perf spec [{grade_id}]: rounds and repeats must be at least 1")
        if not grade_id.startswith("perf_"):
            raise ValueError(f"perf spec: table names are perf_* grade ids, got {grade_id!r}")
        return cls(grade_id=grade_id, function=str(d["function"]), points=float(d["points"]),
                   args={k: [int(n) for n in v] for k, v in d["args"].items()},
                   quick_args={k: [int(n) for n in v] for k, v in d.get("quick_args", d["args"]).items()},
                   dtype=str(d["dtype"]), reference=str(d["reference"]), baseline=d.get("baseline", "reference"),
                   forbid=d.get("forbid", "matmul"), full_at=float(d.get("full_at", 0.5)),
                   zero_at=float(d.get("zero_at", 0.0)), rtol=float(d.get("rtol", 1e-2)),
                   atol=float(d.get("atol", 1e-2)), repeats=int(d.get("repeats", 20)), warmup=int(d.get("warmup", 3)),
                   baseline_expr=str(d.get("baseline_expr", "")),
                   fresh_args={k: [int(n) for n in v] for k, v in d.get("fresh_args", d["args"]).items()},
                   kwargs=dict(kw), flops=str(d.get("flops", "")), bytes=str(d.get("bytes", "")),
                   kernels=str(d.get("kernels", "any")), rounds=int(d.get("rounds", 3)), world=int(d.get("world", 1)))


def load_spec(path: Path | str) -> dict[str, PerfCase]:
    """Parse a ``perf.toml`` into {grade_id: PerfCase}; a malformed spec raises ``ValueError``."""
    import tomllib

    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return {gid: PerfCase.from_dict(gid, d) for gid, d in data.items()}


def find_spec(lab: str) -> Path | None:
    """``perf.toml`` for ``lab``: the working folder first (a released lab), then the course's labs folder, then
    the copy the installed package carries (``mlsys/_labs/<lab>/perf.toml``: Colab, a notebook alone)."""
    from importlib.util import find_spec as find_module

    from mlsys.runtime.paths import labs_root

    packaged = find_module("mlsys._labs")
    shipped = [Path(d) / lab / "perf.toml" for d in (packaged.submodule_search_locations or [])] if packaged else []
    for p in (Path.cwd() / "perf.toml", labs_root() / "source" / lab / "perf.toml",
              labs_root() / "release" / lab / "perf.toml", *shipped):
        if p.is_file():
            return p
    return None
