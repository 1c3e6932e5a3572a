"""``--receive-priority`` and ``--receive-cpu`` end to end: ``mlpe-fast
run`` against the simulated endpoint (its own process), the self-audit's
rows, ``result_summary.json`` and ``config.yaml``, every value and the
mistakes (one line, exit 2).

What the receive thread got is checked against what this process may do:
SCHED_FIFO where a thread of it may take it (root here, unless the
container refuses), the normal policy with the refusal named where not.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from tests.integration.test_kernel_stamps import FLAGS, audit_rows, run_cli
from tests.unit.test_receive_placement import fifo_permitted

pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.skipif(sys.platform != "linux", reason="the receive thread is Linux only"),
]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FLAGS) as url:
        yield url


def run(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[dict[str, str], dict[str, Any], str]:
    """The audit's rows, the summary's self_audit and config.yaml of a run."""
    folder = tmp_path / "run"
    assert main(run_cli(url, *flags, "--report-dir", str(folder))) == 0
    rows = audit_rows(capsys.readouterr().out)
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    return rows, summary["mlpe_fast"]["self_audit"], (folder / "config.yaml").read_text()


def test_auto_asks_for_fifo_10_and_says_what_it_got(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, audit, config = run(endpoint, tmp_path, capsys)
    [got] = audit["receive_threads"]
    assert got["asked_priority"] == 10 and got["asked_cpus"] == []
    if fifo_permitted():
        assert (got["policy"], got["priority"], got["refused"]) == ("fifo", 10, "")
        assert rows["receive thread"].startswith("SCHED_FIFO 10, CPUs "), rows
    else:
        assert got["refused"] == "SCHED_FIFO 10: EPERM"
        assert rows["receive thread"].startswith("normal policy (refused SCHED_FIFO 10: EPERM)")
    assert got["cpus"] == sorted(os.sched_getaffinity(0))
    assert "for a core per wake-up" in rows["receive thread"]
    assert audit["receive_wakeups"] > 0
    # The tail-trust row: the simulated endpoint sends every token by itself
    # (1 ms apart), and each request has 8.
    assert audit["first_reads"] == audit["requests"] > 0
    assert rows["first reads holding the next token"].startswith(
        f"{audit['first_reads_with_next']:,} of {audit['first_reads']:,} "
    )
    assert audit["tail_verdict"] in rows["first reads holding the next token"]
    assert "receive_priority" not in config and "receive_cpu" not in config  # the defaults


def test_off_keeps_the_normal_policy_and_runs_again_from_config_yaml(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, audit, config = run(endpoint, tmp_path, capsys, "--receive-priority", "off")
    [got] = audit["receive_threads"]
    assert (got["policy"], got["asked_priority"], got["refused"]) == ("normal", 0, "")
    assert rows["receive thread"].startswith("normal policy (--receive-priority off), CPUs ")
    assert "\n  receive_priority: 'off'\n" in config
    again = tmp_path / "again"
    code = main(
        ["run", "--no-progress", "-c", str(tmp_path / "run" / "config.yaml"), "--report-dir",
         str(again)]
    )  # fmt: skip
    assert code == 0
    rows = audit_rows(capsys.readouterr().out)
    assert rows["receive thread"].startswith("normal policy (--receive-priority off)"), rows


def test_a_priority_is_asked_for_as_given(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, audit, config = run(endpoint, tmp_path, capsys, "--receive-priority", "20")
    [got] = audit["receive_threads"]
    assert got["asked_priority"] == 20
    if fifo_permitted():
        assert (got["policy"], got["priority"]) == ("fifo", 20)
        assert rows["receive thread"].startswith("SCHED_FIFO 20, "), rows
    else:
        assert got["refused"] == "SCHED_FIFO 20: EPERM"
    assert "\n  receive_priority: 20\n" in config


def test_a_pin_is_applied_and_written(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = max(os.sched_getaffinity(0))
    rows, audit, config = run(endpoint, tmp_path, capsys, "--receive-cpu", str(cpu))
    [got] = audit["receive_threads"]
    assert (got["cpus"], got["asked_cpus"]) == ([cpu], [cpu])
    assert f"CPUs {cpu} pinned;" in rows["receive thread"], rows
    assert f"\n  receive_cpu:\n  - {cpu}\n" in config


def test_the_yaml_keys_give_both(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    yaml_file = tmp_path / "run.yaml"
    # A bare off is YAML's false: it still means off.
    yaml_file.write_text(
        f"mlpe_fast:\n  receive_priority: off\n  receive_cpu: [{', '.join(map(str, cpus))}]\n"
    )
    rows, audit, _ = run(endpoint, tmp_path, capsys, "-c", str(yaml_file))
    [got] = audit["receive_threads"]
    assert (got["asked_priority"], got["asked_cpus"]) == (0, cpus)
    assert rows["receive thread"].startswith("normal policy (--receive-priority off)"), rows


def test_engines_pass_both_on(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = min(os.sched_getaffinity(0))
    flags = ("--engines", "2", "--min-streams-per-engine", "1")
    rows, audit, _ = run(
        endpoint, tmp_path, capsys, *flags, "--receive-priority", "15", "--receive-cpu", str(cpu)
    )
    assert audit["engines"] == 2
    threads = audit["receive_threads"]
    assert len(threads) == 2, threads  # one per engine; the driver reads nothing
    assert all(
        (t["asked_priority"], t["asked_cpus"], t["cpus"]) == (15, [cpu], [cpu]) for t in threads
    ), threads
    assert rows["receive thread"].startswith("2 x "), rows


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--receive-priority", "0"), "expected auto, off or a priority from 1 to 99, got '0'"),
        (("--receive-priority", "100"), "got '100'"),
        (("--receive-priority", "high"), "got 'high'"),
        (("--receive-cpu", "4096"), "CPU 4096 is not one this process may run on"),
        (("--receive-cpu", "-1"), "expected an integer >= 0, got '-1'"),
        (("--receive-cpu", "0,x"), "expected an integer >= 0, got 'x'"),
    ],
)
def test_mistakes_end_in_one_line_and_status_2(
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, str],
    said: str,
) -> None:
    folder = tmp_path / "r"
    assert main(run_cli(endpoint, *flags, "--report-dir", str(folder))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert flags[0] in err and said in err, err
    assert not folder.exists()
