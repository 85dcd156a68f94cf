"""The debugger's own helpers, kept apart from the PyTorch mirror.

``gradscope.utils`` is ``torch.utils`` for the import swap (hook handles, ``checkpoint``,
``data``); what the tool itself needs lives here instead: the boundary around the user's code
(:mod:`~gradscope._tool.usercode`), output files written atomically
(:mod:`~gradscope._tool.files`), and whose code a stack frame runs
(:mod:`~gradscope._tool.frames`, which anomaly mode uses too, to leave gradscope's frames out of
a node's creation stack).

The leading underscore says that no model file imports this package: it is not part of the
``torch`` namespace gradscope stands in for. It is the lowest layer (it imports only
:mod:`gradscope.errors` and the standard library), so that every other layer may use it.
"""
