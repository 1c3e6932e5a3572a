"""Inline accuracy of an agentic run: every replayed turn's answer against
the assistant row the dataset recorded for it (``docs/agentic.md`` §4.1;
the reference's ``agentic_inference_inline`` scorer).

It issues nothing: it reads what the performance run already got.

* **Which turns.** A client turn followed by a recorded assistant row has a
  ground truth.  Conversations named ``sim_<digits>`` are *workflow*
  conversations (the truth is the row's ``intent_codes``); all others are
  *coding* (the truth is the row's ``bash`` tool calls).  A turn whose
  truth is empty is excluded.  Every issued turn with a truth counts, all
  repeats and the turns after the performance window included; a turn that
  failed or was aborted scores 0.
* **Workflow.** The answer's intent is the first ``intent: I###`` in its
  reasoning, then in its content; failing that, the last bare ``I###`` in
  its reasoning, then in its content.  1 when it is one of the truth's.
* **Coding.** Both sides become a multiset of executables: each ``bash``
  call's ``command`` (or ``cmd``) with quoted text removed, split into
  stages at ``||``, ``|``, ``&&``, ``;`` and line ends; in each stage the
  first word after ``VAR=value`` assignments and the wrappers ``env``,
  ``time``, ``nice``, ``sudo``, ``exec``, ``command``, without its path,
  lower-cased and without a ``.N[.M]`` version suffix, named through
  :data:`EXECUTABLES` (names it does not know are left out).  The score is
  the multisets' intersection over their union.
* **The score** is the mean over the scored turns, rounded to 4 places, a
  fraction in [0, 1].  It is the ``performance`` entry of
  ``accuracy/accuracy_results.json`` (``dataset_type: performance``, which
  the checker gates at every agentic point), with the per-turn detail in
  ``scores.json``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..artifacts.events import TextModelOutput
from ..load.agentic import AgenticDataset
from ..metrics.count_inputs import merge_tool_call_chunks

__all__ = (
    "EXECUTABLES",
    "InlineTurn",
    "bash_actions",
    "inline_entry",
    "model_intent",
    "score_inline",
)

# What an executable counts as: the families the reference scorer tells
# apart, so that scores match it (its _EXECUTABLE_ALIASES).
_FAMILIES: dict[str, tuple[str, ...]] = {
    "python": ("python", "python2", "python3", "py"),
    "pip": ("pip", "pip3"),
    "pytest": ("pytest",),
    "pylint": ("pylint",),
    "sphinx": ("sphinx-build", "sphinx-quickstart"),
    "cython": ("cython",),
    "make": ("make",),
    "conda": ("conda",),
    "cat": ("cat", "less", "more"),
    "head": ("head",),
    "tail": ("tail",),
    "wc": ("wc",),
    "diff": ("diff",),
    "grep": ("grep", "egrep", "fgrep", "rg", "ag"),
    "sed": ("sed",),
    "awk": ("awk", "gawk"),
    "tr": ("tr",),
    "sort": ("sort",),
    "uniq": ("uniq",),
    "cut": ("cut",),
    "find": ("find", "locate"),
    "ls": ("ls",),
    "xargs": ("xargs",),
    "cp": ("cp",),
    "mv": ("mv",),
    "rm": ("rm",),
    "mkdir": ("mkdir",),
    "touch": ("touch",),
    "tee": ("tee",),
    "source": ("source", "."),
    "which": ("which",),
    "alias": ("alias",),
    "unset": ("unset",),
    "export": ("export",),
    "git": ("git",),
    "curl": ("curl", "wget"),
    "true": ("true",),
    "false": ("false",),
    "timeout": ("timeout",),
    "date": ("date",),
    "apt": ("apt", "apt-get"),
    "yum": ("yum",),
}
EXECUTABLES: dict[str, str] = {
    name: family for family, names in _FAMILIES.items() for name in names
}
"""Executable name -> the action it counts as."""

_WRAPPERS = frozenset({"env", "time", "nice", "sudo", "exec", "command"})
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`")
_STAGES = re.compile(r"\|\||\||&&|;|\n")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VERSION = re.compile(r"\.\d+(\.\d+)?$")
_INTENT = re.compile(r"\bintent:\s*(I\d{3})\b", re.IGNORECASE)
_BARE_INTENT = re.compile(r"\bI(\d{3})\b")
_WORKFLOW = re.compile(r"sim_\d+")
_REPEAT = re.compile(r"__repeat_(\d+)$")


class InlineTurn(NamedTuple):
    """An issued turn: its logical conversation id (``__repeat_<r>`` after
    the first pass), its dataset row, and what came back (None: it failed
    or was aborted)."""

    conversation_id: str
    turn: int
    output: TextModelOutput | None


def bash_actions(tool_calls: Iterable[Any] | None) -> list[str]:
    """The executables of the ``bash`` calls among ``tool_calls`` (module doc)."""
    actions: list[str] = []
    for call in tool_calls or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or function.get("name") != "bash":
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                continue
        if not isinstance(arguments, Mapping):
            continue
        command = arguments.get("command") or arguments.get("cmd")
        if not isinstance(command, str):
            continue
        for stage in _STAGES.split(_QUOTED.sub(" ", command)):
            words = stage.split()
            skip = 0
            while skip < len(words) and (
                _ASSIGNMENT.match(words[skip]) or words[skip] in _WRAPPERS
            ):
                skip += 1
            if skip == len(words):
                continue
            name = _VERSION.sub("", words[skip].rsplit("/", 1)[-1].lower())
            action = EXECUTABLES.get(name)
            if action:
                actions.append(action)
    return actions


def model_intent(reasoning: str, content: str) -> str | None:
    """The workflow intent an answer states (module doc)."""
    for text in (reasoning, content):
        found = _INTENT.search(text)
        if found:
            return found.group(1).upper()
    for text in (reasoning, content):
        bare = _BARE_INTENT.findall(text)
        if bare:
            return f"I{bare[-1]}"
    return None


def _truth_intents(row: Mapping[str, Any]) -> set[str]:
    codes = row.get("intent_codes")
    if not isinstance(codes, list | tuple):
        return set()
    return {code.upper() for code in codes if isinstance(code, str) and code}


def _joined(value: str | tuple[str, ...] | None) -> str:
    if not value:
        return ""
    return value if isinstance(value, str) else "".join(value)


def score_inline(dataset: AgenticDataset, issued: Sequence[InlineTurn]) -> dict[str, Any]:
    """The ``scores.json`` of an agentic run (module doc): ``score``,
    ``turns`` (issued, expected, observed, missing, scored), ``domains``,
    ``per_turn`` and ``excluded_turns``."""
    truths: dict[tuple[str, int], tuple[str, dict[str, Any]]] = {}
    excluded: list[dict[str, Any]] = []
    for trajectory in dataset.trajectories:
        cid = trajectory.conversation_id
        workflow = bool(_WORKFLOW.fullmatch(cid))
        for turn in trajectory.turns:
            if turn.reply is None:
                continue
            domain = "workflow" if workflow else "coding"
            has_truth = (
                bool(_truth_intents(turn.reply))
                if workflow
                else bool(bash_actions(turn.reply.get("tool_calls")))
            )
            if has_truth:
                truths[(cid, turn.turn)] = (domain, turn.reply)
            else:
                excluded.append(
                    {
                        "conversation_id": cid,
                        "turn": turn.reply["turn"],
                        "domain": domain,
                        "exclude_reason": "no ground truth",
                    }
                )
    seen: dict[tuple[str, int, int], TextModelOutput | None] = {}
    issued_keys: set[tuple[str, int, int]] = set()
    for item in issued:
        match = _REPEAT.search(item.conversation_id)
        source = item.conversation_id[: match.start()] if match else item.conversation_id
        key = (source, int(match.group(1)) if match else 1, item.turn)
        issued_keys.add(key)
        if item.output is not None or key not in seen:
            seen[key] = item.output
    scored = sorted(k for k in issued_keys if (k[0], k[2]) in truths)
    per_turn: list[dict[str, Any]] = []
    totals: dict[str, list[float]] = {"coding": [], "workflow": []}
    for source, repeat, row_number in scored:
        domain, truth = truths[(source, row_number)]
        output = seen.get((source, repeat, row_number))
        row: dict[str, Any] = {
            "conversation_id": source,
            "repeat": repeat,
            "turn": truth["turn"],
            "domain": domain,
        }
        if output is None:
            row["missing"] = True
        reasoning = _joined(output.reasoning) if output else ""
        content = _joined(output.output) if output else ""
        if domain == "workflow":
            intents = _truth_intents(truth)
            said = model_intent(reasoning, content)
            row["gt_intents"] = sorted(intents)
            row["model_intent"] = said
            score = 1.0 if said in intents else 0.0
        else:
            expected = bash_actions(truth.get("tool_calls"))
            got = bash_actions(merge_tool_call_chunks(output.tool_calls) if output else None)
            row["gt_actions"] = expected
            row["model_actions"] = got
            want, have = Counter(expected), Counter(got)
            score = sum((want & have).values()) / sum((want | have).values())
        row["score"] = round(score, 4)
        per_turn.append(row)
        totals[domain].append(score)
    observed = sum(1 for k in scored if seen.get(k) is not None)
    answered = sum(1 for k in issued_keys if seen.get(k) is not None)
    every = totals["coding"] + totals["workflow"]
    result: dict[str, Any] = {
        "score": round(sum(every) / len(every), 4) if every else None,
        "turns": {
            "issued": len(issued_keys),
            "expected": len(scored),
            "observed": observed,
            "missing": len(scored) - observed,
            "scored": len(every),
            "answered": answered,  # issued turns with an answer, scorable or not
        },
        "domains": {
            domain: {"score": round(sum(values) / len(values), 4), "scored": len(values)}
            for domain, values in totals.items()
            if values
        },
        "per_turn": per_turn,
    }
    if excluded:
        result["excluded_turns"] = excluded
    return result


def inline_entry(
    dataset: AgenticDataset, scores: Mapping[str, Any], *, issued: int, duration_s: float
) -> dict[str, Any]:
    """The ``performance`` entry of ``accuracy_results.json`` from
    :func:`score_inline`'s result (the reference's shape: the score as a
    fraction, ``unit_samples`` the dataset's client turns)."""
    turns = scores["turns"]
    return {
        "dataset_name": "performance",
        "dataset_type": "performance",
        "eval_method": "agentic_inference_inline",
        "score": scores["score"],
        "unit_samples": dataset.client_turns,
        "num_repeats": 1,
        "total_samples": issued,
        "duration_s": round(duration_s, 3),
        "complete": scores["score"] is not None and turns["missing"] == 0,
        "response_counts": {
            "issued": turns["issued"],
            "completed": turns["answered"],
            "failed": turns["issued"] - turns["answered"],
            "empty": 0,
        },
    }
