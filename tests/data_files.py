"""Where the test data lives: ``tests/data`` in this repository (see its
README.md for what each file is and where it comes from).  The tests and
benches name these paths through this module only; none of them reads
anything outside the checkout.  (Not named ``test_*.py``: it is no test
module for pytest to collect.)"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TOKENIZERS = DATA / "tokenizers"
DATASETS = DATA / "datasets"

#: Character-level tokenizer: one character is one token.
CHAR_TOKENIZER = TOKENIZERS / "char"
#: The same vocabulary with a chat template (reasoning and tool calls).
CHAR_CHAT_TOKENIZER = TOKENIZERS / "char_chat"
#: The reference client's 1,000 prompts (``text_input``, ``ref_output``).
DUMMY_1K = DATASETS / "dummy_1k.jsonl"
#: 20 recorded agentic coding trajectories, 1,007 client turns.
AGENTIC_CODING = DATASETS / "agentic" / "agentic_coding_2.5h.jsonl"
#: Five LiveCodeBench-shaped samples (``question_id``, ``question``,
#: ``starter_code``, and ``response``: a model's answer for the oracle) with
#: the reference's ``test_cases/<question_id>.json`` beside them; three pass.
LCB_TINY = DATASETS / "livecodebench" / "lcb_tiny.jsonl"
