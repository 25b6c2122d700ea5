"""Cost per million tokens: who served which tokens, the split rule, the rates. Pure.

The ingest reads each serving pod's token counters (costsvc/ingest/tokens.py: vLLM and
SGLang) into :class:`Served` facts per hour, pod and model; :func:`price_served` joins them
with the hour's chargeback (costsvc/rules/attribution.py) and prices each (pod, model) in integer
micro-units. docs/inference.md has the rules with worked examples:

- **Tokens by role.** A pod's role (the pod label ``llm-d.ai/role``, or SGLang's
  ``engine_type``) says which of its counters are the model's: a prefill-only pod's prompt
  tokens are input and its cost is all input cost; a decode-only pod's generation tokens
  are output and its cost all output cost (its prompt tokens were prefilled elsewhere and
  are not counted twice, nor are the prefill pods' one-token answers); any other pod counts
  both. Requests are counted where the output is (decode-side pods).
- **The money of a pod** is its chargeback of the hour, exactly: allocated (what it held),
  used (what it measurably used), waste (allocated - used, where measured), the fleet idle
  an idle policy spread onto it, and GPU-hours. A pod serving several models splits it
  over them by weighted tokens (input + weight x output; evenly without tokens).
- **The split rule** of a (pod, model)'s money into input and output: by role, as above;
  else by measured prefill vs decode time (vLLM's ``request_prefill_time_seconds`` and
  ``request_decode_time_seconds`` histograms); else by the cost model's output:input
  weight in force (costsvc/rules/cost_model.py; an hour with no tokens splits 1 : weight).
- **Two bases.** Allocation: allocated + idle spread onto the pod, split so; usage: used,
  split the same way. Cost per 1M tokens = cost x 10^6 / tokens, per direction, over any
  sum of rows (rates are never averaged), rounded half to even to the micro-unit; the usage
  basis is unknown (None) where any of the cost had no utilisation series.

Every split is largest-remainder (:func:`costsvc.kit.money.split`): for every hour the rows of a
pod add up to its chargeback exactly, and input + output = the row's cost on each basis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

from costsvc.kit.money import money, round_micro, split
from costsvc.rules.attribution import Owner
from costsvc.rules.chargeback import IDLE, UNALLOCATED, Spent
from costsvc.rules.cost_model import CostModel
from costsvc.rules.lines import HourResult

MILLION = 1_000_000
US = 1_000_000  # micro-seconds per second, as durations are stored
PodKey = tuple[str, str, str]  # cluster, namespace, pod
# roles (llm-d's ``llm-d.ai/role`` values; SGLang's ``engine_type``) whose pods only take
# prompts in, or only generate: llm-d-inference-scheduler docs/disaggregation.md
INPUT_ONLY = frozenset({"prefill", "encode", "encode-prefill"})
OUTPUT_ONLY = frozenset({"decode"})
RULES = ("role", "time", "weight")


@dataclass(frozen=True, slots=True)
class Served:
    """What one pod served of one model in one hour: its counters' increases (as counted
    for the model by its role, :func:`counted`), and the measured prefill and decode time
    (Σ of the requests' phase times; None where the pod has no such histogram)."""

    cluster: str
    namespace: str
    pod: str
    model: str
    engine: str  # vllm | sglang
    role: str  # "" when the pod has none
    input_tokens: int
    output_tokens: int
    requests: int
    prefill_seconds: Decimal | None = None
    decode_seconds: Decimal | None = None

    @property
    def pod_key(self) -> PodKey:
        return (self.cluster, self.namespace, self.pod)


def side(role: str) -> str:
    """``input``, ``output`` or ``both``: which tokens a pod of this role serves."""
    if role in INPUT_ONLY:
        return "input"
    if role in OUTPUT_ONLY:
        return "output"
    return "both"


def counted(s: Served) -> Served:
    """``s`` with only the counts its role makes the model's (docstring above)."""
    where = side(s.role)
    if where == "input":
        return replace(s, output_tokens=0, requests=0)
    if where == "output":
        return replace(s, input_tokens=0)
    return s


@dataclass(slots=True)
class PodMoney:
    """A pod's chargeback in one hour, summed over its lines (micro-units; GPU-hours in
    micro GPU-hours)."""

    owner: Owner
    allocated: int = 0
    used: int = 0
    waste: int = 0
    idle: int = 0  # fleet idle spread onto the pod (weighted / even idle policy)
    gpu_hours: int = 0

    @property
    def cost(self) -> int:
        """The pod's chargeback: what the allocation basis prices."""
        return self.allocated + self.idle


def pod_money(result: HourResult) -> dict[PodKey, PodMoney]:
    """Each pod's chargeback in the hour, from its lines (``__idle__`` lines are no pod's)."""
    out: dict[PodKey, PodMoney] = {}
    for line in result.lines:
        if line.team == IDLE:
            continue
        key = (line.cluster, line.namespace, line.pod)
        found = out.get(key)
        if found is None:
            found = out[key] = PodMoney(Owner(line.team, line.project, line.stage))
        found.allocated += line.allocated
        found.used += line.used
        found.waste += line.waste
        found.idle += line.idle
        found.gpu_hours += line.gpu_hours
    return out


@dataclass(slots=True)
class Priced:
    """One (pod, model) of one hour, priced: its counted facts, the rule that split its
    money, and the money (micro-units)."""

    served: Served
    owner: Owner
    rule: str  # role | time | weight
    weight: Decimal  # the output:input weight in force (used by the weight rule)
    allocated: int
    used: int
    waste: int
    idle: int
    gpu_hours: int
    input_cost: int  # allocation basis: allocated + idle, split
    output_cost: int
    input_used: int  # usage basis: used, split
    output_used: int


COUNTS = ("input_tokens", "output_tokens", "requests")  # a served model's counted facts
PRICED = (  # a Priced row's money, in its order: additive, as the counts are
    "allocated",
    "used",
    "waste",
    "idle",
    "gpu_hours",
    "input_cost",
    "output_cost",
    "input_used",
    "output_used",
)


def price_served(
    hour: datetime,
    served: Iterable[Served],
    money_of: Mapping[PodKey, PodMoney],
    weight_of: Callable[[datetime, str], Decimal],
    owner_of: Callable[[str, str, str], Owner | None],
) -> list[Priced]:
    """The hour's (pod, model) rows. ``money_of``: each pod's chargeback of the hour (a pod
    without lines holds no GPU: its rows cost 0); ``weight_of(hour, model)``: the cost
    model's output:input weight; ``owner_of``: the owner of a pod that has no line."""
    by_pod: dict[PodKey, list[Served]] = {}
    for s in sorted((counted(s) for s in served), key=_order):
        by_pod.setdefault(s.pod_key, []).append(s)
    out: list[Priced] = []
    for key, group in by_pod.items():
        m = money_of.get(key)
        if m is None:
            who = owner_of(*key) or Owner(UNALLOCATED, UNALLOCATED, UNALLOCATED)
            m = PodMoney(who)
        weights = [weight_of(hour, s.model) for s in group]
        tokens = [s.input_tokens + w * s.output_tokens for s, w in zip(group, weights, strict=True)]
        parts = {
            name: split(total, tokens)
            for name, total in (
                ("allocated", m.allocated),
                ("used", m.used),
                ("waste", m.waste),
                ("idle", m.idle),
                ("gpu_hours", m.gpu_hours),
            )
        }
        for i, (s, w) in enumerate(zip(group, weights, strict=True)):
            rule, fraction = split_rule(s, w)
            allocated, idle = parts["allocated"][i], parts["idle"][i]
            used = parts["used"][i]
            input_cost, output_cost = split(allocated + idle, fraction)
            input_used, output_used = split(used, fraction)
            out.append(
                Priced(
                    s,
                    m.owner,
                    rule,
                    w,
                    allocated,
                    used,
                    parts["waste"][i],
                    idle,
                    parts["gpu_hours"][i],
                    input_cost,
                    output_cost,
                    input_used,
                    output_used,
                )
            )
    return out


def price_hour(
    served: Iterable[Served],
    result: HourResult,
    model: CostModel,
    owner_of: Callable[[str, str, str], Owner | None],
) -> list[Priced]:
    """:func:`price_served` against the hour's chargeback ``result`` and ``model``'s weights
    (the pods' money summed only for an hour that served tokens)."""
    served = list(served)
    if not served:
        return []
    return price_served(result.hour, served, pod_money(result), model.output_weight_at, owner_of)


def split_rule(s: Served, weight: Decimal) -> tuple[str, list[Decimal]]:
    """The rule for a counted (pod, model) and its (input, output) weights."""
    where = side(s.role)
    if where == "input":
        return "role", [Decimal(1), Decimal(0)]
    if where == "output":
        return "role", [Decimal(0), Decimal(1)]
    prefill, decode = s.prefill_seconds, s.decode_seconds
    if prefill is not None and decode is not None and prefill + decode > 0:
        return "time", [prefill, decode]
    if s.input_tokens or s.output_tokens:
        return "weight", [Decimal(s.input_tokens), weight * s.output_tokens]
    return "weight", [Decimal(1), weight]  # no tokens: as if input and output were equal


def _order(s: Served) -> tuple[str, str, str, str, str]:
    return (s.cluster, s.namespace, s.pod, s.model, s.engine)


# -- rates over any sum of rows -------------------------------------------------------------


def per_million(cost: int, tokens: int) -> int | None:
    """Micro-units per 10^6 tokens, half to even; None without tokens."""
    if tokens <= 0:
        return None
    return round_micro(Decimal(cost) * MILLION / tokens)


@dataclass(slots=True)
class Totals(Spent):
    """Σ of rows (any grouping): the additive figures; rates come from them."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    allocated: int = 0
    used: int = 0
    waste: int = 0
    idle: int = 0
    gpu_hours: int = 0
    input_cost: int = 0
    output_cost: int = 0
    input_used: int = 0
    output_used: int = 0
    rules: set[str] = field(default_factory=set)

    def add(self, other: Totals) -> None:
        for name in ADDITIVE:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rules |= other.rules

    @property
    def cost(self) -> int:
        return self.input_cost + self.output_cost

    def figures(self) -> dict[str, object]:
        """The answer's figures: money as text (:func:`costsvc.kit.money.money`), rates per 10^6
        tokens, null where undefined (no tokens, or the usage basis unknown)."""
        usage_known = self.unmeasured == 0
        total_tokens = self.input_tokens + self.output_tokens

        def rate(cost: int, tokens: int, known: bool = True) -> str | None:
            found = per_million(cost, tokens) if known else None
            return None if found is None else money(found)

        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "allocation_cost": money(self.cost),
            "usage_cost": money(self.input_used + self.output_used) if usage_known else None,
            "allocated_cost": money(self.allocated),
            "used_cost": money(self.used),
            "idle_cost": money(self.waste),
            "unmeasured_cost": money(self.unmeasured),
            "shared_idle_cost": money(self.idle),
            "input_cost": money(self.input_cost),
            "output_cost": money(self.output_cost),
            "input_used_cost": money(self.input_used) if usage_known else None,
            "output_used_cost": money(self.output_used) if usage_known else None,
            "cost_per_1m_input_tokens": rate(self.input_cost, self.input_tokens),
            "cost_per_1m_output_tokens": rate(self.output_cost, self.output_tokens),
            "cost_per_1m_tokens": rate(self.cost, total_tokens),
            "usage_cost_per_1m_input_tokens": rate(self.input_used, self.input_tokens, usage_known),
            "usage_cost_per_1m_output_tokens": rate(
                self.output_used, self.output_tokens, usage_known
            ),
            "usage_cost_per_1m_tokens": rate(
                self.input_used + self.output_used, total_tokens, usage_known
            ),
            "gpu_hours": money(self.gpu_hours),
            "tokens_per_gpu_hour": tokens_per_gpu_hour(total_tokens, self.gpu_hours),
            "split_rules": sorted(self.rules),
        }


ADDITIVE = (*COUNTS, *PRICED)


def tokens_per_gpu_hour(tokens: int, micro_gpu_hours: int) -> str | None:
    """Tokens per GPU-hour held (3 places, half to even); None without GPU-hours."""
    if micro_gpu_hours <= 0:
        return None
    exact = Decimal(tokens) * MILLION / micro_gpu_hours
    return f"{exact.quantize(Decimal('0.001'), rounding=ROUND_HALF_EVEN):f}"
