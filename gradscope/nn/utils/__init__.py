"""Utilities on parameters and gradients (clipping, vector conversion) and ``rnn`` (packed sequences)."""
from gradscope.nn.utils.clip_grad import (clip_grad_norm, clip_grad_norm_, clip_grad_value_,  # noqa: F401
                                          clip_grads_with_norm_, get_total_norm)
from gradscope.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from gradscope.nn.utils import rnn  # noqa: F401
from gradscope.nn.utils import parametrizations, parametrize  # noqa: F401
from gradscope.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm  # noqa: F401
from gradscope.nn.utils.weight_norm import remove_weight_norm, weight_norm  # noqa: F401

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "parametrizations", "parametrize", "remove_spectral_norm", "remove_weight_norm", "rnn", "spectral_norm",
           "weight_norm"]
