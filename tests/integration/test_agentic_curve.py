"""From an agentic endpoint to a checked submission: a seven-point agentic
curve on the recorded trajectories against the simulated endpoint's replay of
them (development sizes), SWE-bench accuracy runs in the four mandatory bands
against a fake of the SWE-bench service, the bundle, and the official checker
on it, for each agentic model of v1.0: Kimi K3, Qwen3.6-35B-A3B and
DeepSeek-V4.1-Flash (spec §2.1, §2.4, §2.6, §2.8; ``docs/agentic.md`` §5,
``docs/models.md``).  No errors; the warnings are exactly those that
development sizes must draw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from mlpe_fast.accuracy.agentic_gates import AGENTIC_THRESHOLDS
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from tests.bpe_tokenizer import agentic_answer_texts, train_bpe
from tests.data_files import AGENTIC_CODING as AGENTIC
from tests.data_files import CHAR_CHAT_TOKENIZER as CHAR_CHAT

from .curve_bundles import bundle_and_check, system_file
from .swe_bench_fake import FakeService, serve_fake

pytestmark = pytest.mark.pipeline

pytest.importorskip("submission_checker", reason="the official checker is not installed")

C_MAX = 40
# Ultra Low 4, Low 6, Medium 10, High 20-40 for C_max 40 (C_min 4).
LEVELS = (4, 6, 10, 20, 30, 36, 40)
TRAJECTORIES = 4
SWE_INSTANCES = 100


def _recapped(source: Path, out: Path) -> Path:
    """The recorded trajectories with every assistant reasoning followed by a
    recap (its first half again): answers a third longer, as a model that
    reasons at greater length writes them.  Nothing else changes, so the
    inline score (the bash executables of each turn) is still 1.0."""
    with source.open(encoding="utf-8") as rows, out.open("w", encoding="utf-8") as f:
        for line in rows:
            row = json.loads(line)
            reasoning = row.get("reasoning_content")
            if row.get("role") == "assistant" and reasoning:
                row["reasoning_content"] = (
                    f"{reasoning}\n\nRecap: {reasoning[: len(reasoning) // 2]}"
                )
            f.write(json.dumps(row) + "\n")
    return out


class AgenticModel(NamedTuple):
    """One agentic model's curve: how its answers are counted, what the
    SWE-bench service resolves in each band, and its system file's link."""

    name: str
    vocabulary: int  # of the byte-level BPE trained on the answers
    lengthen: bool  # the answers of :func:`_recapped`
    resolved: tuple[int, int, int, int]  # of SWE_INSTANCES, Ultra Low to High
    link: str


MODELS = (
    # A 330-token BPE trained on the recorded answers counts them at about 1.4
    # characters a token: the first four trajectories' answers average 476 tokens
    # a turn, inside Kimi K3's [425, 520] (one character a token would give 675).
    # 93 % alone is below Kimi K3's 93.5, but the gate is the mean of the bands,
    # 95.25 % (spec §2.6).
    AgenticModel(
        "kimi-k3", 330, False, (97, 93, 95, 96), "https://huggingface.co/moonshotai/Kimi-K3"
    ),
    # 450 tokens: 397 a turn, inside Qwen3.6's [344, 422]; 66 % is below its
    # 69.0, the mean 69.75 is not.
    AgenticModel(
        "qwen3_6-35b-a3b",
        450,
        False,
        (72, 66, 70, 71),
        "https://huggingface.co/Qwen/Qwen3.6-35B-A3B",
    ),
    # DeepSeek-V4.1-Flash's [793, 970] is above the recorded answers even at one
    # character a token (675 a turn): the recapped answers, counted by a BPE of
    # two merges (nearly a character a token, and as fast as the others; the
    # character-level tokenizer of tests/data counts the long histories four
    # times slower), 867; 95 % is below its 96.4, the mean 96.75 is not.
    AgenticModel(
        "deepseek-v4_1-flash",
        262,
        True,
        (98, 95, 97, 97),
        "https://huggingface.co/deepseek-ai/DeepSeek-V4.1-Flash",
    ),
)


class BandScores(FakeService):
    """A SWE-bench service whose n-th run resolves ``resolved[n]``."""

    def __init__(self, resolved: tuple[int, ...]) -> None:
        super().__init__()
        self.resolved = resolved

    def status(self) -> dict[str, Any]:
        resolved = self.resolved[len(self.payloads) - 1]
        self.result = {"submitted_instances": SWE_INSTANCES, "resolved_instances": resolved}
        return super().status()


def _config(path: Path, dataset: Path, swe_ids: Path, service: str) -> Path:
    config = {
        "model_params": {"name": "m"},
        "datasets": [
            {
                "name": "agentic_coding",
                "type": "performance",
                "path": str(dataset),
                # No recorded tool delays (up to 120 s each): a development run.
                "agentic_inference": {
                    "inject_tool_delay": False,
                    "num_trajectories_to_issue": TRAJECTORIES,
                },
            },
            {
                "name": "swe_bench",
                "type": "accuracy",
                "path": str(swe_ids),
                "parser": {"prompt": "problem_statement"},
                "accuracy_config": {
                    "eval_method": "swe_bench_scorer",
                    "ground_truth": "instance_id",
                    "extras": {
                        "swebench_service_url": service,
                        "poll_interval_s": 0.01,
                        "num_instances": SWE_INSTANCES,
                    },
                },
            },
        ],
        "settings": {"load_pattern": {"type": "agentic_inference"}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _swe_ids(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(SWE_INSTANCES):
            f.write(json.dumps({"instance_id": f"repo__repo-{i}", "problem_statement": "fix"}))
            f.write("\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_an_agentic_curve_bundles_and_passes_the_checker(
    model: AgenticModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = _recapped(AGENTIC, tmp_path / "agentic.jsonl") if model.lengthen else AGENTIC
    tokenizer = (
        CHAR_CHAT
        if model.vocabulary is None
        else train_bpe(
            tmp_path / "bpe",
            agentic_answer_texts(dataset),
            model.vocabulary,
            template_from=CHAR_CHAT,
        )
    )
    report = tmp_path / "curve"
    with (
        serve_fake(BandScores(model.resolved)) as (fake, service),
        simulated_endpoint(("--ttft-ms", "1", "--itl-ms", "0", "--replay", str(dataset))) as url,
    ):
        fake.polls_before_done = 0
        config = _config(
            tmp_path / "agentic.yaml", dataset, _swe_ids(tmp_path / "swe.jsonl"), service
        )
        code = main(
            [
                "run",
                "-c",
                str(config),
                "--no-progress",
                "--endpoints",
                url,
                "--tokenizer",
                str(tokenizer),
                "--concurrency",
                ",".join(map(str, LEVELS)),
                "--max-concurrency",
                str(C_MAX),
                "--mode",
                "both",
                "--mlperf-model",
                model.name,
                "--report-dir",
                str(report),
            ]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    curve = json.loads((report / "pareto.json").read_text(encoding="utf-8"))
    points = curve["points"]
    assert curve["x_metric"] == "e2e_avg_interactivity"
    assert [p["concurrency"] for p in points] == list(LEVELS)
    assert all(p["offline"] == "none" for p in points)  # an agentic curve has none
    assert all(p["e2e_avg_interactivity"] > 0 for p in points)
    # SWE-bench once in each mandatory band, at its lowest point (spec §2.6).
    assert [p["concurrency"] for p in points if p["accuracy"]] == [4, 6, 10, 20]
    assert len(fake.payloads) == 4
    assert [p["workers"] for p in fake.payloads] == [4, 6, 10, 20]
    # Every point is far shorter than the rules' 600 s / 2400 s, and said so,
    # and the budget of four trajectories is below every concurrency.
    assert out.count("development duration: the window lasted") == len(LEVELS)
    assert "concurrency at or above the trajectory budget 4" in out
    # The gates as the checker applies them: inline and OSL at every point, SWE-bench
    # on the mean of the bands.
    gate = f"gate ({model.name}, inline accuracy and OSL per turn): pass"
    assert out.count(gate) == len(LEVELS), out
    bands = ", ".join(f"r{c} {n:.2f}" for c, n in zip((4, 6, 10, 20), model.resolved, strict=True))
    assert f"SWE-bench gate ({model.name}, mean of the bands: {bands}): pass" in out, out
    low, high = AGENTIC_THRESHOLDS[model.name].osl_range
    for level in LEVELS:
        folder = report / f"r{level}"
        scores = json.loads((folder / "accuracy" / "accuracy_results.json").read_text())
        names = [entry["dataset_name"] for entry in scores["accuracy_scores"]]
        assert names == (["performance", "swe_bench"] if level <= 20 else ["performance"])
        summary = json.loads((folder / "performance" / "result_summary.json").read_text())
        full_run = summary["output_sequence_lengths_full_run"]["output_sequence_lengths"]
        assert low <= full_run["avg"] <= high

    system = system_file(
        tmp_path / "system.yaml",
        C_MAX,
        model_name=model.name,
        link_to_model=model.link,
        dataset="agentic_coding_2.5h",
        dataset_name="20 recorded coding trajectories",
    )
    bundle = tmp_path / "bundle"
    out, warnings = bundle_and_check(report, system, bundle, capsys)
    # Development sizes draw point-duration (windows of well under a second) and
    # steady-state-basis: an agentic point reports whole-run numbers, as the
    # reference does (no steady-state window for agentic; spec §1.4).
    assert warnings == {"point-duration", "steady-state-basis"}, out
    point = yaml.safe_load(next(bundle.rglob("r40/point.yaml")).read_text(encoding="utf-8"))
    assert point["runtime_settings"]["load_pattern"] == "agentic_inference"
    assert point["offline"] == "none" and point["region"] == "high_concurrency"
    assert point["runtime_settings"]["agentic_inference"] == {
        "num_trajectories_to_issue": TRAJECTORIES,
        "enable_salt": True,
        "inject_tool_delay": False,
        "stop_issuing_on_first_user_complete": False,
        "turn_timeout_s": 86400.0,
    }
    assert "steady_state" not in point
    # Inline accuracy at every point, from the bundle's own files.
    inline = [
        next(
            e
            for e in json.loads(p.read_text())["accuracy_scores"]
            if e["dataset_name"] == "performance"
        )
        for p in sorted(bundle.rglob("accuracy_results.json"))
    ]
    assert len(inline) == len(LEVELS) and all(e["score"] == 1.0 for e in inline)
