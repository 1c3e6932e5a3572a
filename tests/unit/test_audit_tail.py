"""The self-audit's tail-trust figures (``engine/audit.py``): first reads
that also held the next token, the receive threads' placement and scheduler
counters, and the verdict on the tail of TTFT."""

from __future__ import annotations

from array import array

import msgspec
import pytest

from mlpe_fast.engine.audit import ClientTotals, audit_records
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.engine.rx_sched import ReceiveScheduling, cpu_list
from mlpe_fast.wire.events import NO_RESPONSE

MS = 1_000_000


def record(t_first: int, t_second: int | None) -> RequestRecord:
    response = msgspec.structs.replace(
        NO_RESPONSE, status=200, t_first=t_first, t_second=t_second, complete=True, done=True
    )
    return RequestRecord(
        sample_index=0, sample_id="x", t_sched=0, t_issue=0, t_end=t_first + MS, response=response
    )


def records(n: int, held: int) -> list[RequestRecord]:
    """``n`` records with two tokens, the first ``held`` read in one read."""
    return [record(20 * MS, 20 * MS if i < held else 22 * MS) for i in range(n)]


def thread(policy: str = "fifo", **figures: object) -> ReceiveScheduling:
    defaults: dict[str, object] = {
        "priority": 10 if policy == "fifo" else 0,
        "cpus": [0, 1],
        "asked_priority": 10,
        "timeslices": 1000,
        "run_delay_ns": 2 * MS,
    }
    return ReceiveScheduling(policy=policy, **{**defaults, **figures})  # type: ignore[arg-type]


def audit(rs: list[RequestRecord], threads: tuple[ReceiveScheduling, ...]) -> dict[str, str]:
    made = audit_records(rs, array("q"), 0, 4, 0, arrival_clock=None, receive_threads=threads)
    return {**made.as_rows(), "verdict": made.tail_verdict}


def test_first_reads_holding_the_next_token_are_counted() -> None:
    made = audit_records(
        [*records(200, 3), record(20 * MS, None)], array("q"), 0, 4, 0, arrival_clock=None
    )
    # The one-token response has no next token to hold.
    assert (made.first_reads, made.first_reads_with_next) == (200, 3)
    row = made.as_rows()["first reads holding the next token"]
    assert row.startswith("3 of 200 (1.5%); TTFT p99 NOT to be trusted"), row


def test_at_most_one_percent_leaves_the_tail_trusted() -> None:
    rows = audit(records(200, 2), (thread("normal"),))
    assert rows["verdict"] == "TTFT tail to be trusted"


def test_a_late_normal_thread_makes_the_p99_untrusted_and_says_what_to_do() -> None:
    rows = audit(records(100, 25), (thread("normal", refused="SCHED_FIFO 10: EPERM"),))
    verdict = rows["verdict"]
    assert verdict.startswith("TTFT p99 NOT to be trusted: 25.0% of first tokens"), verdict
    assert "waited 2.00 µs for a core per wake-up" in verdict
    assert "--receive-priority auto where permitted" in verdict
    assert rows["receive thread"].startswith(
        "normal policy (refused SCHED_FIFO 10: EPERM), CPUs 0-1; waited 2.00 µs"
    ), rows


def test_most_first_reads_held_make_the_median_untrusted_too() -> None:
    rows = audit(records(10, 6), ())
    assert rows["verdict"].startswith("TTFT p50 and p99 NOT to be trusted"), rows
    assert rows["receive thread"] == "none (--receive-stamps read: the loop reads)"


def test_a_prompt_real_time_thread_lays_merged_tokens_at_the_endpoint() -> None:
    prompt = thread("fifo", involuntary_switches=1)
    verdict = audit(records(100, 5), (prompt,))["verdict"]
    assert verdict.startswith("TTFT tail to be trusted: the endpoint sent 5.0%"), verdict
    # Preempted as often as there were such reads: it may have been late.
    preempted = thread("fifo", involuntary_switches=5)
    assert "NOT to be trusted" in audit(records(100, 5), (preempted,))["verdict"]
    # The twin's thread waits for the interpreter too: never proof.
    twin = thread("fifo", interpreter_free=False)
    assert "NOT to be trusted" in audit(records(100, 5), (twin,))["verdict"]


def test_several_threads_are_summed_and_their_placements_listed() -> None:
    a = thread("fifo", timeslices=100, run_delay_ns=100_000, involuntary_switches=2)
    b = thread("fifo", timeslices=300, run_delay_ns=700_000, involuntary_switches=3)
    c = thread("normal", asked_priority=0, cpus=[1], asked_cpus=[1])
    made = audit_records(
        records(10, 0), array("q"), 0, 4, 0, arrival_clock=None, receive_threads=(a, b, c)
    )
    assert made.receive_wakeups == 1400
    assert made.receive_wait_us_per_wakeup == pytest.approx(2800 / 1400)
    assert made.receive_involuntary_switches == 5
    assert made.receive_thread == (
        "2 x SCHED_FIFO 10, CPUs 0-1; 1 x normal policy (--receive-priority off), CPUs 1 pinned"
    )


def test_client_totals_carry_every_thread() -> None:
    a, b = thread("fifo"), thread("normal")
    total = ClientTotals(receive_threads=(a,)).plus(
        ClientTotals(), ClientTotals(receive_threads=(b,))
    )
    assert total.receive_threads == (a, b)
    # ...through the engines' messages too.
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(total), type=ClientTotals) == total


@pytest.mark.parametrize(
    ("cpus", "text"), [((0,), "0"), ((0, 1, 2, 5), "0-2,5"), ((3, 1, 2), "1-3"), ((), "")]
)
def test_cpu_lists_read_as_linux_writes_them(cpus: tuple[int, ...], text: str) -> None:
    assert cpu_list(cpus) == text


def multiplexed(n: int, later: int, exact: int) -> list[RequestRecord]:
    """``n`` HTTP/2 records: the first ``later`` read with bytes past their
    first token's frame, the first ``exact`` of those stamped by segment."""
    return [
        msgspec.structs.replace(
            record(20 * MS, 22 * MS),
            first_read_later_bytes=180 if i < later else 0,
            segment_stamp=1 if i < exact else 0,
        )
        for i in range(n)
    ]


def h2_audit(rs: list[RequestRecord], http2: int = 1) -> dict[str, str]:
    made = audit_records(rs, array("q"), 0, 1, 0, arrival_clock=None, http2_connections=http2)
    return made.as_rows()


def test_first_reads_carrying_later_frames_over_http2() -> None:
    row = h2_audit(multiplexed(200, 30, 0))["first reads carrying later frames"]
    assert row == (
        "30 of 200 first tokens (15.0%); TTFT p99 NOT to be trusted: 15.0% of first tokens were "
        "read with later frames and may carry a later frame's arrival (--receive-stamps packet "
        "stamps each segment)"
    ), row
    row = h2_audit(multiplexed(200, 2, 0))["first reads carrying later frames"]
    assert row == "2 of 200 first tokens (1.0%); TTFT tail to be trusted", row
    most = h2_audit(multiplexed(10, 6, 0))["first reads carrying later frames"]
    assert "TTFT p50 and p99 NOT to be trusted: 60.0%" in most, most


def test_segment_stamped_first_tokens_are_exact_per_segment() -> None:
    row = h2_audit(multiplexed(200, 30, 29))["first reads carrying later frames"]
    assert row == (
        "30 of 200 first tokens (15.0%), 29 of them at their segment's arrival (exact per "
        "segment); TTFT tail to be trusted"
    ), row
    row = h2_audit(multiplexed(200, 30, 20))["first reads carrying later frames"]
    assert "TTFT p99 NOT to be trusted: 5.0% of first tokens" in row, row


def test_no_later_frames_row_over_http1() -> None:
    assert "first reads carrying later frames" not in h2_audit(multiplexed(20, 0, 0), http2=0)
