"""The settings that take one of a few names: their types, and the
spellings each accepts.

A table maps every accepted spelling (lower case) to the value it means;
``SHOWN`` lists what an error message offers, where that is not every
spelling (aliases and the reference's underscore forms stay unadvertised);
``UNSUPPORTED`` names the reference's values mlpe-fast refuses, with what
they are, so that the message says "not supported" rather than "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

__all__ = (
    "API_TYPES",
    "API_TYPES_SHOWN",
    "API_TYPES_UNSUPPORTED",
    "BENCHMARK_MODES",
    "HARMONY_MODES",
    "LOAD_PATTERNS",
    "LOAD_PATTERNS_SHOWN",
    "LOAD_PATTERNS_UNSUPPORTED",
    "MODES",
    "OFFLINE_KINDS",
    "RECEIVE_STAMPS",
    "STREAMING",
    "TEST_TYPES",
    "TOKEN_SALT_PLACEMENTS",
    "ApiType",
    "BenchmarkMode",
    "HarmonyMode",
    "LoadPattern",
    "Mode",
    "OfflineKind",
    "ReceiveStamps",
    "Streaming",
    "TestType",
    "TokenSaltPlacement",
)

LoadPattern = Literal["concurrency", "offline", "poisson", "agentic_inference"]
Mode = Literal["perf", "acc", "both"]
ReceiveStamps = Literal["kernel", "packet", "read"]
OfflineKind = Literal["dedicated", "elected", "none"]
ApiType = Literal["openai", "openai-completions", "sglang"]
Streaming = Literal["auto", "on", "off"]
#: The reference's top-level ``type:`` (``eval``: its accuracy-only configs).
TestType = Literal["offline", "online", "submission", "eval"]
#: A ``type: submission`` config's ``benchmark_mode:``.
BenchmarkMode = Literal["offline", "online"]
#: Where a token-id prompt's salt goes (``load/token_salt.py``).
TokenSaltPlacement = Literal["user", "start"]
#: Whether text prompts on a token route are encoded in Harmony (``load/harmony.py``).
HarmonyMode = Literal["auto", "on", "off"]

# The reference's ``max_throughput`` is mlpe-fast's Offline burst; both
# spellings of each name are accepted, as YAML and flags spell them apart.
LOAD_PATTERNS: Mapping[str, LoadPattern] = {
    "concurrency": "concurrency",
    "max_throughput": "offline",
    "max-throughput": "offline",
    "offline": "offline",
    "poisson": "poisson",
    "agentic_inference": "agentic_inference",
    "agentic-inference": "agentic_inference",
}
LOAD_PATTERNS_SHOWN = ("concurrency", "max_throughput", "offline", "poisson", "agentic_inference")
LOAD_PATTERNS_UNSUPPORTED = {"burst": "burst load patterns", "step": "step load patterns"}

# ``openai_completions`` is the reference's YAML spelling; ``sglang`` is
# SGLang's native ``/generate`` (token ids in, the whole text so far out).
API_TYPES: Mapping[str, ApiType] = {
    "openai": "openai",
    "openai-completions": "openai-completions",
    "openai_completions": "openai-completions",
    "sglang": "sglang",
}
API_TYPES_SHOWN = ("openai", "openai-completions", "sglang")
API_TYPES_UNSUPPORTED = {"videogen": "videogen endpoints"}

MODES: Mapping[str, Mode] = {"perf": "perf", "acc": "acc", "both": "both"}
STREAMING: Mapping[str, Streaming] = {"auto": "auto", "on": "on", "off": "off"}
OFFLINE_KINDS: Mapping[str, OfflineKind] = {
    "dedicated": "dedicated",
    "elected": "elected",
    "none": "none",
}
RECEIVE_STAMPS: Mapping[str, ReceiveStamps] = {
    "kernel": "kernel",
    "packet": "packet",
    "read": "read",
}
TEST_TYPES: Mapping[str, TestType] = {
    "offline": "offline",
    "online": "online",
    "submission": "submission",
    "eval": "eval",
}
BENCHMARK_MODES: Mapping[str, BenchmarkMode] = {"offline": "offline", "online": "online"}
TOKEN_SALT_PLACEMENTS: Mapping[str, TokenSaltPlacement] = {"user": "user", "start": "start"}
HARMONY_MODES: Mapping[str, HarmonyMode] = {"auto": "auto", "on": "on", "off": "off"}
