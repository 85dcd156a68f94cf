"""Automatic differentiation: the engine, grad mode, custom Functions, anomaly mode, gradcheck."""
from gradscope.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                                          set_grad_enabled)
from gradscope.autograd.tensor import Tensor
from gradscope.autograd.engine import backward, grad
from gradscope.autograd.function import Function, FunctionCtx
from gradscope.autograd.anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from gradscope.autograd.gradcheck import GradcheckError, gradcheck
from gradscope.autograd import graph
from gradscope.autograd.variable import Variable

__all__ = ["Function", "FunctionCtx", "GradcheckError", "Tensor", "backward", "detect_anomaly",
           "enable_grad", "grad", "gradcheck", "graph", "inference_mode", "is_anomaly_enabled",
           "is_grad_enabled", "no_grad", "set_detect_anomaly", "set_grad_enabled", "Variable"]
