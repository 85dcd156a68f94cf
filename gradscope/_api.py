"""The names ``import gradscope as gs`` offers (``gs.tensor``, ``gs.exp``, ``gs.no_grad``, ...).

gradscope/__init__.py loads this module on first attribute access, so that commands like
``gradscope --help`` start without importing numpy.
"""
from gradscope.autograd.dtypes import (bool_ as bool, double, dtype, float, float16, float32, float64,  # noqa: A004
                                       half, int, int8, int16, int32, int64, long, short, uint8)
from gradscope.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                                          set_grad_enabled)
from gradscope.autograd.tensor import Size, Tensor
from gradscope import ops as _ops
from gradscope.ops.arith import (add, allclose, bmm, div, divide, dot, eq, equal, floor_divide, ge, gt,
                                 isclose, le, logical_and, logical_not, logical_or, logical_xor, lt, matmul,
                                 mm, mul, multiply, mv, ne, neg, negative, pow, remainder, sub, subtract,
                                 true_divide)
from gradscope.ops.creation import (Generator, arange, as_tensor, default_generator, empty, empty_like, eye,
                                    from_numpy, full, full_like, get_default_dtype, get_rng_state,
                                    initial_seed, linspace, manual_seed, multinomial, ones, ones_like, rand,
                                    rand_like, randint, randint_like, randn, randn_like, randperm, seed,
                                    set_default_dtype, set_rng_state, tensor, zeros, zeros_like)
from gradscope.ops.indexing import gather, index_select, masked_fill, scatter_add, tril, triu
from gradscope.ops.pointwise import (abs, ceil, clamp, cos, erf, exp, floor, isfinite, isinf, isnan, log,
                                     log1p, maximum, minimum, nan_to_num, relu, round, rsqrt, sigmoid, sign,
                                     sin, sqrt, tanh, where)
from gradscope.ops.reduce import (all, amax, amin, any, argmax, argmin, count_nonzero, cumsum, log_softmax,
                                  logsumexp, max, mean, min, norm, prod, softmax, std, std_mean, sum, var,
                                  var_mean)
from gradscope.ops.shape import (broadcast_to, cat, chunk, clone, concat, concatenate, flatten, flip,
                                 permute, repeat, reshape, split, squeeze, stack, swapaxes, swapdims, t,
                                 transpose, unbind, unflatten, unsqueeze)
from gradscope import autograd, utils
from gradscope import nn  # noqa: E402
from gradscope import optim  # noqa: E402
from gradscope.serialization import load, save  # noqa: E402
from gradscope.errors import GradscopeError
from gradscope.autograd.anomaly import is_anomaly_enabled, set_detect_anomaly as set_anomaly_enabled  # noqa: E402

clip = clamp
concat = cat
is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731
numel = lambda t: t.numel()  # noqa: E731


def is_floating_point(t: Tensor) -> bool:
    return t.is_floating_point()
