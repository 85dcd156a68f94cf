"""``kl_divergence(p, q)`` for the pairs of families gradscope has closed forms for."""
from __future__ import annotations

from typing import Callable

from gradscope.autograd.tensor import Tensor
from gradscope.distributions.categorical import Bernoulli, Categorical
from gradscope.distributions.distribution import Distribution
from gradscope.distributions.independent import Independent, _sum_rightmost
from gradscope.distributions.normal import Normal
from gradscope.ops import activations, arith, pointwise, reduce

_KL: dict = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator registering ``fn(p, q)`` as the KL divergence of ``type_p`` from ``type_q``."""
    def decorator(fn: Callable) -> Callable:
        _KL[(type_p, type_q)] = fn
        return fn

    return decorator


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), batched; NotImplementedError for pairs without a registered closed form."""
    for (type_p, type_q), fn in _KL.items():
        if isinstance(p, type_p) and isinstance(q, type_q):
            return fn(p, q)
    raise NotImplementedError(f"No KL(p || q) is implemented for p = {type(p).__name__}, q = {type(q).__name__}")


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    var_ratio = arith.pow(arith.div(p.scale, q.scale), 2)
    t1 = arith.pow(arith.div(arith.sub(p.loc, q.loc), q.scale), 2)
    return arith.mul(arith.sub(arith.sub(arith.add(var_ratio, t1), 1), pointwise.log(var_ratio)), 0.5)


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = arith.mul(p.probs, arith.sub(p.logits, q.logits))
    t = t.masked_fill(arith.eq(q.probs, 0).expand_as(t), float("inf"))
    t = t.masked_fill(arith.eq(p.probs, 0).expand_as(t), 0.0)
    return reduce.sum(t, -1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    t1 = arith.mul(p.probs, arith.sub(activations.softplus(arith.neg(q.logits)), activations.softplus(arith.neg(p.logits))))
    t1 = t1.masked_fill(arith.eq(q.probs, 0), float("inf")).masked_fill(arith.eq(p.probs, 0), 0.0)
    t2 = arith.mul(arith.rsub(p.probs, 1), arith.sub(activations.softplus(q.logits), activations.softplus(p.logits)))
    t2 = t2.masked_fill(arith.eq(q.probs, 1), float("inf")).masked_fill(arith.eq(p.probs, 1), 0.0)
    return arith.add(t1, t2)


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independent distributions with different event dims")
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
