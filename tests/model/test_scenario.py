"""Loading scenarios at the user's edge: the contract, the bundled default, and every bad input.

Every bad input must raise `ScenarioError` whose rendered message names the file, the exact key
path and what is allowed, so a user can fix a hand-written YAML file without reading code. The
contract example run as written is in tests/integration/test_scenario.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import (
    default_scenario_path,
    json_schema,
    json_schema_text,
    load_scenario,
    scenario_from_dict,
    with_overrides,
)
from tests.helpers import REPO_ROOT, ScenarioFile

POLICY_KINDS = "wait, cut, race, hedge, downshift, adaptive, draft, router, per_step"
BIG_DIRECT = "providers.direct.serves.big"
#: The Azure code-completion trace bundled (with its license) for scenarios/azure-code-burst.yaml.
AZURE_CODE_TRACE = REPO_ROOT / "scenarios/data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv"


def load_error(path: Path) -> ScenarioError:
    """The ScenarioError raised by loading `path` (fails the test if it loads)."""
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return info.value


def problem_message(exc: ScenarioError, key_path: str) -> str:
    """The message of the problem reported at exactly `key_path` (fails if there is none)."""
    messages = [message for path, message in exc.problems if path == key_path]
    assert messages, f"no problem at {key_path!r}; problems: {exc.problems}"
    return messages[0]


def assert_reported(exc: ScenarioError, file: Path, key_path: str, *fragments: str) -> None:
    """The rendered error names `file`, has a line for exactly `key_path`, and says `fragments`."""
    rendered = str(exc)
    assert exc.source == str(file)
    assert rendered.startswith(f"{file}:"), rendered
    lines = [line.strip() for line in rendered.splitlines()]
    assert any(line.startswith(f"{key_path}: ") for line in lines), rendered
    message = problem_message(exc, key_path)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


# ---------------------------------------------------------------- the contract and the default


def test_contract_loads_unchanged(contract_path: Path) -> None:
    scenario = load_scenario(contract_path)
    assert isinstance(scenario, Scenario)
    assert scenario.name == "ten-step"
    assert scenario.seed == 7
    assert scenario.deadline_s == 90
    assert scenario.requests == 2000
    assert [s.id for s in scenario.workflow.steps] == [f"s{i}" for i in range(1, 11)]
    assert list(scenario.policies) == ["wait", "cut", "race", "hedge", "downshift"]
    assert scenario.providers["direct"].tpm == 20_000_000  # YAML `20_000_000` is a number
    assert scenario.providers["direct"].serves["big"].ttft_s.p99 == 4.0
    assert scenario.sweep is not None
    assert scenario.sweep.grid == {"providers.direct.concurrency": [24, 32, 48, 64]}


#: A verbatim copy of the public contract example (scenario-format.md's `ten-step.yaml`).
CONTRACT_COPY = REPO_ROOT / "tests" / "data" / "contract-ten-step.yaml"


def test_bundled_default_has_the_contract_data() -> None:
    """The default is the contract example; only its `sweep:` grid differs (it varies what
    changes the answer: slots at a fixed rate)."""
    bundled = yaml.safe_load(default_scenario_path().read_text(encoding="utf-8"))
    contract = yaml.safe_load(CONTRACT_COPY.read_text(encoding="utf-8"))
    bundled.pop("sweep")
    contract.pop("sweep")
    assert bundled == contract


def test_top_level_default_is_a_byte_copy_of_the_bundled_one(repo_root: Path) -> None:
    bundled = repo_root / "sim" / "scenarios" / "default.yaml"
    assert default_scenario_path().resolve() == bundled.resolve()
    assert (repo_root / "scenarios" / "default.yaml").read_bytes() == bundled.read_bytes()


def test_load_without_a_path_gives_the_default(contract_path: Path) -> None:
    assert load_scenario().model_dump() == load_scenario(contract_path).model_dump()


# ---------------------------------------------------------------- bad keys and values

BAD_VALUES = [
    # unknown keys: did-you-mean and the allowed keys
    pytest.param(
        {"providers.direct.concurency": 512},
        "providers.direct.concurency",
        [
            "unknown key",
            "did you mean 'concurrency'",
            "allowed: charge, concurrency, episodes, input_tpm",
        ],
        id="unknown-key-provider",
    ),
    pytest.param(
        {"deadline": 60},
        "deadline",
        ["unknown key", "did you mean 'deadline_s'", "allowed:", "workflow"],
        id="unknown-key-top-level",
    ),
    pytest.param(
        {"workflow.steps[2].modle": "big"},
        "workflow.steps[2].modle",
        ["did you mean 'model'", "allowed: after, ", " id, input_tokens, ", " model, "],
        id="unknown-key-step",
    ),
    pytest.param(
        {"policies.cut.retires": 3},
        "policies.cut.retires",
        [
            "did you mean 'retries'",
            "allowed: admission, backoff, controls, cutoff, first_token_timeout_s, idle_timeout_s, "
            "kind, propagate_deadline, providers, resume, retries, steps",
        ],
        id="unknown-key-policy",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.medain": 0.8},
        f"{BIG_DIRECT}.ttft_s.medain",
        ["did you mean 'median'", "allowed:"],
        id="unknown-key-dist",
    ),
    # wrong types
    pytest.param(
        {"providers.direct.concurrency": "lots"},
        "providers.direct.concurrency",
        ["valid integer", "'lots'"],
        id="type-int",
    ),
    pytest.param({"deadline_s": "soon"}, "deadline_s", ["valid number", "'soon'"], id="type-float"),
    pytest.param({"requests": 2.5}, "requests", ["integer", "2.5"], id="type-fractional-int"),
    pytest.param({"workflow.steps": "s1"}, "workflow.steps", ["valid list"], id="type-list"),
    pytest.param({"models": ["big", "small"]}, "models", ["dictionary"], id="type-mapping"),
    pytest.param({"providers": None}, "providers", ["dictionary", "None"], id="type-null"),
    pytest.param(
        {"arrivals.kind": "uniform"},
        "arrivals.kind",
        ["'uniform'", "'poisson'", "'bursty'", "'trace'"],
        id="arrivals-kind",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.dist": "gamma"},
        f"{BIG_DIRECT}.ttft_s.dist",
        ["'gamma'", "'lognormal'", "'empirical'"],
        id="dist-kind",
    ),
    # distributions
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.p99": 0.5},
        f"{BIG_DIRECT}.ttft_s.p99",
        ["greater than median (0.8)", "0.5"],
        id="p99-below-median",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.p99": 0.8},
        f"{BIG_DIRECT}.ttft_s.p99",
        ["greater than median (0.8)"],
        id="p99-equal-median",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.stall.extra_s.p99": 10},
        f"{BIG_DIRECT}.stall.extra_s.p99",
        ["greater than median (30)"],
        id="p99-below-median-stall",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.mean": 1.0},
        f"{BIG_DIRECT}.ttft_s.mean",
        ["not a parameter", "{median, p99} or {mu, sigma}"],
        id="dist-extra-parameter",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s.p99": ...},
        f"{BIG_DIRECT}.ttft_s.p99",
        ["missing", "{median, p99}"],
        id="dist-missing-parameter",
    ),
    # rates
    pytest.param(
        {f"{BIG_DIRECT}.error_rate": 1.5},
        f"{BIG_DIRECT}.error_rate",
        ["less than 1", "1.5"],
        id="error-rate-above-one",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.error_rate": -0.1},
        f"{BIG_DIRECT}.error_rate",
        ["greater than or equal to 0", "-0.1"],
        id="error-rate-negative",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.invalid_rate": -0.2},
        f"{BIG_DIRECT}.invalid_rate",
        ["greater than or equal to 0"],
        id="invalid-rate-negative",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.stall.probability": 2},
        f"{BIG_DIRECT}.stall.probability",
        ["less than or equal to 1"],
        id="stall-probability-above-one",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.error_rate": 0.5, f"{BIG_DIRECT}.invalid_rate": 0.5},
        f"{BIG_DIRECT}.invalid_rate",
        ["error_rate + invalid_rate must be < 1", "got 1"],
        id="rates-sum-to-one",
    ),
    pytest.param(
        {f"{BIG_DIRECT}.error_rate": 0.7, f"{BIG_DIRECT}.invalid_rate": 0.6},
        f"{BIG_DIRECT}.invalid_rate",
        ["error_rate + invalid_rate must be < 1", "1.3"],
        id="rates-sum-above-one",
    ),
    # the workflow
    pytest.param(
        {"workflow.steps[3].after": ["s9x"]},
        "workflow.steps[3].after[0]",
        ["unknown step 's9x'", "did you mean 's9'", "known: s1, s10"],
        id="after-unknown-step",
    ),
    pytest.param(
        {"workflow.steps[0].after": ["s10"]},
        "workflow.steps",
        ["dependency cycle", "s1 -> s10", "-> s1"],
        id="dependency-cycle",
    ),
    pytest.param(
        {"workflow.steps[10]": {"id": "s5", "model": "big", "after": ["s4"]}},
        "workflow.steps[10].id",
        ["duplicate step id 's5'", "steps[4]"],
        id="duplicate-step-id",
    ),
    pytest.param(
        {"workflow.steps[3].model": "bigg"},
        "workflow.steps[3].model",
        ["unknown model 'bigg'", "did you mean 'big'", "known: big, small"],
        id="step-unknown-model",
    ),
    pytest.param(
        {"workflow.steps[3].provider": "manged"},
        "workflow.steps[3].provider",
        ["unknown provider 'manged'", "did you mean 'managed'"],
        id="step-unknown-provider",
    ),
    pytest.param(
        {
            "providers.managed.serves.bigg": {
                "ttft_s": {"dist": "constant", "value": 1},
                "tokens_per_s": {"dist": "constant", "value": 50},
            }
        },
        "providers.managed.serves.bigg",
        ["unknown model 'bigg'", "did you mean 'big'"],
        id="serves-unknown-model",
    ),
    # policies
    pytest.param(
        {"policies.race.providers": ["direct", "manged"]},
        "policies.race.providers[1]",
        ["unknown provider 'manged'", "did you mean 'managed'", "known: direct, managed"],
        id="policy-unknown-provider",
    ),
    pytest.param(
        {"policies.downshift.to": "smal"},
        "policies.downshift.to",
        ["unknown model 'smal'", "did you mean 'small'", "known: big, small"],
        id="downshift-unknown-model",
    ),
    pytest.param(
        {"models.tiny": {}, "policies.downshift.to": "tiny"},
        "policies.downshift.to",
        ["no provider serves model 'tiny'"],
        id="downshift-unserved-model",
    ),
    pytest.param(
        {"policies.race.kind": "rase"},
        "policies.race.kind",
        ["unknown kind 'rase'", f"allowed: {POLICY_KINDS}"],
        id="policy-unknown-kind",
    ),
    pytest.param(
        {"policies.race.kind": ...},
        "policies.race.kind",
        ["missing", f"allowed: {POLICY_KINDS}"],
        id="policy-missing-kind",
    ),
    pytest.param(
        {"policies.hedge.after": "p100"},
        "policies.hedge.after",
        ["'p100'", "pNN", "0 < NN < 100"],
        id="hedge-after-p100",
    ),
    # required keys
    pytest.param({"name": ...}, "name", ["missing (required)"], id="missing-name"),
    pytest.param({"workflow": ...}, "workflow", ["missing (required)"], id="missing-workflow"),
    pytest.param(
        {f"{BIG_DIRECT}.ttft_s": ...},
        f"{BIG_DIRECT}.ttft_s",
        ["missing (required)"],
        id="missing-ttft",
    ),
    pytest.param(
        {"workflow.steps[0].model": ...},
        "workflow.steps[0].model",
        ["missing (required)"],
        id="missing-step-model",
    ),
    pytest.param(
        {"arrivals.kind": "trace"},
        "arrivals.file",
        ["missing", "trace"],
        id="trace-without-file",
    ),
    pytest.param(
        {"name": "ten step/"},
        "name",
        ["pattern", "'ten step/'"],
        id="name-unusable-as-folder",
    ),
]


@pytest.mark.parametrize(("edits", "key_path", "fragments"), BAD_VALUES)
def test_bad_value_names_file_key_path_and_what_is_allowed(
    scenario_file: ScenarioFile, edits: dict[str, Any], key_path: str, fragments: list[str]
) -> None:
    file = scenario_file(edits)
    exc = load_error(file)
    assert_reported(exc, file, key_path, *fragments)
    assert len(exc.problems) == 1, f"one mistake, one problem expected: {exc.problems}"


def test_a_step_after_itself(scenario_file: ScenarioFile) -> None:
    file = scenario_file({"workflow.steps[0].after": ["s1"]})
    assert_reported(load_error(file), file, "workflow.steps[0].after[0]", "after itself")


@pytest.mark.parametrize(
    ("cutoff", "fragments"),
    [
        pytest.param("p100", ["'p100'", "0 < NN < 100"], id="p100"),
        pytest.param("p0", ["'p0'", "0 < NN < 100"], id="p0"),
        pytest.param("fast", ["'fast'", "seconds (> 0)", "pNN"], id="word"),
        pytest.param(-3, ["-3", "> 0"], id="negative"),
        pytest.param(0, ["got 0", "> 0"], id="zero"),
        pytest.param(True, ["True", "seconds (> 0)", "'p95'"], id="bool"),
        pytest.param(None, ["None", "'p95'"], id="null"),
        pytest.param(float("inf"), ["inf", "finite"], id="infinite"),
    ],
)
def test_bad_cutoff(scenario_file: ScenarioFile, cutoff: Any, fragments: list[str]) -> None:
    file = scenario_file({"policies.cut.cutoff": cutoff})
    assert_reported(load_error(file), file, "policies.cut.cutoff", *fragments)


@pytest.mark.parametrize(("cutoff", "expected"), [("p95", "p95"), ("p99.9", "p99.9"), (2.5, 2.5)])
def test_good_cutoff_forms(scenario_file: ScenarioFile, cutoff: Any, expected: Any) -> None:
    policy = load_scenario(scenario_file({"policies.cut.cutoff": cutoff})).policies["cut"]
    assert policy.cutoff == expected  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "key_path",
    [
        "deadline_s",
        "requests",
        "providers.direct.concurrency",
        "policies.wait.timeout_s",
        "models.big.quality",
    ],
)
def test_a_boolean_is_not_a_number(scenario_file: ScenarioFile, key_path: str) -> None:
    """`deadline_s: yes` is a mistake, not a deadline of 1 s (cutoffs already refuse booleans)."""
    file = scenario_file({key_path: True})
    assert_reported(load_error(file), file, key_path, "True")


# ---------------------------------------------------------------- several problems at once


def test_several_field_problems_are_all_reported(scenario_file: ScenarioFile) -> None:
    file = scenario_file(
        {
            "providers.direct.concurency": 512,
            "deadline_s": -1,
            f"{BIG_DIRECT}.error_rate": 1.5,
            f"{BIG_DIRECT}.ttft_s.p99": 0.5,
        }
    )
    exc = load_error(file)
    paths = {path for path, _ in exc.problems}
    assert paths == {
        "providers.direct.concurency",
        "deadline_s",
        f"{BIG_DIRECT}.error_rate",
        f"{BIG_DIRECT}.ttft_s.p99",
    }
    assert str(exc).startswith(f"{file}: 4 problems:")


def test_several_reference_problems_are_all_reported(scenario_file: ScenarioFile) -> None:
    file = scenario_file(
        {
            "workflow.steps[3].after": ["s9x"],
            "policies.race.providers": ["direct", "manged"],
            "policies.downshift.to": "smal",
        }
    )
    exc = load_error(file)
    assert {path for path, _ in exc.problems} == {
        "workflow.steps[3].after[0]",
        "policies.race.providers[1]",
        "policies.downshift.to",
    }
    assert str(exc).startswith(f"{file}: 3 problems:")


def test_field_and_reference_problems_are_reported_together(scenario_file: ScenarioFile) -> None:
    """A typo must not hide an unknown step until the typo is fixed (one run, every problem)."""
    file = scenario_file({"providers.direct.concurency": 512, "workflow.steps[3].after": ["s9x"]})
    exc = load_error(file)
    paths = {path for path, _ in exc.problems}
    assert paths == {"providers.direct.concurency", "workflow.steps[3].after[0]"}


# ---------------------------------------------------------------- unusable files


def _write_text(text: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / "scenario.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return make


def _write_bytes(data: bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / "scenario.yaml"
        path.write_bytes(data)
        return path

    return make


def _folder(folder: Path) -> Path:
    path = folder / "scenarios.yaml"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        pytest.param(lambda folder: folder / "nope.yaml", ["file not found"], id="missing"),
        pytest.param(_folder, ["is a folder"], id="folder"),
        pytest.param(_write_text(""), ["the file is empty"], id="empty"),
        pytest.param(_write_text("# only a comment\n\n"), ["the file is empty"], id="comments"),
        pytest.param(
            _write_text("name: [unclosed\n  seed: 1\n"),
            ["not valid YAML", "line 2"],
            id="not-yaml",
        ),
        pytest.param(
            _write_text("name: a\n\tseed: 1\n"), ["not valid YAML", "line 2"], id="tab-indent"
        ),
        pytest.param(_write_text("- name: a\n- seed: 1\n"), ["the file is a list"], id="list"),
        pytest.param(_write_text("just words\n"), ["the file is a str"], id="scalar"),
        pytest.param(
            _write_text("name: a\n---\nseed: 1\n"), ["not valid YAML", "line 2"], id="two-docs"
        ),
        pytest.param(_write_bytes(b"\xff\xfename: a\n"), ["cannot be read"], id="not-utf8"),
    ],
)
def test_unusable_file(tmp_path: Path, make: Callable[[Path], Path], fragments: list[str]) -> None:
    file = make(tmp_path)
    exc = load_error(file)
    assert exc.source == str(file)
    assert str(exc).startswith(f"{file}: ")
    assert "Traceback" not in str(exc)
    for fragment in fragments:
        assert fragment in str(exc)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        pytest.param("seed: 7 ", "seed: 8\nseed: 7 ", "seed", id="top-level"),
        pytest.param(
            "    concurrency: 512 ",
            "    concurrency: 5\n    concurrency: 512 ",
            "concurrency",
            id="nested",
        ),
    ],
)
def test_duplicate_yaml_keys(
    tmp_path: Path, contract_path: Path, old: str, new: str, key: str
) -> None:
    """PyYAML silently keeps the last of two equal keys; the loader must refuse them, naming the
    line of the second one."""
    text = contract_path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    line = text[: text.index(old)].count("\n") + 2  # 1-based line of the repeated key
    file = tmp_path / "scenario.yaml"
    file.write_text(text.replace(old, new), encoding="utf-8")
    rendered = str(load_error(file))
    assert rendered.startswith(f"{file}: ")
    assert f"duplicate key '{key}'" in rendered
    assert f"line {line}," in rendered


# ---------------------------------------------------------------- empirical and trace files


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test from a working folder unrelated to the scenario's folder."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _csv(path: Path, text: str) -> Path:
    """Write a small CSV file (creating its folder) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


EMPIRICAL = f"{BIG_DIRECT}.ttft_s"


@pytest.mark.usefixtures("elsewhere")
def test_empirical_reads_a_csv_relative_to_the_scenario(
    tmp_path: Path, scenario_file: ScenarioFile
) -> None:
    _csv(tmp_path / "scn" / "data" / "ttft.csv", "other,ttft\n9,2.0\n9,0.5\n9,1.0\n")
    file = scenario_file(
        {EMPIRICAL: {"dist": "empirical", "file": "data/ttft.csv", "column": "ttft"}},
        name="scn/scenario.yaml",
    )
    dist = load_scenario(file).providers["direct"].serves["big"].ttft_s
    assert dist.samples is not None
    np.testing.assert_array_equal(dist.samples, [0.5, 1.0, 2.0])


@pytest.mark.usefixtures("elsewhere")
def test_empirical_defaults_to_the_first_column_and_takes_absolute_paths(
    tmp_path: Path, scenario_file: ScenarioFile
) -> None:
    csv = _csv(tmp_path / "abs" / "stall.csv", "extra\n40\n30\n")
    file = scenario_file(
        {f"{BIG_DIRECT}.stall.extra_s": {"dist": "empirical", "file": str(csv)}},
        name="scn/scenario.yaml",
    )
    stall = load_scenario(file).providers["direct"].serves["big"].stall
    assert stall is not None
    assert stall.extra_s.samples is not None
    np.testing.assert_array_equal(stall.extra_s.samples, [30.0, 40.0])


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize(
    ("csv_text", "column", "fragments"),
    [
        pytest.param(None, None, ["file not found", "missing.csv"], id="missing-file"),
        pytest.param("a,b\n1,2\n", "ttft", ["no column 'ttft'", "columns: a, b"], id="no-column"),
        pytest.param("ttft\n0.5\nfast\n", None, ["numbers", "'ttft'"], id="not-numbers"),
        pytest.param("ttft\n0.5\n-1\n", None, ["numbers >= 0"], id="negative"),
        pytest.param("ttft\n", None, ["no rows"], id="header-only"),
        pytest.param("", None, ["cannot read", "CSV"], id="empty-file"),
    ],
)
def test_bad_empirical_file(
    tmp_path: Path,
    scenario_file: ScenarioFile,
    csv_text: str | None,
    column: str | None,
    fragments: list[str],
) -> None:
    name = "missing.csv" if csv_text is None else "samples.csv"
    if csv_text is not None:
        _csv(tmp_path / "scn" / name, csv_text)
    dist: dict[str, Any] = {"dist": "empirical", "file": name}
    if column is not None:
        dist["column"] = column
    file = scenario_file({EMPIRICAL: dist}, name="scn/scenario.yaml")
    assert_reported(load_error(file), file, f"{EMPIRICAL}.file", *fragments)


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize(
    ("csv_text", "column", "offsets"),
    [
        pytest.param(
            "TIMESTAMP,x\n2023-11-16 18:15:46.6805900,1\n2023-11-16 18:15:50.0,1\n"
            "2023-11-16 18:15:47.0,1\n",
            None,
            [0.0, 0.31941, 3.31941],
            id="timestamps",
        ),
        pytest.param("t\n10\n12.5\n11\n", "t", [0.0, 1.0, 2.5], id="seconds"),
    ],
)
def test_trace_arrivals_read_relative_to_the_scenario(
    tmp_path: Path,
    scenario_file: ScenarioFile,
    csv_text: str,
    column: str | None,
    offsets: list[float],
) -> None:
    _csv(tmp_path / "scn" / "traces" / "arrivals.csv", csv_text)
    edits: dict[str, Any] = {"arrivals.kind": "trace", "arrivals.file": "traces/arrivals.csv"}
    if column is not None:
        edits["arrivals.column"] = column
    scenario = load_scenario(scenario_file(edits, name="scn/scenario.yaml"))
    assert scenario.arrivals.trace_offsets is not None
    np.testing.assert_allclose(scenario.arrivals.trace_offsets, offsets, atol=1e-9)


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize(
    ("csv_text", "column", "fragments"),
    [
        pytest.param(None, None, ["file not found"], id="missing-file"),
        pytest.param("time\n1\n2\n", None, ["no column 'TIMESTAMP'", "columns: time"], id="column"),
        pytest.param("TIMESTAMP\nyesterday\nnow\n", None, ["not timestamps"], id="not-times"),
    ],
)
def test_bad_trace_file(
    tmp_path: Path,
    scenario_file: ScenarioFile,
    csv_text: str | None,
    column: str | None,
    fragments: list[str],
) -> None:
    if csv_text is not None:
        _csv(tmp_path / "scn" / "arrivals.csv", csv_text)
    edits: dict[str, Any] = {"arrivals.kind": "trace", "arrivals.file": "arrivals.csv"}
    if column is not None:
        edits["arrivals.column"] = column
    file = scenario_file(edits, name="scn/scenario.yaml")
    assert_reported(load_error(file), file, "arrivals.file", *fragments)


def test_the_azure_trace_loads_as_arrivals(scenario_file: ScenarioFile) -> None:
    """The bundled Azure LLM trace (7-digit fractional seconds) replays with the default column."""
    trace = AZURE_CODE_TRACE
    assert trace.is_file(), f"bundled trace missing: {trace}"
    scenario = load_scenario(scenario_file({"arrivals.kind": "trace", "arrivals.file": str(trace)}))
    offsets = scenario.arrivals.trace_offsets
    assert offsets is not None
    rows = sum(1 for _ in trace.open(encoding="utf-8")) - 1
    assert len(offsets) == rows
    assert offsets[0] == 0.0
    assert np.all(np.diff(offsets) >= 0)
    assert 0 < offsets[-1] < 7 * 24 * 3600


# ---------------------------------------------------------------- overrides


def test_override_changes_a_key_path_and_keeps_the_original(contract_path: Path) -> None:
    base = load_scenario(contract_path)
    changed = with_overrides(
        base, {"arrivals.rate_per_s": 2.0, f"{BIG_DIRECT}.ttft_s.p99": 5.0, "seed": 11}
    )
    assert changed.arrivals.rate_per_s == 2.0
    assert changed.providers["direct"].serves["big"].ttft_s.p99 == 5.0
    assert changed.seed == 11
    assert base.arrivals.rate_per_s == 0.5
    assert base.providers["direct"].serves["big"].ttft_s.p99 == 4.0
    unchanged = with_overrides(base, {})
    assert unchanged == base


@pytest.mark.parametrize(
    ("overrides", "key_path", "fragments"),
    [
        pytest.param({"arrivals.rate_per_s": -1}, "arrivals.rate_per_s", ["greater than 0"]),
        pytest.param(
            {f"{BIG_DIRECT}.ttft_s.p99": 0.1}, f"{BIG_DIRECT}.ttft_s.p99", ["median (0.8)"]
        ),
        pytest.param({"policies.cut.cutoff": "p100"}, "policies.cut.cutoff", ["0 < NN < 100"]),
        pytest.param({"arrivals.rat_per_s": 1}, "arrivals.rat_per_s", ["did you mean"]),
        pytest.param({"nothing.here": 1}, "nothing.here", ["no key 'nothing'"]),
        pytest.param({"workflow.steps[0].after": ["s9x"]}, "workflow.steps[0].after", ["no key"]),
    ],
)
def test_bad_override_names_the_key_path(
    contract_path: Path, overrides: dict[str, Any], key_path: str, fragments: list[str]
) -> None:
    base = load_scenario(contract_path)
    with pytest.raises(ScenarioError) as info:
        with_overrides(base, overrides, source="sweep point 3")
    exc = info.value
    assert exc.source == "sweep point 3"
    assert str(exc).startswith("sweep point 3: ")
    message = problem_message(exc, key_path)
    for fragment in fragments:
        assert fragment in message


def test_override_keeps_files_read_relative_to_the_scenario(
    tmp_path: Path, scenario_file: ScenarioFile, elsewhere: Path
) -> None:
    """A sweep overrides a scenario loaded from another folder: its CSV data must carry over."""
    _csv(tmp_path / "scn" / "data" / "ttft.csv", "ttft\n0.5\n1.0\n")
    _csv(tmp_path / "scn" / "data" / "arrivals.csv", "t\n0\n2\n")
    file = scenario_file(
        {
            EMPIRICAL: {"dist": "empirical", "file": "data/ttft.csv"},
            "arrivals.kind": "trace",
            "arrivals.file": "data/arrivals.csv",
            "arrivals.column": "t",
        },
        name="scn/scenario.yaml",
    )
    base = load_scenario(file)
    assert not (elsewhere / "data").exists()
    changed = with_overrides(base, {"arrivals.rate_per_s": 2.0})
    samples = changed.providers["direct"].serves["big"].ttft_s.samples
    assert samples is not None
    np.testing.assert_array_equal(samples, [0.5, 1.0])
    assert changed.arrivals.trace_offsets is not None
    np.testing.assert_array_equal(changed.arrivals.trace_offsets, [0.0, 2.0])


# ---------------------------------------------------------------- dicts and the JSON Schema


def test_scenario_from_dict_matches_loading_the_file(
    contract_path: Path, contract_data: dict[str, Any]
) -> None:
    from_dict = scenario_from_dict(contract_data).model_dump()
    assert from_dict == load_scenario(contract_path).model_dump()
    contract_data["deadline_s"] = 0
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(contract_data, source="inline")
    assert problem_message(info.value, "deadline_s").startswith("input should be greater than 0")
    assert str(info.value).startswith("inline: ")


def test_json_schema_is_json_with_the_top_level_properties(contract_data: dict[str, Any]) -> None:
    schema = json.loads(json_schema_text())
    assert schema == json.loads(json.dumps(json_schema()))
    assert schema["type"] == "object"
    assert schema["$schema"].startswith("https://json-schema.org/")
    properties = set(schema["properties"])
    assert set(contract_data) <= properties
    assert set(Scenario.model_fields) == properties
    assert {"name", "models", "providers", "workflow", "policies"} <= set(schema["required"])
    assert schema.get("additionalProperties") is False
