"""Every ``mlpe-fast`` command of ``docs/models.md`` still works as written.

The commands and the YAML files are read out of the page; the YAML files are
written into a scratch directory beside small stand-ins for the datasets and
tokenizers they name (the tokenizers under the Hugging Face ids the page
uses, which a local directory of that path answers for).  Each ``run`` is
run there with ``--dry-run``: the configuration resolved, the datasets
loaded and checked, the plan printed, no request sent.  ``init`` runs as it
is; ``bundle``, ``check`` and ``score``, which need a measured curve, must
parse.  A command the page documents that no longer parses, or a dataset
spec that no longer loads, fails here."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from mlpe_fast.cli import build_parser, main
from mlpe_fast.config.benchmark import BENCHMARK_MODELS
from tests.data_files import AGENTIC_CODING, CHAR_CHAT_TOKENIZER, CHAR_TOKENIZER, LCB_TINY
from tests.harmony_tokenizer import harmony_tokenizer

from .known_answers import deepseek_r1_set, deepseek_r1_tokenizer

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall(DOC.read_text(encoding="utf-8")) if lang == kind]


def _commands() -> list[list[str]]:
    """The page's shell commands, continuation lines joined, comments cut."""
    commands = []
    for block in _blocks(""):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["mlpe-fast"]:
                commands.append(words[1:])
    return commands


def _yaml_files() -> dict[str, str]:
    """The page's YAML files by name: each block's first line is ``# NAME``."""
    files = {}
    for block in _blocks("yaml"):
        first, _, _ = block.partition("\n")
        assert first.startswith("# ") and first.endswith(".yaml"), first
        files[first[2:]] = block
    return files


COMMANDS = _commands()
# The checker's model names (spec §2.8, rule model-name-valid).
MODELS = BENCHMARK_MODELS


def test_the_page_documents_every_model_and_every_step() -> None:
    runs = [c for c in COMMANDS if c[0] == "run"]
    assert {c[c.index("--mlperf-model") + 1] for c in runs} == set(MODELS)
    assert all("--mode" in c and c[c.index("--mode") + 1] == "both" for c in runs)
    assert {c[0] for c in COMMANDS} == {"init", "run", "score", "bundle", "check"}
    assert set(_yaml_files()) == {
        "gpt-oss-120b.yaml",
        "kimi-k3.yaml",
        "qwen3_6-35b-a3b.yaml",
        "deepseek-v4_1-flash.yaml",
    }


def test_the_run_help_names_every_model(capsys: pytest.CaptureFixture[str]) -> None:
    # it named the three single-turn models only, though the agentic gates take
    # the other three
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in MODELS:
        assert name in help_text.rpartition("--mlperf-model NAME")[2][:300], name


def _jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _copy_tokenizer(source: Path, name: str) -> None:
    shutil.copytree(source, Path(name))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the page's commands name, small: every dataset in its
    columns, every tokenizer under its model's id."""
    root = tmp_path_factory.mktemp("models-doc")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for name, text in _yaml_files().items():
            Path(name).write_text(text, encoding="utf-8")
        data = Path("data")
        _jsonl(
            data / "cnn_dailymail_v3.jsonl",
            [{"input": f"Summarise article {i}.", "output": f"Summary {i}."} for i in range(8)],
        )
        _copy_tokenizer(CHAR_TOKENIZER, "meta-llama/Llama-3.1-8B-Instruct")

        harmony_tokenizer(Path("openai/gpt-oss-120b"))
        pyarrow = pytest.importorskip("pyarrow")
        parquet = pytest.importorskip("pyarrow.parquet")
        table = pyarrow.table({"input_tokens": [[1, 2, 3], [4, 5, 6, 7]]})
        parquet.write_table(table, data / "perf_eval_ref.parquet")
        _jsonl(data / "aime25.jsonl", [{"question": "Compute 2 + 2.", "answer": "4"}])
        _jsonl(data / "gpqa_diamond.jsonl", [{"question": "Which?", "ground_truth": "choice1"}])
        shutil.copy(LCB_TINY, data / "livecodebench.jsonl")

        tokenizer = deepseek_r1_tokenizer(Path("deepseek-ai/DeepSeek-R1"))
        deepseek_r1_set(data / "mlperf_deepseek_r1.jsonl", tokenizer, 12, 4)

        shutil.copy(AGENTIC_CODING, data / "agentic_combined.jsonl")
        _jsonl(
            data / "swe_bench_verified_200.jsonl",
            [{"instance_id": f"repo__repo-{i}", "problem_statement": "fix"} for i in range(4)],
        )
        for model in (
            "moonshotai/Kimi-K3",
            "Qwen/Qwen3.6-35B-A3B",
            "deepseek-ai/DeepSeek-V4.1-Flash",
        ):
            _copy_tokenizer(CHAR_CHAT_TOKENIZER, model)
    return root


@pytest.mark.parametrize(
    "command",
    [c for c in COMMANDS if c[0] == "run"],
    ids=lambda c: c[c.index("--mlperf-model") + 1],
)
def test_each_run_command_dry_runs(
    command: list[str],
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(workspace)
    status = main([*command, "--no-progress", "--dry-run"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert out.out.startswith("plan: a curve of "), out.out
    assert "mlpe-fast: dry run: no request sent, no file written" in out.out
    assert not Path(command[command.index("--report-dir") + 1]).exists()


def test_init_writes_the_system_template(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    (init,) = [c for c in COMMANDS if c[0] == "init"]
    assert main(init) == 0, capsys.readouterr().err
    assert "max_supported_concurrency" in Path(init[init.index("--system-file") + 1]).read_text()


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c[0] in ("bundle", "check", "score")], ids=" ".join
)
def test_each_command_after_the_curve_parses(command: list[str]) -> None:
    args = build_parser().parse_args(command)
    assert args.command == command[0]
