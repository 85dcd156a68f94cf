"""The op catalogue. Importing this package installs operators and op methods on Tensor."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import numpy_style_keywords
from gradscope.ops import (arith, creation, decompositions, elementwise, indexing, inplace, linalg, pointwise,
                           reduce, shape, sorting, statistics)

_METHODS = {
    # arithmetic
    "add": arith.add, "sub": arith.sub, "subtract": arith.sub, "mul": arith.mul, "multiply": arith.mul,
    "div": arith.div, "divide": arith.div, "true_divide": arith.div, "pow": arith.pow, "neg": arith.neg,
    "negative": arith.neg, "matmul": arith.matmul, "mm": arith.mm, "bmm": arith.bmm, "dot": arith.dot,
    "mv": arith.mv, "eq": arith.eq, "ne": arith.ne, "lt": arith.lt, "le": arith.le, "gt": arith.gt,
    "ge": arith.ge, "equal": arith.equal, "allclose": arith.allclose, "isclose": arith.isclose,
    "logical_and": arith.logical_and, "logical_or": arith.logical_or, "logical_not": arith.logical_not,
    "logical_xor": arith.logical_xor, "floor_divide": arith.floor_divide, "remainder": arith.remainder,
    # pointwise
    "exp": pointwise.exp, "log": pointwise.log, "log1p": pointwise.log1p, "sqrt": pointwise.sqrt,
    "rsqrt": pointwise.rsqrt, "abs": pointwise.abs, "sign": pointwise.sign, "sin": pointwise.sin,
    "cos": pointwise.cos, "tanh": pointwise.tanh, "sigmoid": pointwise.sigmoid, "relu": pointwise.relu,
    "erf": pointwise.erf, "clamp": pointwise.clamp, "clip": pointwise.clamp, "maximum": pointwise.maximum,
    "minimum": pointwise.minimum, "isnan": pointwise.isnan, "isinf": pointwise.isinf,
    "isfinite": pointwise.isfinite, "nan_to_num": pointwise.nan_to_num, "absolute": pointwise.abs,
    "sgn": pointwise.sign, "where": lambda self, condition, other: pointwise.where(condition, self, other),
    # reductions
    "sum": reduce.sum, "mean": reduce.mean, "var": reduce.var, "std": reduce.std, "max": reduce.max,
    "min": reduce.min, "amax": reduce.amax, "amin": reduce.amin, "argmax": reduce.argmax,
    "argmin": reduce.argmin, "any": reduce.any, "all": reduce.all, "logsumexp": reduce.logsumexp,
    "norm": reduce.norm, "softmax": reduce.softmax, "log_softmax": reduce.log_softmax, "prod": reduce.prod,
    "cumsum": reduce.cumsum, "count_nonzero": reduce.count_nonzero,
    # shape
    "reshape": shape.reshape, "view": shape.view, "view_as": shape.view_as, "reshape_as": shape.reshape_as,
    "flatten": shape.flatten, "unflatten": shape.unflatten, "squeeze": shape.squeeze,
    "unsqueeze": shape.unsqueeze, "permute": shape.permute, "transpose": shape.transpose,
    "swapaxes": shape.transpose, "swapdims": shape.transpose, "t": shape.t, "expand": shape.expand,
    "expand_as": shape.expand_as, "broadcast_to": shape.broadcast_to, "repeat": shape.repeat,
    "clone": shape.clone, "contiguous": shape.contiguous, "to": shape.to, "split": shape.split,
    "chunk": shape.chunk, "unbind": shape.unbind, "flip": shape.flip,
    # gather / scatter
    "gather": indexing.gather, "scatter_add": indexing.scatter_add, "index_select": indexing.index_select,
    "masked_fill": indexing.masked_fill, "tril": indexing.tril, "triu": indexing.triu,
    # in place
    "add_": inplace.add_, "sub_": inplace.sub_, "mul_": inplace.mul_, "div_": inplace.div_,
    "pow_": inplace.pow_, "clamp_": inplace.clamp_, "clip_": inplace.clamp_, "copy_": inplace.copy_,
    "fill_": inplace.fill_, "zero_": inplace.zero_, "relu_": inplace.relu_, "tanh_": inplace.tanh_,
    "sigmoid_": inplace.sigmoid_, "exp_": inplace.exp_, "neg_": inplace.neg_,
    "masked_fill_": inplace.masked_fill_, "uniform_": inplace.uniform_, "normal_": inplace.normal_,
    "bernoulli_": inplace.bernoulli_, "resize_": inplace.resize_, "resize_as_": inplace.resize_as_,
    # creation from a tensor
    "new_zeros": creation.new_zeros, "new_ones": creation.new_ones, "new_empty": creation.new_empty,
    "new_full": creation.new_full, "new_tensor": creation.new_tensor, "type_as": shape.type_as,
    "multinomial": creation.multinomial, "bernoulli": creation.bernoulli,
    # more elementwise math
    "reciprocal": elementwise.reciprocal, "log2": elementwise.log2, "log10": elementwise.log10,
    "expm1": elementwise.expm1, "tan": elementwise.tan, "sinh": elementwise.sinh, "cosh": elementwise.cosh,
    "asin": elementwise.asin, "acos": elementwise.acos, "atan": elementwise.atan, "arcsin": elementwise.asin,
    "arccos": elementwise.acos, "arctan": elementwise.atan, "asinh": elementwise.asinh,
    "acosh": elementwise.acosh, "atanh": elementwise.atanh, "logit": elementwise.logit,
    "square": elementwise.square, "floor": elementwise.floor, "ceil": elementwise.ceil,
    "trunc": elementwise.trunc, "fix": elementwise.trunc, "round": elementwise.round, "frac": elementwise.frac,
    "atan2": elementwise.atan2, "arctan2": elementwise.atan2, "lerp": elementwise.lerp,
    "addcmul": elementwise.addcmul, "addcdiv": elementwise.addcdiv, "clamp_min": elementwise.clamp_min,
    "clamp_max": elementwise.clamp_max, "xlogy": elementwise.xlogy, "logaddexp": elementwise.logaddexp,
    "fmod": elementwise.fmod, "bitwise_and": elementwise.bitwise_and, "bitwise_or": elementwise.bitwise_or,
    "bitwise_xor": elementwise.bitwise_xor, "bitwise_not": arith.bitwise_not, "greater": arith.gt,
    "greater_equal": arith.ge, "less": arith.lt, "less_equal": arith.le, "not_equal": arith.ne,
    # ordering
    "sort": sorting.sort, "argsort": sorting.argsort, "msort": sorting.msort, "topk": sorting.topk,
    "kthvalue": sorting.kthvalue, "median": sorting.median, "cummax": sorting.cummax,
    "cummin": sorting.cummin, "cumprod": sorting.cumprod,
    # more shape ops
    "roll": shape.roll, "repeat_interleave": shape.repeat_interleave, "tile": shape.tile,
    "narrow": shape.narrow, "select": shape.select, "movedim": shape.movedim, "moveaxis": shape.movedim,
    "fliplr": shape.fliplr, "flipud": shape.flipud, "diagonal": shape.diagonal, "diag": shape.diag,
    "diag_embed": shape.diag_embed, "diagflat": shape.diagflat, "trace": shape.trace, "unfold": shape.unfold,
    "tensor_split": shape.tensor_split,
    # more gather / scatter
    "scatter": indexing.scatter, "index_add": indexing.index_add, "index_fill": indexing.index_fill,
    "index_copy": indexing.index_copy, "index_put": indexing.index_put,
    "scatter_reduce": indexing.scatter_reduce, "erfinv": elementwise.erfinv, "erfc": elementwise.erfc,
    "nansum": reduce.nansum, "nanmean": reduce.nanmean, "ravel": shape.ravel, "diff": shape.diff,
    "take_along_dim": shape.take_along_dim, "unique": sorting.unique, "bincount": sorting.bincount,
    "histc": sorting.histc,
    "masked_select": indexing.masked_select, "nonzero": indexing.nonzero, "argwhere": indexing.argwhere,
    "take": indexing.take,
    # products
    "outer": linalg.outer, "ger": linalg.outer, "addmm": linalg.addmm, "addmv": linalg.addmv,
    "addr": linalg.addr, "baddbmm": linalg.baddbmm, "addbmm": linalg.addbmm, "to_dense": linalg.to_dense,
    "det": linalg.det, "logdet": linalg.logdet, "slogdet": linalg.slogdet, "inverse": linalg.inv,
    "cholesky": linalg.cholesky,
    "to_sparse": linalg.to_sparse, "to_sparse_coo": linalg.to_sparse, "coalesce": linalg.coalesce,
    "indices": linalg.sparse_indices, "values": linalg.sparse_values, "_indices": linalg.sparse_indices,
    "_values": linalg.sparse_values,
    # random fills
    "exponential_": inplace.exponential_, "log_normal_": inplace.log_normal_, "geometric_": inplace.geometric_,
    "cauchy_": inplace.cauchy_, "random_": inplace.random_, "fill_diagonal_": inplace.fill_diagonal_,
    # more torch functions
    "cross": linalg.cross, "kron": linalg.kron, "rot90": shape.rot90, "hypot": elementwise.hypot, "inner": linalg.inner,
    "lgamma": elementwise.lgamma, "logcumsumexp": reduce.logcumsumexp, "signbit": elementwise.signbit,
    "heaviside": elementwise.heaviside, "renorm": reduce.renorm, "matrix_power": linalg.matrix_power,
    "masked_scatter": indexing.masked_scatter, "cov": statistics.cov, "quantile": statistics.quantile,
    "nanquantile": statistics.nanquantile, "unique_consecutive": sorting.unique_consecutive, "mode": statistics.mode,
    "svd": decompositions.svd_legacy, "qr": decompositions.qr_legacy, "pinverse": decompositions.pinverse,
}

# In-place forms written generically from the out-of-place op (name + "_").
_INPLACE_OF = ("abs", "absolute", "sqrt", "rsqrt", "log", "log1p", "log2", "log10", "expm1", "sin", "cos",
               "tan", "sinh", "cosh", "asin", "acos", "atan", "erf", "floor", "ceil", "trunc", "fix", "round",
               "frac", "sign", "sgn", "reciprocal", "square", "clamp_min", "clamp_max", "lerp", "addcmul",
               "addcdiv", "atan2", "fmod", "remainder", "floor_divide", "logit", "xlogy", "scatter",
               "scatter_add", "index_add", "index_fill", "index_copy", "index_put", "scatter_reduce", "erfinv", "erfc", "cumsum", "cumprod", "tril", "triu", "nan_to_num", "bitwise_and",
               "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or", "logical_not",
               "logical_xor", "eq", "ne", "lt", "le", "gt", "ge", "baddbmm", "addmm", "addmv", "addr",
               "addbmm", "true_divide", "subtract", "multiply", "divide", "lgamma", "hypot", "renorm",
               "masked_scatter")

# In-place forms of shape ops: the tensor itself takes the new shape.
_RESHAPING_INPLACE_OF = ("t", "transpose", "unsqueeze", "squeeze", "swapaxes", "swapdims")


def _install() -> None:
    for name, fn in _METHODS.items():
        setattr(Tensor, name, numpy_style_keywords(fn))
    for name in _INPLACE_OF:
        if name + "_" not in _METHODS:
            setattr(Tensor, name + "_", inplace.inplace_of(_METHODS[name], name + "_"))
    for name in _RESHAPING_INPLACE_OF:
        setattr(Tensor, name + "_", inplace.reshaping_inplace(_METHODS[name], name + "_"))

    def _dtype_method(target: str) -> Any:
        def convert(self: Tensor) -> Tensor:
            return shape.to_dtype(self, target)

        convert.__name__ = target
        return convert

    for method, np_name in (("float", "float32"), ("double", "float64"), ("half", "float16"),
                            ("long", "int64"), ("int", "int32"), ("bool", "bool"), ("short", "int16"),
                            ("byte", "uint8"), ("char", "int8")):
        setattr(Tensor, method, _dtype_method(np_name))
    Tensor.cpu = shape.cpu
    Tensor.cuda = shape.cuda
    Tensor.T = property(shape.T_property)
    Tensor.mT = property(shape.mT)
    Tensor.mH = property(shape.mT)  # real tensors: the conjugate transpose is the transpose
    Tensor.__getitem__ = shape.getitem
    Tensor.__setitem__ = shape.setitem
    Tensor.__add__ = arith.add
    Tensor.__radd__ = arith.add
    Tensor.__sub__ = arith.sub
    Tensor.__rsub__ = arith.rsub
    Tensor.__mul__ = arith.mul
    Tensor.__rmul__ = arith.mul
    Tensor.__truediv__ = arith.div
    Tensor.__rtruediv__ = arith.rdiv
    Tensor.__floordiv__ = arith.floor_divide
    Tensor.__rfloordiv__ = lambda self, other: arith.floor_divide(other, self)
    Tensor.__mod__ = arith.remainder
    Tensor.__pow__ = arith.pow
    Tensor.__rpow__ = arith.rpow
    Tensor.__matmul__ = arith.matmul
    Tensor.__rmatmul__ = arith.rmatmul
    Tensor.__neg__ = arith.neg
    Tensor.__pos__ = lambda self: self
    Tensor.__abs__ = pointwise.abs
    Tensor.__invert__ = arith.bitwise_not
    Tensor.__and__ = Tensor.__rand__ = elementwise.bitwise_and
    Tensor.__or__ = Tensor.__ror__ = elementwise.bitwise_or
    Tensor.__xor__ = Tensor.__rxor__ = elementwise.bitwise_xor
    Tensor.__iand__ = Tensor.bitwise_and_
    Tensor.__ior__ = Tensor.bitwise_or_
    Tensor.__ixor__ = Tensor.bitwise_xor_
    Tensor.__eq__ = arith.eq
    Tensor.__ne__ = arith.ne
    Tensor.__lt__ = arith.lt
    Tensor.__le__ = arith.le
    Tensor.__gt__ = arith.gt
    Tensor.__ge__ = arith.ge
    Tensor.__iadd__ = inplace.add_
    Tensor.__isub__ = inplace.sub_
    Tensor.__imul__ = inplace.mul_
    Tensor.__itruediv__ = inplace.div_
    Tensor.__hash__ = lambda self: id(self)


_install()
