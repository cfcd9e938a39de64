"""The HLO of a small jitted JAX function (x @ w + b, GELU, * 2) before and after XLA's optimisation.

Needs jax; on a machine without it the record says so in its notes and holds no HLO.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

SHOWN_IN = ("chapters/08_writing_kernels",)
NEEDS = "any"


def run(ctx: Any) -> dict[str, Any]:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax must not grab the GPU's memory
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        ctx.note(f"jax is not importable here ({exc}); no HLO recorded")
        return {}

    def f(x, w, b):  # noqa: ANN001, ANN202
        return jax.nn.gelu(x @ w + b) * 2.0

    x, w, b = jnp.ones((128, 256), jnp.float32), jnp.ones((256, 512), jnp.float32), jnp.ones((512,), jnp.float32)
    lowered = jax.jit(f).lower(x, w, b)
    compiled = lowered.compile()
    out: dict[str, Any] = {"jax": jax.__version__, "backend": jax.default_backend(),
                           "function": inspect.getsource(f), "shapes": {"x": [128, 256], "w": [256, 512], "b": [512]},
                           "hlo_after_optimisation": compiled.as_text()[:12000]}
    try:
        out["hlo_before_optimisation"] = lowered.as_text(dialect="hlo")[:8000]
    except Exception as exc:  # older jax: no dialect argument
        ctx.note(f"HLO before optimisation unavailable: {exc}")
    return out
