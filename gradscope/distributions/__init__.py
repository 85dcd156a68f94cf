"""``gradscope.distributions``: probability distributions with PyTorch's API (``Normal``,
``MultivariateNormal``, ``Categorical``, ``Bernoulli``, ``Independent``), sampling, ``log_prob``, ``entropy`` and
``kl_divergence``; gradients flow through ``log_prob``, ``entropy`` and ``rsample``."""
from gradscope.distributions.categorical import Bernoulli, Categorical
from gradscope.distributions.distribution import Distribution, set_default_validate_args
from gradscope.distributions.independent import Independent
from gradscope.distributions.kl import kl_divergence, register_kl
from gradscope.distributions.multivariate_normal import MultivariateNormal
from gradscope.distributions.normal import Normal

__all__ = ["Bernoulli", "Categorical", "Distribution", "Independent", "MultivariateNormal", "Normal", "kl_divergence",
           "register_kl", "set_default_validate_args"]
