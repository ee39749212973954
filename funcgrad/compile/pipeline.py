"""jit's rewrite pipeline written out in order: which pattern rewrite runs at which stage.

Rewrites never register themselves on import; this module is the one place that says what runs
and in which order, and `install()` (called once by funcgrad's package import) fills the stage
lists that compile/passes.py's `optimize` and transforms/ad.py's forward pass read:

- FORWARD: before grad differentiates a forward (so the vjp is the fused primitive's rule);
- PRE: before simplification, for forward-only programs under jit;
- POST: after simplification, CSE and DCE, on the whole step (forward and backward).
"""
from __future__ import annotations

from funcgrad.compile import passes
from funcgrad.compile.rewrites import (
    attention,
    attention_bwd,
    attention_lse,
    remat,
    rows,
)
from funcgrad.transforms import ad

FORWARD = (
    rows.rewrite,             # hand-written layer norm / softmax / log_softmax -> fused rows
)
PRE = (
    rows.rewrite,
)
POST = (
    attention_lse.rewrite,    # attention + attention_stats of one step -> attention_fwdl (+lse)
    attention_bwd.rewrite,    # attention_dq + attention_dkv of one operand set -> attention_bwd
    attention_bwd.pack,       # right after the rewrite above, which makes what it matches
    attention.rewrite,        # composed softmax(q k^T) v -> the flash attention primitive
    remat.rewrite,            # large elementwise results read late -> recomputed there
)


def install() -> None:
    """Fill the stage lists with the rewrites above (idempotent)."""
    ad.FORWARD_REWRITES[:] = FORWARD
    passes.PRE_REWRITES[:] = PRE
    passes.POST_REWRITES[:] = POST
