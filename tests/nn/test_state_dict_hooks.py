"""State-dict hooks as PyTorch runs them (issue 25): ``state_dict`` pre/post hooks, load pre/post
hooks with the key lists they may edit, and old ``weight_g``/``weight_v`` checkpoints loading into
``parametrizations.weight_norm``. Each scenario runs on gradscope and torch (``compare``)."""
from __future__ import annotations

import gc
import pickle
import weakref
from typing import Any

import numpy as np
import pytest

import gradscope as gs


def test_state_dict_pre_and_post_hooks(compare: Any) -> None:
    def run(T: Any, log: Any) -> None:
        inner = T.nn.Linear(2, 2)
        outer = T.nn.Sequential(inner)
        inner.register_state_dict_pre_hook(lambda module, prefix, keep_vars: log("pre", prefix, keep_vars))
        inner.register_state_dict_post_hook(
            lambda module, state, prefix, metadata: log("post", prefix, sorted(state), metadata.get("version")))
        state = outer.state_dict(keep_vars=True)
        log("keys", sorted(state), {key: dict(value) for key, value in state._metadata.items()})

    compare(run)


def test_a_public_state_dict_post_hook_must_return_none_the_private_one_may_replace(compare: Any) -> None:
    def run(T: Any, log: Any) -> None:
        module = T.nn.Linear(2, 2)
        handle = module.register_state_dict_post_hook(lambda *args: {})
        log.raises("public", module.state_dict, "must return None")
        handle.remove()
        module._register_state_dict_hook(lambda module, state, prefix, metadata: {"replaced": 1})
        log("private", module.state_dict())

    compare(run)


def test_load_state_dict_pre_hooks_with_and_without_module(compare: Any) -> None:
    def run(T: Any, log: Any) -> None:
        source = T.nn.Sequential(T.nn.Linear(3, 2))
        target = T.nn.Sequential(T.nn.Linear(3, 2))
        layer = target[0]

        def without_module(state, prefix, metadata, strict, missing, unexpected, errors):
            log("without", prefix, sorted(state), strict, list(missing), list(unexpected), list(errors))

        def with_module(module, state, prefix, metadata, strict, missing, unexpected, errors):
            log("with", module is layer, prefix, sorted(state))

        layer._register_load_state_dict_pre_hook(without_module)
        layer._register_load_state_dict_pre_hook(with_module, True)
        layer.register_load_state_dict_pre_hook(with_module)
        log("result", str(target.load_state_dict(source.state_dict())))
        log("weights equal", bool((layer.weight == source[0].weight).all()))

    compare(run)


def test_load_state_dict_post_hook_edits_the_key_lists_strict_mode_checks(compare: Any) -> None:
    def run(T: Any, log: Any) -> None:
        nested = T.nn.Linear(2, 2)
        wrapped = T.nn.ModuleList([nested])

        def add_keys(module, incompatible):
            log("post", module is nested, list(incompatible.missing_keys), list(incompatible.unexpected_keys))
            incompatible.missing_keys.append("foo")
            incompatible.unexpected_keys.append("bar")

        handle = nested.register_load_state_dict_post_hook(add_keys)
        result = wrapped.load_state_dict(wrapped.state_dict(), strict=False)
        log("non-strict", list(result.missing_keys), list(result.unexpected_keys))
        log.raises("strict", lambda: wrapped.load_state_dict(wrapped.state_dict()), 'Missing key(s) in state_dict: "foo"')
        handle.remove()

        def clear(module, incompatible):
            incompatible.missing_keys.clear()
            incompatible.unexpected_keys.clear()

        nested.register_load_state_dict_post_hook(clear)
        state = wrapped.state_dict()
        state["extra"] = T.ones(1)
        result = wrapped.load_state_dict(state, strict=True)
        log("cleared", list(result.missing_keys), list(result.unexpected_keys))
        log.raises("return value", lambda: nested.register_load_state_dict_post_hook(lambda m, k: 1) and
                   wrapped.load_state_dict(wrapped.state_dict()), "not expected to return new values")

    compare(run)


def test_load_pre_hook_holds_its_module_weakly_and_pickles() -> None:
    gc.disable()
    try:
        module = gs.nn.Linear(2, 2)
        module._register_load_state_dict_pre_hook(print, True)
        ref = weakref.ref(module)
        del module
        assert ref() is None  # no reference cycle through the hook keeps it alive
    finally:
        gc.enable()
    module = gs.nn.Linear(2, 2)
    module._register_load_state_dict_pre_hook(_pickleable_hook, True)
    copy = pickle.loads(pickle.dumps(module))
    copy.load_state_dict(module.state_dict())
    assert _pickleable_hook.calls == [True]


def _pickleable_hook(module, *args):
    _pickleable_hook.calls.append(isinstance(module, gs.nn.Linear))


_pickleable_hook.calls = []


def test_module_pickled_before_load_post_hooks_existed_still_loads() -> None:
    module = gs.nn.Linear(2, 2)
    del module.__dict__["_load_state_dict_post_hooks"]
    copy = pickle.loads(pickle.dumps(module))
    calls = []
    copy.register_load_state_dict_post_hook(lambda m, keys: calls.append(m is copy))
    copy.load_state_dict(module.state_dict())
    assert calls == [True]


def test_old_weight_norm_checkpoint_loads_into_the_new_weight_norm(compare: Any) -> None:
    def run(T: Any, log: Any) -> None:
        T.manual_seed(0)
        with pytest.warns(FutureWarning) if T is not gs else _no_check():
            old = T.nn.utils.weight_norm(T.nn.Linear(3, 2))
        checkpoint = old.state_dict()
        log("old keys", sorted(checkpoint))
        new = T.nn.utils.parametrizations.weight_norm(T.nn.Linear(3, 2))
        log("load", str(new.load_state_dict(checkpoint)))
        log("new keys", sorted(new.state_dict()))
        x = T.tensor([[1.0, -2.0, 0.5]])
        log("same output", bool(((old(x) - new(x)).abs() < 1e-6).all()))
        container = T.nn.Sequential(T.nn.utils.parametrizations.weight_norm(T.nn.Linear(3, 2)))
        log("nested", str(container.load_state_dict({"0." + key: value for key, value in checkpoint.items()})))

    compare(run)


class _no_check:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_weight_norm_values_after_loading_match_the_old_module() -> None:
    gs.manual_seed(3)
    old = gs.nn.utils.weight_norm(gs.nn.Conv1d(2, 4, 3), dim=0)
    new = gs.nn.utils.parametrizations.weight_norm(gs.nn.Conv1d(2, 4, 3), dim=0)
    new.load_state_dict(old.state_dict())
    x = gs.randn(1, 2, 5)
    np.testing.assert_allclose(new(x).detach().numpy(), old(x).detach().numpy(), rtol=1e-6, atol=1e-6)
