"""What a policy run uses, named: the features the engine choice checks against each engine.

The compiler walks the scenario (but its policies, sweep and SLO) and the policy as written,
and every format field set away from its default names a feature (`FIELD_FEATURES`) or is
neutral (its value is walked in turn); an instance of a class in `CLASS_FEATURES` is a feature
wherever it appears; a policy kind with a vectorized twin declares its spec's own fields
(`vector_fields`, `sim.policy.kinds`), any other kind is a feature itself. Then the policy
itself: its kind's runtime, customer re-sends, and its serving paths' laws. An engine lists the
features it implements (`sim.engine.choice`); a
policy whose features it lacks runs on the event engine, which implements them all, and the
first missing one is the reason the `engine:` line gives.

Every field of the format is classified here: `tests/plan/test_features.py` fails on a field
that is in neither table, so a new key cannot slip past an engine that does not know it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sim.model.config import (
    ArrivalsSpec,
    BillingSpec,
    CountSpec,
    CustomerRetrySpec,
    CustomersSpec,
    DistSpec,
    FirstSignalSpec,
    GroupSpec,
    HardnessSpec,
    JoinFirst,
    LengthSpec,
    LoopSpec,
    MapSpec,
    ModelSpec,
    PilotSpec,
    PolicyBase,
    PriceSpec,
    ProviderSpec,
    RepeatSpec,
    Scenario,
    ServingSpec,
    StallSpec,
    StallWhereSpec,
    StepSpec,
    StreamCuts,
    WhenHardSpec,
    WhenSpec,
    WorkflowSpec,
)
from sim.model.latency import (
    CallLatency,
    Constant,
    Empirical,
    Exponential,
    LogNormal,
    build_distribution,
)
from sim.plan.plan import Feature
from sim.policy.kinds import KINDS, kind_of
from sim.policy.kinds.base import STREAM_CUT_FIELDS

#: A field whose value is walked for features of its own (or that changes nothing an engine
#: does, when it holds no spec).
NEUTRAL = ""


def _neutral(cls: type[BaseModel], *fields: str) -> dict[tuple[type[BaseModel], str], str]:
    """`fields` of `cls` as NEUTRAL entries."""
    return dict.fromkeys(((cls, f) for f in fields), NEUTRAL)


#: Per (format class, field): the feature a value away from the default names, or NEUTRAL.
FIELD_FEATURES: dict[tuple[type[BaseModel], str], str] = {
    **_neutral(Scenario, "name", "description", "seed", "deadline_s", "requests", "arrivals",
               "customers", "models", "providers", "workflow", "pilot", "billing", "engine",
               "hardness"),
    (Scenario, "first_signal_s"): "first_signal",
    (Scenario, "first_signal"): NEUTRAL,  # a metric read off the tables: no engine is involved
    **_neutral(FirstSignalSpec, "step", "target_s"),
    (Scenario, "warmup_s"): "warmup",
    (Scenario, "difficulty"): "difficulty",
    (Scenario, "quality_floor"): "quality_floor",
    (Scenario, "timeseries_bin_s"): "timeseries_bin",
    **_neutral(ArrivalsSpec, "kind", "rate_per_s", "peak_to_mean", "burst_s", "file", "column",
               "time_scale"),
    (ArrivalsSpec, "segments"): "arrivals.segments",
    (CustomersSpec, "retry"): NEUTRAL,
    (CustomersSpec, "disconnect"): "customers.disconnect",
    **_neutral(CustomerRetrySpec, "probability", "max", "delay_s"),
    (CustomerRetrySpec, "backoff"): "customers.backoff",
    **_neutral(ModelSpec, "price_per_mtok", "quality", "when_hard"),
    **_neutral(HardnessSpec, "share"),
    **_neutral(WhenHardSpec, "invalid_rate", "length"),
    **_neutral(PriceSpec, "input", "output"),
    **_neutral(ProviderSpec, "concurrency", "tpm", "rpm", "serves"),
    (ProviderSpec, "input_tpm"): "quota.input_tpm",
    (ProviderSpec, "output_tpm"): "quota.output_tpm",
    (ProviderSpec, "charge"): "quota.charge",
    (ProviderSpec, "window"): "quota.window",
    (ProviderSpec, "start"): "quota.start",
    (ProviderSpec, "retry_after"): "quota.retry_after",
    (ProviderSpec, "retry_after_ms"): "quota.retry_after_ms",
    (ProviderSpec, "sdk"): "client.sdk",
    (ProviderSpec, "overhead_s"): "client.overhead",
    (ProviderSpec, "overhead_held"): "client.overhead",
    (ProviderSpec, "slowdown"): "load.slowdown",
    (ProviderSpec, "episodes"): "load.episodes",
    **_neutral(ServingSpec, "ttft_s", "tokens_per_s", "stall", "error_rate", "invalid_rate"),
    (ServingSpec, "tpm"): "quota.model",
    (ServingSpec, "rpm"): "quota.model",
    (ServingSpec, "input_tpm"): "quota.model",
    (ServingSpec, "output_tpm"): "quota.model",
    (ServingSpec, "ttft_s_per_ktok"): "prefill",
    (ServingSpec, "mid_stream_error_rate"): "stream.mid_stream_error",
    **_neutral(StallSpec, "probability", "extra_s"),
    (StallSpec, "where"): "stream.stall_where",
    **_neutral(StallWhereSpec, "before_first_token"),
    **_neutral(DistSpec, "dist", "median", "p99", "mu", "sigma", "mean", "value", "file",
               "column", "max"),
    (WorkflowSpec, "steps"): NEUTRAL,
    (WorkflowSpec, "reserve_s"): "deadline.reserve",
    (WorkflowSpec, "groups"): "workflow.groups",
    **_neutral(StepSpec, "id", "model", "input_tokens", "output_tokens", "after", "required",
               "provider"),
    (StepSpec, "kind"): "step.tool",
    (StepSpec, "tool"): "step.tool",
    (StepSpec, "max_tokens"): "step.max_tokens",
    (StepSpec, "validator"): "step.validator",
    (StepSpec, "budget_s"): "budget.step",
    (StepSpec, "queue_budget_s"): "budget.queue",
    (StepSpec, "attempt_budget_s"): "budget.attempt",
    (StepSpec, "stream"): "step.stream",
    (StepSpec, "when"): "workflow.when",
    (StepSpec, "repeat"): "workflow.repeat",
    (StepSpec, "loop"): "workflow.loop",
    (StepSpec, "map"): "workflow.map",
    # the workflow keys' own parts (never walked: the key itself names the feature)
    **_neutral(CountSpec, "dist", "value", "mean", "values", "weights"),
    **_neutral(WhenSpec, "probability", "step", "answer"),
    **_neutral(RepeatSpec, "until", "max"),
    **_neutral(LoopSpec, "count", "max"),
    **_neutral(MapSpec, "count", "join"),
    **_neutral(JoinFirst, "first"),
    **_neutral(GroupSpec, "steps", "loop"),
    (PilotSpec, "requests"): NEUTRAL,
    (BillingSpec, "cancelled"): NEUTRAL,
    # the policy as written: what every kind shares (each vectorizable kind's own fields below)
    (PolicyBase, "steps"): "policy.per_step",
    (PolicyBase, "controls"): "policy.controls",
    (PolicyBase, "propagate_deadline"): "deadline.no_propagation",
    (PolicyBase, "admission"): "deadline.admission",
    # the cuts that watch the stream, as the mixin declares them (each kind's own copy below)
    **{(StreamCuts, field): feature for field, feature in STREAM_CUT_FIELDS.items()},
}  # fmt: skip
FIELD_FEATURES.update(
    {(kind.spec, field): feature for kind in KINDS.values() if kind.vector_fields is not None
     for field, feature in kind.vector_fields.items()}
)  # fmt: skip
#: Format classes that are a feature wherever an instance appears (every other policy kind's
#: spec names its kind: `kind.<name>`, see `policy_features`).
CLASS_FEATURES: dict[type[BaseModel], str] = {LengthSpec: "step.length_law"}
#: Policy spec classes whose own fields are walked (the kinds with a vectorized twin, whose
#: `vector_fields` the table above holds).
WALKED_KINDS = tuple(k.spec for k in KINDS.values() if k.vector_fields is not None)
#: Scenario fields not walked: the policies (only the one being run matters), sweep and SLO.
NOT_WALKED = frozenset({"policies", "sweep", "slo"})
#: The latency laws' distribution classes; any other is the feature `latency.<class>`.
KNOWN_LAWS = (LogNormal, Exponential, Constant, Empirical)


def scenario_features(scenario: Scenario) -> list[Feature]:
    """The features the scenario's settings use whatever the policy (in field order)."""
    found: list[Feature] = []
    for name in type(scenario).model_fields:
        if name not in NOT_WALKED:
            _walk_field(scenario, name, name, found)
    return found


def behaviour_features(scenario: Scenario) -> list[Feature]:
    """What the scenario's customers do that shares state between requests: re-sends."""
    retry = scenario.customers.retry
    if retry.max > 0 and retry.probability > 0:
        return [Feature("customers.resend", "customers re-send failed requests (customers.retry)")]
    return []


def spec_features(spec: BaseModel, path: str) -> list[Feature]:
    """The features of a policy spec as written (under key path `path`)."""
    found: list[Feature] = []
    if not isinstance(spec, WALKED_KINDS):
        kind = kind_of(spec)
        reason = kind.no_twin_reason or f"{path} is a {type(spec).__name__}, unknown to it"
        found.append(Feature(f"kind.{kind.name}", reason))
    for name in type(spec).model_fields:
        if isinstance(spec, WALKED_KINDS) or (PolicyBase, name) in FIELD_FEATURES:
            _walk_field(spec, name, f"{path}.{name}", found)
    return found


def latency_features(latencies: dict[tuple[str, str], CallLatency]) -> list[Feature]:
    """Laws of a class no engine but the event engine may know."""
    found = []
    for (provider, model), law in latencies.items():
        for dist in (law.ttft, law.tokens_per_s, law.stall_extra):
            if dist is not None and not isinstance(dist, KNOWN_LAWS):
                name = type(dist).__name__
                found.append(
                    Feature(f"latency.{name}", f"{provider}/{model} uses distribution {name}")
                )
    return found


def client_features(providers: Mapping[str, ProviderSpec]) -> list[Feature]:
    """A provider client's own rules, named where an engine may lack one: each kind of failure
    its SDK retries (`client.retry_on.<kind>`), a stream timeout of its own
    (`client.stream_timeout`), and its overhead law's class."""
    found = []
    for name, spec in providers.items():
        if "sdk" in spec.model_fields_set:
            for kind in spec.sdk.retry_on:
                where = f"providers.{name}.sdk.retry_on has {kind!r}"
                found.append(Feature(f"client.retry_on.{kind}", where))
        if spec.sdk.stream_timeout_s is not None:  # LiteLLM's stream_timeout: event engine only
            where = f"providers.{name}.sdk.stream_timeout_s is set"
            found.append(Feature("client.stream_timeout", where))
        if spec.overhead_s is not None:
            law = build_distribution(spec.overhead_s)
            if not isinstance(law, KNOWN_LAWS):
                cls = type(law).__name__
                where = f"providers.{name}.overhead_s uses distribution {cls}"
                found.append(Feature(f"latency.{cls}", where))
    return found


def _walk_field(obj: BaseModel, name: str, where: str, found: list[Feature]) -> None:
    info = type(obj).model_fields[name]
    value = getattr(obj, name)
    feature = _feature_of(type(obj), name)
    if feature is None:  # a field nobody classified: unknown to every engine but the event one
        if value != info.get_default(call_default_factory=True):
            found.append(Feature(f"unclassified.{type(obj).__name__}.{name}", where))
        return
    if feature != NEUTRAL:
        if value != info.get_default(call_default_factory=True):
            found.append(Feature(feature, where))
        return
    _walk(value, where, found)


def _feature_of(cls: type[BaseModel], name: str) -> str | None:
    """The field's entry, looked up on its class and then its bases (PolicyBase's keys)."""
    for base in cls.__mro__:
        entry = FIELD_FEATURES.get((base, name))  # type: ignore[arg-type]
        if entry is not None:
            return entry
    return None


def _walk(value: Any, where: str, found: list[Feature]) -> None:
    if isinstance(value, BaseModel):
        feature = CLASS_FEATURES.get(type(value))
        if feature is not None:
            found.append(Feature(feature, f"{where} is a {type(value).__name__}, unknown to it"))
            return
        for name in type(value).model_fields:
            _walk_field(value, name, f"{where}.{name}", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{where}.{key}", found)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _walk(item, f"{where}[{i}]", found)
