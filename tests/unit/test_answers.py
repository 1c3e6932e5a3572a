"""Completed answers that are not what was asked for (metrics/answers.py),
on hand-built records: no finish reason, longer than asked, and the
EmptyAnswer failures beside them."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.metrics.answers import check_answers
from mlpe_fast.metrics.tokens import TokenCounts
from mlpe_fast.wire.events import NO_RESPONSE


def answer(
    content: str = "text",
    finish: str | None = "stop",
    usage: dict[str, Any] | None = None,
    error: str | None = None,
) -> RequestRecord:
    summary = msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        content=content,
        finish_reason=finish,
        usage=usage,
        complete=True,
        done=True,
    )
    return RequestRecord(
        sample_index=0,
        sample_id="x",
        t_sched=0,
        t_issue=0,
        t_end=1,
        response=summary,
        error_class=error,
    )


def counts(osl: list[int]) -> TokenCounts:
    n = len(osl)
    return TokenCounts(
        osl=np.array(osl, dtype=np.int64),
        tpot_tokens=np.zeros(n, np.int64),
        isl=np.zeros(n, np.int64),
        complete=True,
        pending=0,
        seconds=0.0,
    )


def test_whole_answers_are_not_suspect() -> None:
    records = [answer(), answer(finish="length")]
    checks = check_answers(records, counts([10, 16]), 16)
    assert not checks.suspect
    assert checks.warnings() == []
    assert checks.longest == 16


def test_an_answer_without_a_finish_reason_is_unfinished() -> None:
    checks = check_answers([answer(finish=None), answer()], counts([3, 4]), 16)
    assert checks.unfinished == 1 and checks.suspect
    (line,) = checks.warnings()
    assert line.startswith("1 answer ended without a finish reason")


def test_empty_answers_are_counted_beside_and_not_measured() -> None:
    records = [answer(content="", finish=None, error="EmptyAnswer"), answer(error="IdleTimeout")]
    checks = check_answers(records, counts([-1, -1]), 16)
    assert (checks.empty, checks.unfinished, checks.longer_than_asked) == (1, 0, 0)
    assert "failed as EmptyAnswer" in checks.warnings()[0]


def test_the_endpoints_usage_decides_the_length_where_given() -> None:
    # The server says 17 > 16: longer, whatever our tokenizer says; the
    # client's 18 without usage is within the tolerance of max(2, 16 // 10).
    records = [answer(usage={"completion_tokens": 17}), answer(), answer()]
    checks = check_answers(records, counts([12, 18, 19]), 16)
    assert checks.longer_than_asked == 2
    assert checks.longest == 19
    (line,) = checks.warnings()
    assert "longer than the 16 tokens asked (longest 19)" in line
    assert "--send-max-tokens" in line


def test_the_remedy_changes_once_max_tokens_is_sent() -> None:
    records = [answer(usage={"completion_tokens": 2013})]
    line = check_answers(records, counts([2000]), 64, send_max_tokens=True).warnings()[0]
    assert "ignores both max_completion_tokens and max_tokens" in line


def test_no_length_check_without_one_limit_or_counts() -> None:
    records = [answer(usage={"completion_tokens": 900}), answer()]
    assert check_answers(records, counts([900, 900]), None).longer_than_asked == 0
    checks = check_answers(records, None, 16)  # no tokenizer: the endpoint's count only
    assert checks.longer_than_asked == 1
    assert checks.as_dict()["longest"] == 900
