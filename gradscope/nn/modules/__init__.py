"""Module classes. Each file defines ``__all__``; one import line per file."""
from gradscope.nn.modules.module import Module  # noqa: F401
from gradscope.nn.modules.container import *  # noqa: F401,F403
from gradscope.nn.modules.rnn import *  # noqa: F401,F403
from gradscope.nn.modules.linear import *  # noqa: F401,F403
from gradscope.nn.modules.conv import *  # noqa: F401,F403
from gradscope.nn.modules.pooling import *  # noqa: F401,F403
from gradscope.nn.modules.normalization import *  # noqa: F401,F403
from gradscope.nn.modules.dropout import *  # noqa: F401,F403
from gradscope.nn.modules.sparse import *  # noqa: F401,F403
from gradscope.nn.modules.activation import *  # noqa: F401,F403
from gradscope.nn.modules.loss import *  # noqa: F401,F403
from gradscope.nn.modules.attention import *  # noqa: F401,F403
from gradscope.nn.modules.padding import *  # noqa: F401,F403
from gradscope.nn.modules.resampling import *  # noqa: F401,F403
from gradscope.nn.modules.distance import *  # noqa: F401,F403
from gradscope.nn.modules.transformer import *  # noqa: F401,F403
from gradscope.nn.modules.lazy import *  # noqa: F401,F403
