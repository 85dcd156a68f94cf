"""``gradscope.special``: the special functions gradscope has, under ``torch.special``'s names."""
from __future__ import annotations

from gradscope.ops.elementwise import erfc, erfinv, expm1, logit, round, xlogy
from gradscope.ops.pointwise import erf, log1p
from gradscope.ops.pointwise import sigmoid as expit
from gradscope.ops.reduce import log_softmax, logsumexp, softmax

__all__ = ["erf", "erfc", "erfinv", "expit", "expm1", "log1p", "log_softmax", "logit", "logsumexp", "round", "softmax", "xlogy"]
