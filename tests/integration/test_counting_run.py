"""``mlpe-fast run`` counts a BPE tokenizer's tokens in C (issue 23): the
user's command against the simulated endpoint's oracle, with
``tests/bpe_tokenizer.py``'s byte-level BPE.  Every answer is the same text,
so the run's OSL total must be the completed queries times ``tokenizers``'
own count of it; ASCII prose takes the exact fast path (C where it is
built), and a non-ASCII answer still falls back to ``tokenizers``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.metrics import _bpe
from mlpe_fast.metrics.tokens import SPILL_BATCH, load_tokenizer
from tests.bpe_tokenizer import train_bpe
from tests.data_files import CHAR_CHAT_TOKENIZER, DUMMY_1K

pytestmark = pytest.mark.pipeline

PROSE = (
    "Don't stop: it's 2024, and THE answer's 42.  Twelve   spaces?\n\n"
    "Yes -- see https://example.com/a/b, (then) 1234567 items; done!"
)
NON_ASCII = "Café au lait — naïve résumé, twice."


def _bpe_and_answers(tmp_path: Path, answer: str) -> tuple[Path, Path]:
    """A BPE tokenizer trained on the dummy prompts, and 20 questions that
    the oracle answers with ``answer``."""
    rows = [json.loads(line) for line in DUMMY_1K.read_text().splitlines()][:300]
    tokenizer_dir = train_bpe(
        tmp_path / "bpe", [r["text_input"] for r in rows], 1000, CHAR_CHAT_TOKENIZER
    )
    dataset = tmp_path / "answers.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"prompt": f"Question {i}?", "ground_truth": answer}) + "\n"
            for i in range(20)
        )
    )
    return tokenizer_dir, dataset


@pytest.mark.parametrize("answer", [PROSE, NON_ASCII], ids=["prose", "non-ascii"])
def test_a_run_s_output_tokens_equal_tokenizers(tmp_path: Path, answer: str) -> None:
    tokenizer_dir, dataset = _bpe_and_answers(tmp_path, answer)
    out = tmp_path / "run"
    flags = ("--oracle", str(dataset), "--oracle-token-chars", "3")
    with simulated_endpoint(flags) as url:
        code = main(
            [
                "run", "--endpoints", url, "--model", "mlpe-sim", "--dataset", str(dataset),
                "--tokenizer", str(tokenizer_dir), "--concurrency", "8", "--num-samples", "60",
                "--warmup-requests", "0", "--no-progress", "--report-dir", str(out),
            ]
        )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "performance" / "result_summary.json").read_text())
    expected = len(load_tokenizer(str(tokenizer_dir)).encode(answer, add_special_tokens=False))
    assert summary["n_samples_completed"] == 60
    assert summary["output_sequence_lengths"]["total"] == 60 * expected
    counting = summary["mlpe_fast"]["token_counting"]
    implementation = "native" if _bpe.NativeBPECounter is not None else "python"
    assert counting.startswith(f"exact fast path ({implementation})")


def test_a_long_run_s_waiting_jobs_go_to_disk_and_count_the_same(tmp_path: Path) -> None:
    """Past two spill batches the jobs waiting for the count wait on disk
    (metrics/count_spill.py); the totals are exact all the same, and the
    spill file leaves no name behind in the run folder."""
    tokenizer_dir, dataset = _bpe_and_answers(tmp_path, PROSE)
    out, requests = tmp_path / "run", 3 * SPILL_BATCH + 100
    flags = ("--oracle", str(dataset), "--oracle-token-chars", "3")
    with simulated_endpoint(flags) as url:
        code = main(
            [
                "run", "--endpoints", url, "--model", "mlpe-sim", "--dataset", str(dataset),
                "--tokenizer", str(tokenizer_dir), "--concurrency", "32",
                "--num-samples", str(requests), "--warmup-requests", "0", "--no-progress",
                "--report-dir", str(out),
            ]
        )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "performance" / "result_summary.json").read_text())
    expected = len(load_tokenizer(str(tokenizer_dir)).encode(PROSE, add_special_tokens=False))
    assert summary["n_samples_completed"] == requests
    assert summary["output_sequence_lengths"]["total"] == requests * expected
    spill = summary["mlpe_fast"]["token_counting_spill"]
    assert spill["jobs"] >= 2 * SPILL_BATCH and spill["peak_bytes"] > 0, spill
    assert spill["failure"] is None
    assert not [p.name for p in out.rglob("*") if "count-jobs" in p.name]
