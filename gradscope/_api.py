"""The names ``import gradscope as gs`` offers (``gs.tensor``, ``gs.exp``, ``gs.no_grad``, ...).

gradscope/__init__.py loads this module on first attribute access, so that commands like
``gradscope --help`` start without importing numpy.
"""
from gradscope.autograd.dtypes import (bfloat16, bool_ as bool, double, dtype, float, float16, float32, float64,  # noqa: A004
                                       half, int, int8, int16, int32, int64, long, short, uint8)
from gradscope.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                                          set_grad_enabled)
from gradscope.autograd.tensor import Size, Tensor
from gradscope import ops as _ops
from gradscope.ops.arith import (add, allclose, bmm, div, divide, dot, eq, equal, floor_divide, ge, gt,
                                 isclose, le, logical_and, logical_not, logical_or, logical_xor, lt, matmul,
                                 mm, mul, multiply, mv, ne, neg, negative, pow, remainder, sub, subtract,
                                 true_divide)
from gradscope.autograd.device import device, get_default_device, set_default_device
from gradscope.autograd.dtypes import (channels_last, channels_last_3d, contiguous_format, finfo, iinfo,
                                       memory_format, preserve_format)
from gradscope.ops.creation import LEGACY_TYPES as _LEGACY_TYPES
from gradscope.ops.creation import (Generator, arange, bernoulli, logspace, normal, as_tensor, default_generator, empty, empty_like, eye,
                                    from_numpy, full, full_like, get_default_dtype, get_rng_state,
                                    initial_seed, linspace, manual_seed, multinomial, ones, ones_like, rand,
                                    rand_like, randint, randint_like, randn, randn_like, randperm, seed,
                                    set_default_dtype, set_rng_state, tensor, zeros, zeros_like)
from gradscope.ops.indexing import gather, index_select, masked_fill, scatter_add, tril, triu
from gradscope.ops.pointwise import (abs, clamp, cos, erf, exp, isfinite, isinf, isnan, log, log1p, maximum,
                                     minimum, nan_to_num, relu, rsqrt, sigmoid, sign, sin, sqrt, tanh, where)
from gradscope.ops.elementwise import erfc, erfinv
from gradscope.ops.elementwise import (acos, acosh, addcdiv, addcmul, arctan2, asin, asinh, atan, atan2, atanh,
                                       bitwise_and, bitwise_or, bitwise_xor, ceil, clamp_max, clamp_min, cosh,
                                       expm1, floor, fmod, frac, lerp, log2, log10, logaddexp, logit, reciprocal,
                                       round, sinh, square, tan, trunc, xlogy)
from gradscope.ops.arith import bitwise_not
from gradscope.ops.sorting import (argsort, bincount, bucketize, cummax, cummin, cumprod, histc, kthvalue, median,
                                   msort, searchsorted, sort, topk, unique)
from gradscope.ops.linalg import (addbmm, addmm, addmv, addr, baddbmm, cdist, dist, einsum, ger, outer,
                                  sparse_coo_tensor, spmm, tensordot)
from gradscope.ops.indexing import (argwhere, index_add, index_copy, index_fill, index_put, masked_select, nonzero,
                                    scatter, scatter_reduce, take)
from gradscope.ops.reduce import (all, amax, amin, any, argmax, argmin, count_nonzero, cumsum, log_softmax,
                                  logsumexp, max, mean, min, nanmean, nansum, norm, prod, softmax, std, std_mean,
                                  sum, var, var_mean)
from gradscope.ops.shape import diff, ravel, take_along_dim
from gradscope.ops.shape import (broadcast_tensors, broadcast_to, cat, chunk, clone, column_stack, concat,
                                 concatenate, diag, diag_embed, diagflat, diagonal, dstack, flatten, flip, fliplr,
                                 flipud, hstack, meshgrid, movedim, narrow, permute, repeat, repeat_interleave,
                                 reshape, roll, select, split, squeeze, stack, swapaxes, swapdims, t,
                                 tensor_split, tile, trace, transpose, tril_indices, triu_indices, unbind,
                                 unflatten, unsqueeze, vstack)
from gradscope import (amp, autograd, backends, cuda, distributions, jit, linalg, multiprocessing, random, sparse,
                       special, utils)
from gradscope.ops.linalg import cholesky, det, inverse, logdet, slogdet
from gradscope.amp import autocast
from gradscope.runtime import (are_deterministic_algorithms_enabled, compile, get_float32_matmul_precision,
                               get_num_threads, set_float32_matmul_precision, set_num_threads,
                               use_deterministic_algorithms)
from gradscope import nn  # noqa: E402
from gradscope import optim  # noqa: E402
from gradscope.serialization import load, save  # noqa: E402
from gradscope.errors import GradscopeError
from gradscope.autograd.anomaly import is_anomaly_enabled, set_anomaly_enabled  # noqa: E402
from gradscope.ops.elementwise import heaviside, hypot, lgamma, signbit  # noqa: E402
from gradscope.ops.indexing import masked_scatter  # noqa: E402
from gradscope.ops.linalg import block_diag, chain_matmul, cross, inner, kron, matrix_power  # noqa: E402
from gradscope.ops.reduce import logcumsumexp, renorm, trapezoid, trapz  # noqa: E402
from gradscope.ops.shape import cartesian_prod, combinations, rot90  # noqa: E402
from gradscope.ops.sorting import unique_consecutive  # noqa: E402
from gradscope.ops.statistics import cov, mode, nanquantile, quantile  # noqa: E402
from gradscope.nn.functional import cosine_similarity, pairwise_distance, pdist  # noqa: E402
from gradscope.ops.decompositions import pinverse, qr_legacy as qr, svd_legacy as svd  # noqa: E402

clip = clamp
sgn = sign
fix = trunc
absolute = abs
moveaxis = movedim
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
concat = cat
is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731
numel = lambda t: t.numel()  # noqa: E731


def is_floating_point(t: Tensor) -> bool:
    return t.is_floating_point()

globals().update(_LEGACY_TYPES)



def _accept_numpy_style_keywords() -> None:
    """``gs.sum(x, axis=1, keepdims=True)`` works as in PyTorch: wrap every op taking ``dim``/``keepdim``."""
    import types

    from gradscope.ops._util import numpy_style_keywords

    import gradscope

    namespace = globals()
    package = vars(gradscope)  # may already hold names copied while this module was importing
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__.startswith("gradscope.ops."):
            namespace[name] = numpy_style_keywords(value)
            if package.get(name) is value:
                package[name] = namespace[name]


_accept_numpy_style_keywords()
