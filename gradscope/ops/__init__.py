"""The op catalogue. Importing this package installs operators and op methods on Tensor."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, creation, indexing, inplace, pointwise, reduce, shape

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
    "isfinite": pointwise.isfinite, "nan_to_num": pointwise.nan_to_num, "floor": pointwise.floor,
    "ceil": pointwise.ceil, "round": pointwise.round,
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
    "bernoulli_": inplace.bernoulli_,
}


def _install() -> None:
    for name, fn in _METHODS.items():
        setattr(Tensor, name, fn)

    def _dtype_method(target: str) -> Any:
        def convert(self: Tensor) -> Tensor:
            return shape.to_dtype(self, target)

        convert.__name__ = target
        return convert

    for method, np_name in (("float", "float32"), ("double", "float64"), ("half", "float16"),
                            ("long", "int64"), ("int", "int32"), ("bool", "bool"), ("short", "int16")):
        setattr(Tensor, method, _dtype_method(np_name))
    Tensor.cpu = lambda self, *args, **kwargs: self
    Tensor.cuda = lambda self, *args, **kwargs: shape.to(self, "cuda")
    Tensor.T = property(shape.T_property)
    Tensor.mT = property(shape.mT)
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
    Tensor.__invert__ = lambda self: arith.bitwise_not(self) if self._data.dtype.kind != "b" else arith.logical_not(self)
    Tensor.__and__ = arith.logical_and
    Tensor.__or__ = arith.logical_or
    Tensor.__xor__ = arith.logical_xor
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
