"""Containers (Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict) and the
shape-only modules Identity, Flatten and Unflatten."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Iterable, Iterator

from gradscope.autograd.tensor import Tensor
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Identity",
           "Flatten", "Unflatten"]


def _index(idx: Any, size: int) -> int:
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range")
    return idx % size


def _delete_and_renumber(modules: OrderedDict, idx: Any) -> None:
    """Delete entries (an index or a slice) and renumber the rest "0", "1", ..."""
    keys = list(modules.keys())
    targets = keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys))]]
    for key in targets:
        del modules[key]
    remaining = list(modules.values())
    modules.clear()
    for i, module in enumerate(remaining):
        modules[str(i)] = module


class Sequential(Module):
    """Modules called in order, each on the previous one's output.

    ``Sequential(a, b, c)`` names the children ``"0"``, ``"1"``, ``"2"``; ``Sequential(OrderedDict)``
    uses the dict's keys.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self._modules))]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules.keys())[_index(idx, len(self._modules))]
        self.add_module(key, module)

    def __delitem__(self, idx: Any) -> None:
        _delete_and_renumber(self._modules, idx)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __add__(self, other: "Sequential") -> "Sequential":
        return Sequential(*self, *other)

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)
        return self

    def pop(self, index: int = -1) -> Module:
        module = self[index]
        del self[index]
        return module

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of submodules, registered under their indices."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self._modules)))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self._modules))), module)

    def __delitem__(self, idx: Any) -> None:
        _delete_and_renumber(self._modules, idx)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __repr__(self) -> str:
        """Like PyTorch: runs of modules with equal reprs collapse to ``(0-3): 4 x Layer(...)``."""
        reprs = [repr(module) for module in self]
        if not reprs:
            return self._get_name() + "()"
        runs: list[list] = []
        for index, text in enumerate(reprs):
            if runs and runs[-1][2] == text:
                runs[-1][1] = index
            else:
                runs.append([index, index, text])
        lines = []
        for start, end, text in runs:
            label = f"({start}): " if start == end else f"({start}-{end}): {end - start + 1} x "
            child = text.split("\n")
            lines.append(label + "\n".join([child[0]] + ["  " + line for line in child[1:]]))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList([*self, *other])

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)


class ModuleDict(Module):
    """A dict of submodules, registered under their keys (insertion order kept)."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        self._modules.clear()

    def update(self, modules: Any) -> None:
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self[key] = module


class ParameterList(Module):
    """A list of parameters, registered under their indices."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return self.__class__([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(idx, self._size)))

    def __setitem__(self, idx: int, param: Any) -> None:
        idx = _index(idx, self._size)
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, str(idx), param)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __iadd__(self, parameters: Iterable[Any]) -> "ParameterList":
        return self.extend(parameters)

    def append(self, value: Any) -> "ParameterList":
        new_idx = self._size
        self._size += 1
        self[new_idx] = value
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        lines = []
        for i, p in enumerate(self):
            if isinstance(p, Tensor):
                size = "x".join(str(s) for s in p.shape)
                lines.append(f"  ({i}): Parameter containing: [{p.dtype} of size {size}]")
            else:
                lines.append(f"  ({i}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


class ParameterDict(Module):
    """A dict of parameters, registered under their keys."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        self._keys: dict = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._keys[key] = None
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self) -> Iterable[str]:
        return self._keys.keys()

    def items(self) -> Iterable[tuple[str, Any]]:
        return ((k, self[k]) for k in self._keys)

    def values(self) -> Iterable[Any]:
        return (self[k] for k in self._keys)

    def update(self, parameters: Any) -> None:
        """Add entries; a plain dict is added in sorted key order, as PyTorch does."""
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            items = list(parameters.items())
        elif isinstance(parameters, dict):
            items = sorted(parameters.items())
        else:
            items = list(parameters)
        for key, value in items:
            self[key] = value

    def extra_repr(self) -> str:
        lines = []
        for k, p in self.items():
            size = "x".join(str(s) for s in p.shape)
            lines.append(f"  ({k}): Parameter containing: [{p._type_name()} of size {size}]")
        return "\n".join(lines)


class Identity(Module):
    """Returns its input unchanged (accepts and ignores constructor arguments)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Flatten(Module):
    """Flattens dims ``start_dim..end_dim`` (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expands dimension ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
