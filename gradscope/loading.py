"""Model files: a plain Python file that defines a model, its data and its loss.

The convention (see docs/model-files.md):

* ``model``: an ``nn.Module`` instance, or ``build_model()`` returning one;
* ``batch(step)`` returning ``(inputs, targets)``, or module-level ``inputs`` and ``targets``;
  ``inputs`` may be a tensor or a tuple of tensors (passed to the model as positional args);
* ``loss_fn(output, targets)`` returning a scalar tensor, or ``compute_loss(model, batch)``;
* optionally ``make_optimizer(parameters)``; otherwise SGD with the given learning rate.

The file may use gradscope (``import gradscope as gs; from gradscope import nn``) or PyTorch
(``import torch; from torch import nn``); the model's class decides which engine runs it.

Loading a file leaves ``sys.path`` and ``sys.modules`` as it found them: the file's folder is on
``sys.path`` (first, as for ``python FILE``) only while the file's code runs, which includes every
later call into it through the :class:`Workload` (see :class:`~gradscope._tool.usercode.ImportScope`).
numpy, and torch when the file imports it, are imported before the folder is added, so a
``numpy/`` or ``torch/`` folder beside the file never stands in for the real package.

Everything here raises :class:`ModelError` subclasses whose one-line message names the file, so the
CLI can print it and exit with code 3.
"""
from __future__ import annotations

import ast
import contextlib
import itertools
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from gradscope._tool.usercode import ImportScope, describe_raise, describe_syntax_error, passes_through
from gradscope.engines import Engine, EngineError, engine_of, engines_for_code, select_engine
from gradscope.errors import ModelError

__all__ = ["ModelFileError", "UserCodeError", "Batch", "Workload", "load_model_file"]

_module_counter = itertools.count()


class ModelFileError(ModelError):
    """The model file cannot be read, does not follow the convention, or returns wrong values."""


class UserCodeError(ModelError):
    """The user's code raised. ``original`` is the user's exception (its traceback is kept)."""

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(message)
        self.original = original
        self.__cause__ = original


@dataclass(frozen=True)
class Batch:
    """One training batch.

    Attributes:
        inputs: the model's positional arguments.
        targets: whatever ``loss_fn`` takes as its second argument (usually a tensor).
        raw: the value ``batch(step)`` returned, handed to ``compute_loss`` unchanged.
    """

    inputs: tuple
    targets: Any
    raw: Any

    @classmethod
    def from_raw(cls, raw: Any) -> "Batch":
        """The batch of what ``batch(step)`` returned, ``(inputs, targets)`` (already checked)."""
        inputs, targets = raw
        return cls(inputs=tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,), targets=targets, raw=raw)


@dataclass
class Workload:
    """A model plus how to get its data and loss: what every monitor runs.

    Build one from a model file with :func:`load_model_file`, or directly from objects
    (``Workload(model, batch_fn=..., loss_fn=...)``), as :mod:`gradscope.testing` does.

    Args:
        model: the ``nn.Module``.
        batch_fn: ``batch(step) -> (inputs, targets)``.
        loss_fn: ``loss_fn(output, targets) -> scalar Tensor``.
        compute_loss: ``compute_loss(model, batch) -> scalar Tensor``; used instead of ``loss_fn``.
        optimizer_fn: ``make_optimizer(parameters) -> optimizer``; SGD when None.
        path: the model file (for source lines), or None.
        name: how messages name the workload (the path as the user typed it); defaults to ``path``.
        engine: the engine adapter that runs ``model``; found from the model when None.
        imports: the model file's import scope (its folder on ``sys.path``), active around every
            call into the user's code; None for objects built in the program itself.
    """

    model: Any
    batch_fn: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], Any] | None = None
    compute_loss: Callable[[Any, Any], Any] | None = None
    optimizer_fn: Callable[[Any], Any] | None = None
    path: Path | None = None
    name: str | None = None
    engine: Engine | None = None
    imports: ImportScope | None = field(default=None, repr=False)
    _module_lines: dict[str, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.engine is None and self.model is not None:
            self.engine = engine_of(self.model)
            if self.engine is None or not self.engine.is_module(self.model):
                raise ModelFileError(f"{self.label}: the model is {_describe(self.model)}; "
                                     "expected an nn.Module instance (gradscope or torch)")

    @property
    def label(self) -> str:
        """How messages name this workload: the model file, or the model's class."""
        if self.name is not None:
            return self.name
        return str(self.path) if self.path is not None else type(self.model).__name__

    # ------------------------------------------------------------------ data, loss, optimizer
    def batch(self, step: int) -> Batch:
        """Call ``batch(step)`` and check it returned ``(inputs, targets)``."""
        raw = self._call_user(f"batch({step})", self.batch_fn, step)
        if not isinstance(raw, (tuple, list)) or len(raw) != 2:
            what = f"{len(raw)} values" if isinstance(raw, (tuple, list)) else _describe(raw)
            raise ModelFileError(f"{self.label}: batch({step}) returned {what}; "
                                 "expected a tuple (inputs, targets)")
        return Batch.from_raw(raw)

    def forward(self, batch: Batch) -> Any:
        """Run the model on ``batch.inputs``; an error names the failing module and its input shapes."""
        return self._call_user("the model's forward", self.model, *batch.inputs)

    def loss(self, batch: Batch) -> Any:
        """Forward pass and loss for ``batch``: a checked scalar tensor that requires grad."""
        if self.compute_loss is not None:
            value = self._call_user("compute_loss(model, batch)", self.compute_loss, self.model, batch.raw)
            return self._check_loss(value, "compute_loss")
        output = self.forward(batch)
        value = self._call_user("loss_fn(output, targets)", self.loss_fn, output, batch.targets)
        return self._check_loss(value, "loss_fn")

    def backward(self, loss: Any) -> None:
        """``loss.backward()``; an error (e.g. raised by the user's custom Function) becomes a ModelError."""
        self._call_user("backward", loss.backward)

    def make_optimizer(self, lr: float) -> Any:
        """The user's ``make_optimizer(parameters)``, or the engine's ``optim.SGD(parameters, lr=lr)``.

        ``make_optimizer`` may return ``(optimizer, scheduler)``: the scheduler then steps right
        after every optimizer step, from the optimizer's own step post hook (``optimizer.step``
        itself is left alone, so torch's schedulers see the method they wrapped).
        """
        if self.optimizer_fn is None:
            return self.engine.sgd(self.model.parameters(), lr=lr)
        optimizer = self._call_user("make_optimizer(parameters)", self.optimizer_fn, self.model.parameters())
        if isinstance(optimizer, tuple) and len(optimizer) == 2:
            optimizer = self._with_scheduler(*optimizer)
        if not (hasattr(optimizer, "step") and hasattr(optimizer, "zero_grad")):
            raise ModelFileError(f"{self.label}: make_optimizer returned {_describe(optimizer)}; "
                                 "expected an optimizer (with step() and zero_grad())")
        return optimizer

    # ------------------------------------------------------------------ names and source lines
    def module_names(self) -> dict[int, str]:
        """``id(module) -> dotted path`` for every module of the model ("" is the model itself)."""
        return {id(module): name for name, module in self.model.named_modules()}

    def module_line(self, module_path: str) -> int | None:
        """The model-file line that defines the module at ``module_path``, if it can be found.

        Looks for ``self.<attr> = ...`` for the path's components (innermost first), then for the
        class of the model itself.
        """
        if self.path is None:
            return None
        if self._module_lines is None:
            self._module_lines = _attribute_lines(self.path)
        for part in reversed(module_path.split(".") if module_path else []):
            if part in self._module_lines:
                return self._module_lines[part]
        return self._module_lines.get("class " + type(self.model).__name__)

    # ------------------------------------------------------------------ helpers
    def user_code(self) -> contextlib.AbstractContextManager:
        """A block of several calls of the model file's code in a row (a training step's forward,
        loss and backward): the file's import scope is entered once for all of them (each call
        enters and leaves it otherwise, about 5 us each). Only the file's code and the engine's
        should run inside: an import made there could find the file's folder first."""
        return self.imports.active() if self.imports is not None else contextlib.nullcontext()

    def _call_user(self, what: str, fn: Callable, *args: Any) -> Any:
        """The one boundary around user code: whatever it raises (``SystemExit`` and stray
        ``KeyboardInterrupt`` included) becomes a :class:`UserCodeError`, except real interrupts,
        gradscope's own control flow and anomaly-mode errors, which pass through."""
        try:
            if self.imports is None:
                return fn(*args)
            with self.imports.active():
                return fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the user's code may raise anything
            if passes_through(exc) or type(exc).__name__ == "AnomalyError":
                raise
            raise UserCodeError(self._describe_failure(what, exc), exc) from exc

    def _with_scheduler(self, optimizer: Any, scheduler: Any) -> Any:
        if not hasattr(scheduler, "step"):
            raise ModelFileError(f"{self.label}: make_optimizer returned (optimizer, {_describe(scheduler)}); "
                                 "expected (optimizer, scheduler) with a scheduler that has step()")

        def step_scheduler(optimizer: Any, args: Any, kwargs: Any) -> None:
            self._call_user("the scheduler's step()", scheduler.step)

        if callable(getattr(optimizer, "register_step_post_hook", None)):
            optimizer.register_step_post_hook(step_scheduler)
            return optimizer
        # an optimizer of the user's own without step hooks: its step is wrapped instead
        optimizer_step = optimizer.step

        def step(*args: Any, **kwargs: Any) -> Any:
            result = optimizer_step(*args, **kwargs)
            step_scheduler(optimizer, args, kwargs)
            return result

        optimizer.step = step
        return optimizer

    def _check_loss(self, value: Any, source: str) -> Any:
        if not self.engine.is_tensor(value):
            raise ModelFileError(f"{self.label}: {source} returned {_describe(value)}; expected a scalar tensor")
        if value.numel() != 1:
            raise ModelFileError(f"{self.label}: {source} returned a tensor of shape {tuple(value.shape)}; "
                                 "expected a scalar (reduce it with .mean() or .sum())")
        if not value.requires_grad:
            raise ModelFileError(f"{self.label}: the loss from {source} does not require grad "
                                 "(was it computed under no_grad or detached?)")
        return value

    def _describe_failure(self, what: str, exc: BaseException) -> str:
        message = f"{self.label}: {what} {describe_raise(exc)}"
        module_frame = None
        line = None
        for frame, lineno in _traceback_frames(exc):
            if self.path is not None and Path(frame.f_code.co_filename) == self.path:
                line = lineno
            candidate = frame.f_locals.get("self")
            if frame.f_code.co_name == "forward" and _is_module(candidate):
                module_frame = frame
        if module_frame is not None and self.model is not None:
            module = module_frame.f_locals["self"]
            name = self.module_names().get(id(module))
            if name is not None:
                where = f"module {name!r}" if name else "the model"
                message += f" [in {where} ({type(module).__name__})"
                shapes = _input_shapes(module_frame)
                if shapes:
                    message += f", input shape {shapes}"
                message += "]"
        if line is not None:
            message += f" (line {line})"
        return message


def load_model_file(path: str | Path, seed: int = 0, engine: str | None = None) -> Workload:
    """Execute a model file and return its :class:`Workload`.

    The random generators are seeded with ``seed`` first so the initial weights are
    reproducible: gradscope's, and torch's when the file imports torch or ``engine`` is
    ``"torch"``.

    Args:
        path: the model file.
        seed: the seed.
        engine: ``"gradscope"`` or ``"torch"`` to require that engine; None: the model's own.

    Raises:
        ModelFileError: the file is missing, has a syntax error, breaks the convention, or its
            model belongs to another engine than ``engine``.
        UserCodeError: the file's code raised while running.
    """
    file = Path(path)
    label = str(path)
    if not file.exists():
        raise ModelFileError(f"{label}: model file not found")
    if file.is_dir():
        raise ModelFileError(f"{label}: is a directory; expected a Python model file")
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{label}: cannot read the model file: {exc}") from exc
    resolved = file.resolve()
    try:
        code = compile(source, str(resolved), "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, on Python before 3.11.4
        raise ModelFileError(describe_syntax_error(label, exc)) from exc

    try:
        for used in engines_for_code(code, engine):
            used.manual_seed(seed)
    except EngineError as exc:
        raise ModelFileError(f"{label}: {exc}") from exc
    module = types.ModuleType(f"gradscope_model_{next(_module_counter)}")
    module.__file__ = str(resolved)
    workload = Workload(model=None, batch_fn=_no_batch, path=resolved, name=label,
                        imports=ImportScope(str(resolved.parent)))
    with workload.imports.active():
        sys.modules[module.__name__] = module  # dataclasses and pickling look the module up
        # running the user's model file is the point
        workload._call_user("running the model file", exec, code, module.__dict__)  # noqa: S102
    namespace = module.__dict__
    workload.model = _find_model(workload, namespace, label)
    try:
        workload.engine = select_engine(workload.model, engine)
    except EngineError as exc:
        raise ModelFileError(f"{label}: {exc}") from exc
    workload.batch_fn = _find_batch(namespace, label)
    workload.loss_fn, workload.compute_loss = _find_loss(namespace, label)
    make_optimizer = namespace.get("make_optimizer")
    if make_optimizer is not None and not callable(make_optimizer):
        raise ModelFileError(f"{label}: make_optimizer is {_describe(make_optimizer)}; expected a function")
    workload.optimizer_fn = make_optimizer
    return workload


# ---------------------------------------------------------------------- convention lookup
def _defined_names(namespace: dict[str, Any]) -> str:
    own = namespace.get("__name__")
    names = [name for name, value in namespace.items()
             if not name.startswith("_") and not isinstance(value, types.ModuleType)
             and (not isinstance(value, (types.FunctionType, type)) or value.__module__ == own)]
    return ", ".join(names) if names else "nothing"


def _find_model(workload: Workload, namespace: dict[str, Any], label: str) -> Any:
    if "model" in namespace:
        model, source = namespace["model"], "`model`"
    elif callable(namespace.get("build_model")):
        model = workload._call_user("build_model()", namespace["build_model"])
        source = "build_model()"
    else:
        raise ModelFileError(f"{label}: no model: define `model` (an nn.Module instance) or `build_model()`; "
                             f"found: {_defined_names(namespace)}")
    if not _is_module(model):
        raise ModelFileError(f"{label}: {source} is {_describe(model)}; expected an nn.Module instance")
    return model


def _find_batch(namespace: dict[str, Any], label: str) -> Callable[[int], Any]:
    batch = namespace.get("batch")
    if callable(batch):
        return batch
    if "inputs" in namespace and "targets" in namespace:
        fixed = (namespace["inputs"], namespace["targets"])
        return lambda step: fixed
    raise ModelFileError(f"{label}: no data: define `batch(step)` returning (inputs, targets), or module-level "
                         f"`inputs` and `targets`; found: {_defined_names(namespace)}")


def _find_loss(namespace: dict[str, Any], label: str) -> tuple[Callable | None, Callable | None]:
    compute_loss = namespace.get("compute_loss")
    if callable(compute_loss):
        return None, compute_loss
    loss_fn = namespace.get("loss_fn")
    if callable(loss_fn):
        return loss_fn, None
    raise ModelFileError(f"{label}: no loss: define `loss_fn(output, targets)` or `compute_loss(model, batch)` "
                         f"returning a scalar tensor; found: {_defined_names(namespace)}")


def _no_batch(step: int) -> Any:
    raise ModelFileError("the model file has not been loaded yet")


# ---------------------------------------------------------------------- small helpers
def _is_module(value: Any) -> bool:
    engine = engine_of(value)
    return engine is not None and engine.is_module(value)



def _describe(value: Any) -> str:
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"


def _traceback_frames(exc: BaseException) -> Iterator[tuple[types.FrameType, int]]:
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def _input_shapes(frame: types.FrameType) -> str:
    code = frame.f_code
    names = code.co_varnames[1:code.co_argcount]
    shapes = [tuple(value.shape) for value in (frame.f_locals.get(name) for name in names)
              if getattr(value, "shape", None) is not None]
    if not shapes:
        return ""
    return str(shapes[0]) if len(shapes) == 1 else ", ".join(str(shape) for shape in shapes)


def _attribute_lines(path: Path) -> dict[str, int]:
    """``attr -> line`` of the first ``self.attr = ...`` or ``add_module("attr", ...)``, and
    ``"class Name" -> line``, in a file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    lines: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            _keep_first(lines, "class " + node.name, node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("add_module", "register_module") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            _keep_first(lines, node.args[0].value, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    _keep_first(lines, target.attr, node.lineno)
    return lines


def _keep_first(lines: dict[str, int], key: str, lineno: int) -> None:
    if key not in lines or lineno < lines[key]:
        lines[key] = lineno
