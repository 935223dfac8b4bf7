"""Per-operation precision: bf16 / fp16 where the device supports it, fp32 when a check fails.

Each operation (``"encoder"``, ``"router"``, ``"reasoner"``) is run once on a probe batch in the low
precision and in fp32; the low precision is kept only if it agrees with fp32 (scores within
``tolerance`` and the same top entity of every sample, or, for an operation that returns vectors
(the question encoder), a relative error within ``tolerance``) and is clearly faster on that probe
(by ``min_gain``: two timings within the noise of a shared machine would pick one precision in one
process and the other in the next, and a borderline question could then be answered differently by
two processes of one API). Otherwise that operation runs in fp32 from then on. On this project's
CPU bf16 passes every check, but only the question encoder (a bf16 copy of its weights) may run
faster; the small GNNs under autocast run slower, the casts costing more than the products save.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

__all__ = ["PrecisionPolicy", "low_precision_for", "autocast"]

log = logging.getLogger(__name__)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def low_precision_for(device: str) -> str:
    """The cheaper dtype this device runs well: bf16 on CPUs and recent GPUs, else fp16 on CUDA."""
    if device.startswith("cuda"):
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16"


@contextlib.contextmanager
def autocast(device: str, name: str) -> Iterator[None]:
    if name == "fp32":
        yield
        return
    with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=DTYPES[name]):
        yield


@dataclass
class PrecisionPolicy:
    """Choice per operation. ``mode``: ``auto`` (check and pick), or a fixed ``fp32|bf16|fp16``.

    Args:
        device: where the models run.
        mode: ``auto`` | ``fp32`` | ``bf16`` | ``fp16``.
        tolerance: largest allowed absolute score difference (relative error for vectors)
            against fp32 on the probe (0.05).
        force_fail: make every check fail (a test hook; proves the fallback).
        speed: also require the low precision to be faster: the best of ``repeats`` timed runs of
            each, interleaved, after the checked ones (``False``: numerics alone decide).
        min_gain: the share of fp32's time the low precision must save to count as faster (0.1).
        clock: the timer of the speed check, in seconds (``time.perf_counter``; tests pass their own).
    """

    device: str = "cpu"
    mode: str = "auto"
    tolerance: float = 0.05
    force_fail: bool = False
    speed: bool = True
    repeats: int = 5
    min_gain: float = 0.1
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    chosen: dict[str, str] = field(default_factory=dict)
    checks: dict[str, dict[str, float | bool | str]] = field(default_factory=dict)

    def dtype_name(self, op: str) -> str:
        return self.chosen.get(op, "fp32" if self.mode == "auto" else self.mode)

    def calibrate(self, op: str, run: Callable[[], list[torch.Tensor]], *,
                  run_low: Callable[[str], list[torch.Tensor]] | None = None, vectors: bool = False) -> str:
        """Run ``run`` (per-sample score vectors) in fp32 and in the low precision (under autocast,
        or by ``run_low(name)`` for an operation that casts its own weights); keep the latter only
        if it agrees with fp32 and, with ``speed``, runs faster. ``vectors``: the outputs are
        embeddings, compared by relative error (``‖low − fp32‖ / ‖fp32‖``), with no top entity.
        Returns the chosen name."""
        if self.mode != "auto":
            self.chosen[op] = self.mode
            return self.mode
        low = low_precision_for(self.device)

        def run_in_low() -> list[torch.Tensor]:
            if run_low is not None:
                return run_low(low)
            with autocast(self.device, low):
                return run()

        with torch.no_grad():
            ref, got = run(), run_in_low()
        pairs = [(a.float(), b.float()) for a, b in zip(ref, got, strict=True) if a.numel()]
        if vectors:
            diff = max((float((a - b).norm() / a.norm().clamp_min(1e-12)) for a, b in pairs), default=0.0)
            same_top = True
        else:
            diff = max((float((a - b).abs().max()) for a, b in pairs), default=0.0)
            same_top = all(int(a.argmax()) == int(b.argmax()) for a, b in pairs)
        agrees = diff <= self.tolerance and same_top and not self.force_fail
        measure = "max_rel_error" if vectors else "max_abs_diff"
        check: dict[str, float | bool | str] = {"tried": low, measure: round(diff, 6), "same_top": same_top}
        faster = True
        if agrees and self.speed:
            ms_fp32, ms_low = _best_ms(run, run_in_low, self.repeats, self.clock)
            faster = ms_low < ms_fp32 * (1 - self.min_gain)
            check.update(ms_fp32=round(ms_fp32, 3), ms_low=round(ms_low, 3), faster=faster)
        check["passed"] = agrees and faster
        self.chosen[op] = low if agrees and faster else "fp32"
        self.checks[op] = check
        if not agrees:
            log.warning("precision check failed for %s in %s (max diff %.4g); using fp32", op, low, diff)
        elif not faster:
            log.info("%s in %s agrees with fp32 but is not %d %% faster (%.2f vs %.2f ms); using fp32",
                     op, low, round(self.min_gain * 100), check["ms_low"], check["ms_fp32"])
        elif "ms_low" in check:
            log.info("%s in %s agrees with fp32 and is faster (%.2f vs %.2f ms); using %s",
                     op, low, check["ms_low"], check["ms_fp32"], low)
        else:
            log.info("%s in %s agrees with fp32; using %s", op, low, low)
        return self.chosen[op]

    @contextlib.contextmanager
    def scope(self, op: str) -> Iterator[None]:
        with autocast(self.device, self.dtype_name(op)):
            yield


@torch.no_grad()
def _best_ms(a: Callable[[], object], b: Callable[[], object], repeats: int,
             clock: Callable[[], float]) -> tuple[float, float]:
    """The best of ``repeats`` wall-clock runs of ``a`` and of ``b``, interleaved so that a busy
    moment of a shared machine slows both."""
    best = [float("inf"), float("inf")]
    for _ in range(max(1, repeats)):
        for k, fn in enumerate((a, b)):
            t0 = clock()
            fn()
            best[k] = min(best[k], (clock() - t0) * 1000)
    return best[0], best[1]
