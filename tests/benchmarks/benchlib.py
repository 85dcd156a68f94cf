"""Shared timing harness for the ``bench_*.py`` scripts.

Methodology: every variant of a workload runs in the same process, in alternating blocks (the
order rotates from block to block). Before the first block each variant is warmed up and its
iteration count is calibrated so that its share of one block takes about ``block_seconds``; that
count then stays fixed. Within a block the variants take turns ``REPEATS`` times and each
variant's time for the block is its fastest turn (mean time per iteration), which filters out
bursts of load from other processes. The ratios between variants are computed per block, and
the median of those per-block ratios is reported.

The scripts import this module only after pinning BLAS/OpenMP to one thread.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402  (after the thread pinning above)

REPO_ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3


@dataclass
class Variant:
    """One implementation of a workload.

    Attributes:
        name: short label (``"gradscope"``, ``"numpy"``, ``"torch"``...).
        step: one forward + backward; returns the loss (any scalar-like object).
        grads: the gradients left by the last ``step``, as numpy arrays, in a fixed order.
    """

    name: str
    step: Callable[[], Any]
    grads: Callable[[], list[np.ndarray]]


@dataclass
class Ratio:
    """A reported ratio ``numerator / denominator`` with an optional upper target."""

    numerator: str
    denominator: str
    target: float | None = None

    @property
    def label(self) -> str:
        return f"{self.numerator}/{self.denominator}"


@dataclass
class Workload:
    """A benchmark: how to build each variant, which ratios to report, how to check it."""

    name: str
    description: str
    builders: dict[str, Callable[[], Variant]]
    ratios: list[Ratio]
    reference: str
    rtol: float = 1e-4
    atol: float = 1e-5
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    """Timings (seconds per iteration, one entry per block) and ratios of one workload."""

    name: str
    description: str
    iterations: dict[str, int] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)
    ratios: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def import_torch() -> Any:
    """Return the ``torch`` module pinned to one thread, or ``None`` when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def import_gradscope() -> tuple[Any, str | None]:
    """Return ``(gradscope, None)`` when its engine works, else ``(None, reason)``.

    The checkout this script belongs to is imported (its root goes first on ``sys.path``, ahead
    of ``PYTHONPATH``): to compare two checkouts, run each one's own copy of the benchmark.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        gs = importlib.import_module("gradscope")
        gs.tensor([1.0]).exp()
    except Exception as exc:  # the engine may be half-written: report why and move on
        return None, f"gradscope engine not usable yet ({type(exc).__name__}: {exc})"
    return gs, None


def gradscope_nn(gs: Any, names: tuple[str, ...]) -> tuple[Any, str | None]:
    """Return ``(gs.nn, None)`` when it has every attribute in ``names``, else ``(None, reason)``."""
    try:
        nn = importlib.import_module("gradscope.nn")
    except Exception as exc:
        return None, f"gradscope.nn not importable ({type(exc).__name__}: {exc})"
    missing = [name for name in names if not hasattr(nn, name)]
    if missing:
        return None, "gradscope.nn lacks " + ", ".join(missing)
    return nn, None


# The clock of every timing: wall-clock time, or with ``--cpu-time`` this process's CPU time, which
# other processes competing for the cores inflate far less (every library runs on one thread).
clock: Callable[[], float] = time.perf_counter


def _run(step: Callable[[], Any], iterations: int) -> float:
    start = clock()
    for _ in range(iterations):
        step()
    return (clock() - start) / iterations


def calibrate(step: Callable[[], Any], block_seconds: float) -> int:
    """Warm ``step`` up and return the iteration count that makes one block last ~``block_seconds``."""
    for _ in range(2):
        step()
    iterations, elapsed = 1, 0.0
    while True:
        elapsed = _run(step, iterations) * iterations
        if elapsed >= min(0.05, block_seconds / 2) or iterations >= 1 << 16:
            break
        iterations *= 2
    per_iteration = elapsed / iterations
    return max(3, round(block_seconds / per_iteration))


def time_variants(variants: list[Variant], blocks: int, block_seconds: float) -> Result:
    """Time ``variants`` in ``blocks`` alternating blocks; fills ``iterations`` and ``times``.

    Within a block the variants take turns ``REPEATS`` times, each turn a fixed number of
    iterations; a variant's time for the block is its fastest turn (mean per iteration).
    """
    result = Result(name="", description="")
    for variant in variants:
        result.iterations[variant.name] = calibrate(variant.step, block_seconds / REPEATS)
        result.times[variant.name] = []
    for block in range(blocks):
        shift = block % len(variants)
        order = variants[shift:] + variants[:shift]
        fastest = {variant.name: float("inf") for variant in order}
        gc.collect()
        for variant in order:
            variant.step()
        for _ in range(REPEATS):
            for variant in order:
                seconds = _run(variant.step, result.iterations[variant.name])
                fastest[variant.name] = min(fastest[variant.name], seconds)
        for name, seconds in fastest.items():
            result.times[name].append(seconds)
    return result


def median_ratio(times: dict[str, list[float]], ratio: Ratio) -> dict[str, Any] | None:
    """Median and range of the per-block ratios, or ``None`` when a side was not timed."""
    if ratio.numerator not in times or ratio.denominator not in times:
        return None
    per_block = [n / d for n, d in zip(times[ratio.numerator], times[ratio.denominator])]
    median = statistics.median(per_block)
    return {
        "median": median,
        "min": min(per_block),
        "max": max(per_block),
        "blocks": per_block,
        "target": ratio.target,
        "met": None if ratio.target is None else median <= ratio.target,
    }


def _to_float(loss: Any) -> float:
    if hasattr(loss, "item"):
        return float(loss.item())
    return float(loss)


def check_variants(workload: Workload, variants: dict[str, Variant]) -> dict[str, str]:
    """Compare loss and gradients of every variant with the reference one.

    Returns:
        ``{variant name: error message}`` for the variants that disagree (empty when all agree).
    """
    failures: dict[str, str] = {}
    reference = variants.get(workload.reference)
    if reference is None:
        return failures
    ref_loss = _to_float(reference.step())
    ref_grads = reference.grads()
    for name, variant in variants.items():
        if name == workload.reference:
            continue
        try:
            loss = _to_float(variant.step())
            grads = variant.grads()
            np.testing.assert_allclose(loss, ref_loss, rtol=workload.rtol, atol=workload.atol,
                                       err_msg=f"{workload.name}: loss of {name}")
            if len(grads) != len(ref_grads):
                raise AssertionError(f"{name} gave {len(grads)} gradients, "
                                     f"{workload.reference} gave {len(ref_grads)}")
            for index, (grad, ref_grad) in enumerate(zip(grads, ref_grads)):
                np.testing.assert_allclose(
                    grad, ref_grad, rtol=workload.rtol, atol=workload.atol,
                    err_msg=f"{workload.name}: gradient {index} of {name} vs {workload.reference}")
        except AssertionError as exc:
            failures[name] = str(exc).strip()
    return failures


def build_variants(workload: Workload) -> tuple[dict[str, Variant], dict[str, str]]:
    """Build each variant; a builder that raises is reported as skipped with the reason."""
    variants: dict[str, Variant] = {}
    skipped = dict(workload.skipped)
    for name, builder in workload.builders.items():
        try:
            variants[name] = builder()
        except Exception as exc:
            skipped[name] = f"setup failed: {type(exc).__name__}: {exc}"
    return variants, skipped


def run_workload(workload: Workload, args: argparse.Namespace, log: Any) -> Result:
    """Build, check and (unless ``--check``) time one workload."""
    variants, skipped = build_variants(workload)
    failed: dict[str, str] = {}
    if not args.no_check:
        failed = check_variants(workload, variants)
        for name, message in failed.items():
            print(f"[{workload.name}] CHECK FAILED for {name}:\n{message}", file=log)
        if not failed:
            others = [name for name in variants if name != workload.reference]
            if workload.reference in variants and others:
                print(f"[{workload.name}] check ok: {', '.join(others)} agree "
                      f"with {workload.reference}", file=log)
    result = Result(name=workload.name, description=workload.description)
    if not args.check:
        timed = [v for name, v in variants.items() if name not in failed]
        if timed:
            # Everything alive now (torch's and numpy's module objects, the data) is moved out of
            # the collector's reach: otherwise every full collection triggered by the graphs the
            # variants allocate walks ~10^5 objects of imported libraries, a cost that depends on
            # what else happens to be imported (torch) rather than on the variant itself.
            gc.collect()
            gc.freeze()
            timing = time_variants(timed, args.blocks, args.block_seconds)
            gc.unfreeze()
            result.iterations, result.times = timing.iterations, timing.times
        for ratio in workload.ratios:
            summary = median_ratio(result.times, ratio)
            if summary is not None:
                result.ratios[ratio.label] = summary
    result.skipped, result.failed = skipped, failed
    return result


def parse_args(description: str, workload_names: list[str]) -> argparse.Namespace:
    """The command line shared by the benchmark scripts."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", action="append", choices=workload_names, metavar="NAME",
                        help="run only this workload (repeatable); one of: "
                        + ", ".join(workload_names))
    parser.add_argument("--quick", action="store_true", help="3 short blocks instead of 7")
    parser.add_argument("--check", action="store_true",
                        help="only check that the variants agree (loss and gradients), no timing")
    parser.add_argument("--no-check", action="store_true", help="skip the agreement check")
    parser.add_argument("--blocks", type=int, default=None, help="number of alternating blocks")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with this process's CPU time instead of the wall clock (for a "
                        "machine shared with other work)")
    parser.add_argument("--block-seconds", type=float, default=None,
                        help="approximate duration of one variant's run in one block")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                        help="write results as JSON to PATH (or stdout when no PATH is given; "
                        "the table then goes to stderr)")
    args = parser.parse_args()
    if args.blocks is None:
        args.blocks = 3 if args.quick else 7
    if args.block_seconds is None:
        args.block_seconds = 0.15 if args.quick else 0.5
    args.only = args.only or workload_names
    global clock
    clock = time.process_time if args.cpu_time else time.perf_counter
    return args


def _fmt_ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:.3f}" if seconds else "n/a"


def format_results(results: list[Result]) -> str:
    """A plain-text table: median ms/iteration per variant, then the median per-block ratios."""
    all_variants: list[str] = []
    for result in results:
        for name in [*result.times, *result.skipped, *result.failed]:
            if name not in all_variants:
                all_variants.append(name)
    widths = {name: max(12, len(name) + 2) for name in all_variants}
    first = max([10] + [len(result.name) + 2 for result in results])  # the workload column
    lines = []
    header = f"{'workload':<{first}}" + "".join(f"{name:>{widths[name]}}" for name in all_variants)
    lines += ["median time per iteration (ms)", header, "-" * len(header)]
    for result in results:
        cells = []
        for name in all_variants:
            if name in result.times:
                text = _fmt_ms(result.times[name])
            else:
                text = "n/a" if name in result.skipped or name in result.failed else "-"
            cells.append(f"{text:>{widths[name]}}")
        lines.append(f"{result.name:<{first}}" + "".join(cells))
    label_width = max([26] + [len(label) + 2 for result in results for label in result.ratios])
    lines += ["", "median of per-block ratios (lower = first one faster)",
              f"{'workload':<{first}}{'ratio':<{label_width}}{'median':>8}{'range':>18}{'target':>9}"
              "  status", "-" * (first + label_width + 44)]
    for result in results:
        for label, summary in result.ratios.items():
            target = summary["target"]
            status = "" if target is None else ("ok" if summary["met"] else "MISSED")
            value_range = f"{summary['min']:.2f}..{summary['max']:.2f}"
            target_text = "" if target is None else f"<={target:.2f}"
            lines.append(f"{result.name:<{first}}{label:<{label_width}}{summary['median']:>8.2f}"
                         f"{value_range:>18}{target_text:>9}  {status}")
    notes = []
    for result in results:
        for name, reason in {**result.skipped, **result.failed}.items():
            notes.append(f"  {result.name}/{name}: n/a -- {reason.splitlines()[0]}")
    if notes:
        lines += ["", "not measured:"] + notes
    return "\n".join(lines)


def results_json(results: list[Result], args: argparse.Namespace) -> dict[str, Any]:
    """A JSON-serialisable dict of everything measured."""
    return {
        "config": {"blocks": args.blocks, "block_seconds": args.block_seconds,
                   "numpy": np.__version__, "python": sys.version.split()[0]},
        "workloads": {
            result.name: {
                "description": result.description,
                "iterations": result.iterations,
                "seconds_per_iteration": result.times,
                "ratios": result.ratios,
                "skipped": result.skipped,
                "check_failed": result.failed,
            }
            for result in results
        },
    }


def main(description: str, workloads: Callable[[], list[Workload]],
         reports: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] | None = None) -> int:
    """Entry point shared by the scripts; returns 1 when a check failed, else 0.

    ``reports`` are measurements that do not fit the variant/ratio mould (selectable with
    ``--only`` like a workload): each is called with the parsed arguments once the workloads are
    done and returns ``{"text": str, "data": JSON-serialisable}``; the text is printed after the
    table.
    """
    every = workloads()
    reports = reports or {}
    args = parse_args(description, [w.name for w in every] + list(reports))
    log = sys.stderr if args.json == "-" else sys.stdout
    results = []
    for workload in every:
        if workload.name in args.only:
            results.append(run_workload(workload, args, log))
    if not args.check:
        if results:
            print(format_results(results), file=log)
    report_data = {}
    if not args.check:
        for name, report in reports.items():
            if name in args.only:
                outcome = report(args)
                print("\n" + outcome["text"], file=log)
                report_data[name] = outcome["data"]
    if args.json is not None:
        data = results_json(results, args)
        data["reports"] = report_data
        text = json.dumps(data, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 1 if any(result.failed for result in results) else 0
