"""Optimizers and learning-rate schedulers with PyTorch's API (``gs.optim.SGD``, ...)."""
from gradscope.optim import lr_scheduler
from gradscope.optim.adadelta import Adadelta
from gradscope.optim.adagrad import Adagrad
from gradscope.optim.adam import Adam, AdamW
from gradscope.optim.adamax import Adamax
from gradscope.optim.lbfgs import LBFGS
from gradscope.optim.nadam import NAdam, RAdam
from gradscope.optim.optimizer import (Optimizer, register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)
from gradscope.optim.rmsprop import RMSprop
from gradscope.optim.rprop import ASGD, Rprop
from gradscope.optim.sgd import SGD

__all__ = ["ASGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "SGD",
           "lr_scheduler", "register_optimizer_step_post_hook", "register_optimizer_step_pre_hook"]
