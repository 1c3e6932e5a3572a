"""What the MLPerf Endpoints rules fix, that the configuration defaults to
or checks against: seed set A and the benchmark models' names."""

from __future__ import annotations

__all__ = (
    "BENCHMARK_MODELS",
    "SEED_SET_A_MODEL",
    "SEED_SET_A_SAMPLE_INDEX",
    "SEED_SET_A_SCHEDULER",
)

# MLPerf Endpoints seed set A (cohort 2026-10-C1; spec §2.5).
SEED_SET_A_SCHEDULER = 10487924139932647040
SEED_SET_A_SAMPLE_INDEX = 586478644936801402
SEED_SET_A_MODEL = 9315206023656308754

#: The benchmark models checker 1.5.3.0 accepts, spelt exactly (``checker.py``,
#: ``_ALLOWED_MODEL_NAMES``; spec §2.8): ``--mlperf-model``, and a submission's
#: results folder name.
BENCHMARK_MODELS: tuple[str, ...] = (
    "llama3_1-8b",
    "gpt-oss-120b",
    "deepseek-r1",
    "kimi-k3",
    "qwen3_6-35b-a3b",
    "deepseek-v4_1-flash",
)
