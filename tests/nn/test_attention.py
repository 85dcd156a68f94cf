"""nn.MultiheadAttention against torch: outputs, attention weights, input and parameter grads
for every option and mask kind; float64 gradient checks; names, init, repr and errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.autograd import gradcheck

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
E, HEADS, L, S, N = 8, 2, 4, 5, 3


def _array(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _pair(*args, **kwargs):
    theirs = torch.nn.MultiheadAttention(*args, **kwargs)
    ours = nn.MultiheadAttention(*args, **kwargs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for p, q in zip(ours.parameters(), theirs.parameters()):
        p._data[...] = q.detach().numpy()
    return ours, theirs


def _inputs(lib, arrays, self_attention):
    tensors = [gs.tensor(a, requires_grad=True) if lib is gs else torch.tensor(a, requires_grad=True)
               for a in arrays]
    if self_attention:
        return tensors[:1] * 3, tensors[:1]
    return tensors, tensors


def _close(ours, theirs, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(ours._data, theirs.detach().numpy(), rtol=rtol, atol=atol)


def _compare(ours, theirs, arrays, self_attention=False, masks=None, **kwargs):
    masks = masks or {}
    ours_args, ours_leaves = _inputs(gs, arrays, self_attention)
    theirs_args, theirs_leaves = _inputs(torch, arrays, self_attention)
    ours_out, ours_w = ours(*ours_args, **{k: gs.tensor(v) for k, v in masks.items()}, **kwargs)
    theirs_out, theirs_w = theirs(*theirs_args, **{k: torch.tensor(v) for k, v in masks.items()}, **kwargs)
    assert tuple(ours_out.shape) == tuple(theirs_out.shape)
    _close(ours_out, theirs_out)
    weight_out = _array(*ours_out.shape)
    ours_loss = (ours_out * gs.tensor(weight_out)).sum()
    theirs_loss = (theirs_out * torch.from_numpy(weight_out)).sum()
    if theirs_w is None:
        assert ours_w is None
    else:
        assert tuple(ours_w.shape) == tuple(theirs_w.shape)
        _close(ours_w, theirs_w)
        weight_w = _array(*ours_w.shape)
        ours_loss = ours_loss + (ours_w * gs.tensor(weight_w)).sum()
        theirs_loss = theirs_loss + (theirs_w * torch.from_numpy(weight_w)).sum()
    ours_loss.backward()
    theirs_loss.backward()
    for o, t in zip(ours_leaves, theirs_leaves):
        _close(o.grad, t.grad)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(p.grad, q.grad, atol=1e-5)


def _qkv(batched=True, batch_first=False, kdim=E, vdim=E, tgt=L, src=S):
    if not batched:
        return [_array(tgt, E), _array(src, kdim), _array(src, vdim)]
    if batch_first:
        return [_array(N, tgt, E), _array(N, src, kdim), _array(N, src, vdim)]
    return [_array(tgt, N, E), _array(src, N, kdim), _array(src, N, vdim)]


def _bool_mask(*shape):
    mask = RNG.random(shape) < 0.3
    mask[..., 0] = False
    return mask


OPTIONS = [
    {}, {"batch_first": True}, {"bias": False}, {"add_bias_kv": True}, {"add_zero_attn": True},
    {"kdim": 3, "vdim": 5}, {"add_bias_kv": True, "add_zero_attn": True, "batch_first": True},
]
MASKS = {
    "none": lambda: {},
    "bool_key_padding": lambda: {"key_padding_mask": _bool_mask(N, S)},
    "float_key_padding": lambda: {"key_padding_mask": _array(N, S)},
    "bool_attn_2d": lambda: {"attn_mask": _bool_mask(L, S)},
    "float_attn_2d": lambda: {"attn_mask": _array(L, S)},
    "bool_attn_3d": lambda: {"attn_mask": _bool_mask(N * HEADS, L, S)},
    "both_bool": lambda: {"attn_mask": _bool_mask(L, S), "key_padding_mask": _bool_mask(N, S)},
    "both_float": lambda: {"attn_mask": _array(L, S), "key_padding_mask": _array(N, S)},
}


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("mask", list(MASKS))
def test_matches_torch(options, mask):
    ours, theirs = _pair(E, HEADS, **options)
    arrays = _qkv(batch_first=options.get("batch_first", False), kdim=options.get("kdim", E),
                  vdim=options.get("vdim", E))
    _compare(ours, theirs, arrays, masks=MASKS[mask]())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "bool_key_padding", "both_float"])
def test_self_attention_with_one_tensor(batch_first, mask):
    ours, theirs = _pair(E, HEADS, batch_first=batch_first)
    x = _array(N, L, E) if batch_first else _array(L, N, E)
    masks = MASKS[mask]()
    if "key_padding_mask" in masks:
        masks["key_padding_mask"] = masks["key_padding_mask"][:, :L]
    if "attn_mask" in masks:
        masks["attn_mask"] = masks["attn_mask"][:, :L]
    _compare(ours, theirs, [x], self_attention=True, masks=masks)


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_need_weights_and_per_head_weights(need_weights, average):
    ours, theirs = _pair(E, 4)
    _compare(ours, theirs, _qkv(), masks={"key_padding_mask": _bool_mask(N, S)}, need_weights=need_weights,
             average_attn_weights=average)


@pytest.mark.parametrize("masks", [{}, {"key_padding_mask": _bool_mask(S)}, {"attn_mask": _bool_mask(L, S)},
                                   {"attn_mask": _array(HEADS, L, S)}], ids=["none", "kpm", "attn2d", "attn3d"])
def test_unbatched_inputs(masks):
    ours, theirs = _pair(E, HEADS)
    _compare(ours, theirs, _qkv(batched=False), masks=masks)
    ours.zero_grad()
    theirs.zero_grad()
    _compare(ours, theirs, _qkv(batched=False), masks=masks, average_attn_weights=False)


@pytest.mark.parametrize("need_weights", [True, False])
def test_is_causal_hint_with_causal_mask(need_weights):
    ours, theirs = _pair(E, HEADS, batch_first=True)
    causal = np.triu(np.ones((L, L), dtype=bool), 1)
    x = _array(N, L, E)
    _compare(ours, theirs, [x], self_attention=True, masks={"attn_mask": causal}, is_causal=True,
             need_weights=need_weights)


@pytest.mark.parametrize("shape", [(1, 1, 1), (6, 2, 1), (2, 5, 7)])
def test_several_lengths(shape):
    tgt, batch, src = shape
    ours, theirs = _pair(4, 4)
    arrays = [_array(tgt, batch, 4), _array(src, batch, 4), _array(src, batch, 4)]
    _compare(ours, theirs, arrays)


def test_eval_mode_matches_torch_and_ignores_dropout():
    ours, theirs = _pair(E, HEADS, dropout=0.5)
    ours.eval()
    theirs.eval()
    _compare(ours, theirs, _qkv(), masks={"key_padding_mask": _bool_mask(N, S)})


def test_train_mode_dropout_on_attention_weights():
    gs.manual_seed(0)
    model = nn.MultiheadAttention(E, HEADS, dropout=0.5)
    q, k, v = (gs.tensor(a) for a in _qkv())
    model.eval()
    eval_out, eval_w = model(q, k, v)
    np.testing.assert_allclose(eval_w._data.sum(-1), 1.0, rtol=1e-5)
    model.train()
    out, w = model(q, k, v, average_attn_weights=False)
    dropped = w._data == 0
    assert 0.3 < dropped.mean() < 0.7
    kept = w._data[~dropped]
    assert kept.max() > eval_w._data.max()
    assert not np.allclose(out._data, eval_out._data)


def test_fully_masked_row_gives_nan_like_torch():
    ours, theirs = _pair(E, HEADS)
    mask = np.zeros((L, S), dtype=bool)
    mask[1] = True
    ours_out, ours_w = ours(*(gs.tensor(a) for a in _qkv()), attn_mask=gs.tensor(mask))
    arrays = _qkv()
    theirs_out, theirs_w = theirs(*(torch.tensor(a) for a in arrays), attn_mask=torch.tensor(mask))
    assert np.isnan(ours_out._data[1]).all() and np.isnan(theirs_out.detach().numpy()[1]).all()
    assert np.isfinite(ours_out._data[0]).all()


@pytest.mark.parametrize("options", [{}, {"add_bias_kv": True, "add_zero_attn": True}, {"kdim": 3, "vdim": 2}])
def test_gradcheck_float64(options):
    model = nn.MultiheadAttention(4, 2, **options).double()
    rng = np.random.default_rng(3)

    def leaf(*shape):
        return gs.tensor(rng.standard_normal(shape), dtype=gs.float64, requires_grad=True)

    q, k, v = leaf(3, 2, 4), leaf(2, 2, options.get("kdim", 4)), leaf(2, 2, options.get("vdim", 4))
    mask = gs.tensor([[False, True], [False, False]])
    assert gradcheck(lambda q, k, v: model(q, k, v, key_padding_mask=mask, average_attn_weights=False), (q, k, v))
    _check_parameter_grads(lambda: model(q.detach(), k.detach(), v.detach(), key_padding_mask=mask)[0], model)


def _check_parameter_grads(run, model, eps=1e-6):
    """Central differences on every parameter entry (float64) against the backward pass."""
    probe = gs.tensor(np.random.default_rng(4).standard_normal(tuple(run().shape)), dtype=gs.float64)
    model.zero_grad()
    (run() * probe).sum().backward()
    for name, p in model.named_parameters():
        flat = p._data.reshape(-1)
        numeric = np.empty_like(flat)
        with gs.no_grad():
            for j in range(flat.size):
                original = flat[j]
                flat[j] = original + eps
                plus = float((run() * probe).sum())
                flat[j] = original - eps
                minus = float((run() * probe).sum())
                flat[j] = original
                numeric[j] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(p.grad._data.reshape(-1), numeric, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("options", [{}, {"bias": False}, {"add_bias_kv": True}, {"kdim": 3, "vdim": 5}])
def test_state_dict_keys_and_repr_match_torch(options):
    theirs = torch.nn.MultiheadAttention(E, HEADS, **options)
    ours = nn.MultiheadAttention(E, HEADS, **options)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: gs.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    assert type(ours.out_proj).__name__ == "NonDynamicallyQuantizableLinear"
    assert isinstance(ours.out_proj, nn.Linear)


def test_default_init():
    gs.manual_seed(0)
    model = nn.MultiheadAttention(16, 4, add_bias_kv=True)
    bound = np.sqrt(6.0 / (16 + 48))
    assert np.abs(model.in_proj_weight._data).max() <= bound
    assert np.abs(model.in_proj_weight._data).max() > 0.9 * bound
    np.testing.assert_array_equal(model.in_proj_bias._data, 0)
    np.testing.assert_array_equal(model.out_proj.bias._data, 0)
    assert np.abs(model.out_proj.weight._data).max() <= 1 / 4
    assert model.bias_k._data.std() > 0


def _raises(fn, expected, phrase):
    with pytest.raises(expected, match=phrase):
        fn()


def test_errors_match_torch():
    _raises(lambda: nn.MultiheadAttention(8, 3), AssertionError, "embed_dim must be divisible by num_heads")
    _raises(lambda: nn.MultiheadAttention(0, 1), ValueError, "embed_dim and num_heads must be greater than 0")
    model = nn.MultiheadAttention(E, HEADS)
    q, k, v = (gs.tensor(a) for a in _qkv())
    _raises(lambda: model(q[0], k, v), AssertionError, "For unbatched \\(2-D\\) `query`, expected `key` and `value`")
    _raises(lambda: model(q[None], k, v), AssertionError, "query should be unbatched 2D or batched 3D")
    _raises(lambda: model(q, k, v, key_padding_mask=gs.zeros(N, S, 1)), AssertionError,
            "expected `key_padding_mask` to be `None` or 2-D")
    _raises(lambda: model(q, k, v, attn_mask=gs.zeros(L, S + 1)), RuntimeError,
            r"The shape of the 2D attn_mask is \(4, 6\), but should be \(4, 5\).")
    _raises(lambda: model(q, k, v, attn_mask=gs.zeros(2, L, S)), RuntimeError, "The shape of the 3D attn_mask")
    _raises(lambda: model(q, k, v, key_padding_mask=gs.zeros(N, S + 1)), AssertionError,
            "expecting key_padding_mask shape of")
    _raises(lambda: model(q, k, v, attn_mask=gs.zeros(L, S, dtype=gs.int64)), AssertionError,
            "only bool and floating types of attn_mask are supported")
    _raises(lambda: model(q, k, v, is_causal=True), RuntimeError, "Need attn_mask if specifying the is_causal hint")
    _raises(lambda: model(q, gs.tensor(_array(S, N, E)), gs.tensor(_array(S + 1, N, E))), AssertionError,
            "does not match value shape")
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        model(q, k, v, key_padding_mask=gs.zeros(N, S, dtype=gs.bool), attn_mask=gs.zeros(L, S))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(q, k, v, key_padding_mask=gs.zeros(N, S, dtype=gs.bool), attn_mask=gs.zeros(L, S, dtype=gs.bool))


def test_module_backward_hooks_see_what_torch_shows():
    def log_for(lib, module):
        log = []
        module.register_full_backward_pre_hook(lambda m, go: log.append(("pre", [tuple(g.shape) for g in go])))
        module.register_full_backward_hook(lambda m, gi, go: log.append(("full", [tuple(g.shape) for g in gi],
                                                                        [tuple(g.shape) for g in go])))
        q, k, v = (lib.tensor(a, requires_grad=True) for a in arrays)
        out, weights = module(q, k, v)
        (out.sum() + weights.sum()).backward()
        return log

    arrays = _qkv()
    ours, theirs = _pair(E, HEADS)
    assert log_for(gs, ours) == log_for(torch, theirs)
