"""Values over simulated time, for the fake NVML.

A curve gives a value at time ``t`` (seconds since the simulation's epoch) and its exact integral
from 0 to ``t``, so an energy counter derived from a power curve is exact and reproducible.
:class:`CurveSpec` is how a fleet spec writes one (a number is a constant).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Curve(Protocol):
    def value(self, t: float) -> float: ...

    def integral(self, t: float) -> float:
        """∫ value dt from 0 to t (t >= 0)."""
        ...


@dataclass(frozen=True, slots=True)
class Constant:
    level: float

    def value(self, t: float) -> float:
        return self.level

    def integral(self, t: float) -> float:
        return self.level * t


@dataclass(frozen=True, slots=True)
class Sine:
    """Oscillates between ``low`` and ``high`` with the given period; starts at the midpoint
    rising, shifted by ``phase`` seconds."""

    low: float
    high: float
    period: float
    phase: float = 0.0

    def value(self, t: float) -> float:
        angle = 2 * math.pi * (t + self.phase) / self.period
        return self.low + (self.high - self.low) * (1 + math.sin(angle)) / 2

    def integral(self, t: float) -> float:
        mid = (self.low + self.high) / 2
        amp = (self.high - self.low) / 2
        w = 2 * math.pi / self.period
        return mid * t - amp / w * (math.cos(w * (t + self.phase)) - math.cos(w * self.phase))


@dataclass(frozen=True, slots=True)
class Piecewise:
    """Linear between points (``linear``) or held until the next point (steps). Before the
    first point the first value holds, after the last the last; with ``period`` the shape
    repeats every ``period`` seconds (its points must then lie within [0, period])."""

    times: tuple[float, ...]
    levels: tuple[float, ...]
    linear: bool
    period: float | None = None

    def value(self, t: float) -> float:
        return self.value_once(t % self.period if self.period is not None else t)

    def integral(self, t: float) -> float:
        if self.period is None:
            return self._integral_once(t)
        cycles, rest = divmod(t, self.period)
        return cycles * self._integral_once(self.period) + self._integral_once(rest)

    def _integral_once(self, t: float) -> float:
        times, levels = self.times, self.levels
        total = 0.0
        prev_t, prev_v = 0.0, self.value_once(0.0)
        for ti, vi in zip(times, levels, strict=True):
            if ti <= 0.0:
                continue
            end = min(ti, t)
            end_v = self.value_once(end)
            total += self._area(prev_t, prev_v, end, end_v)
            if ti >= t:
                return total
            prev_t, prev_v = ti, vi
        if t > prev_t:
            total += levels[-1] * (t - prev_t)
        return total

    def value_once(self, t: float) -> float:
        """Value without wrapping by the period."""
        times, levels = self.times, self.levels
        i = bisect.bisect_right(times, t)
        if i == 0:
            return levels[0]
        if i == len(times):
            return levels[-1]
        if not self.linear:
            return levels[i - 1]
        t0, t1 = times[i - 1], times[i]
        return levels[i - 1] + (levels[i] - levels[i - 1]) * (t - t0) / (t1 - t0)

    def _area(self, t0: float, v0: float, t1: float, v1: float) -> float:
        if t1 <= t0:
            return 0.0
        if self.linear:
            return (v0 + v1) / 2 * (t1 - t0)
        return v0 * (t1 - t0)


@dataclass(frozen=True, slots=True)
class Shifted:
    """Another curve, ``offset`` seconds later in its shape (for replicated GPUs)."""

    inner: Curve
    offset: float

    def value(self, t: float) -> float:
        return self.inner.value(t + self.offset)

    def integral(self, t: float) -> float:
        return self.inner.integral(t + self.offset) - self.inner.integral(self.offset)


# -- how a fleet spec writes a curve ------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SineShape(_Model):
    min: float
    max: float
    period: Annotated[float, Field(gt=0)]
    phase: float = 0.0


class CurveSpec(_Model):
    points: list[tuple[float, float]] | None = None
    steps: list[tuple[float, float]] | None = None
    sine: SineShape | None = None
    period: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> CurveSpec:
        shapes = [s for s in ("points", "steps", "sine") if getattr(self, s) is not None]
        if len(shapes) != 1:
            raise ValueError("a curve is a number or has exactly one of points, steps, sine")
        pts = self.points if self.points is not None else self.steps
        if pts is not None:
            if not pts:
                raise ValueError("needs at least one [time, value] point")
            times = [p[0] for p in pts]
            if any(b <= a for a, b in itertools.pairwise(times)):
                raise ValueError("point times must be strictly increasing")
            if self.period is not None and (times[0] < 0 or times[-1] > self.period):
                raise ValueError("with a period, point times must lie within [0, period]")
        elif self.period is not None:
            raise ValueError("period applies to points and steps only")
        return self

    def build(self) -> Curve:
        if self.sine is not None:
            s = self.sine
            return Sine(s.min, s.max, s.period, s.phase)
        linear = self.points is not None
        pts = self.points if self.points is not None else self.steps
        assert pts is not None
        return Piecewise(tuple(p[0] for p in pts), tuple(p[1] for p in pts), linear, self.period)


CurveField = float | CurveSpec


def build_curve(field: CurveField) -> Curve:
    return Constant(float(field)) if isinstance(field, int | float) else field.build()
