"""The ``mlpe-fast`` command.

    mlpe-fast run [--endpoints URL --model NAME --dataset PATH ...]
    mlpe-fast serve [--port 0 --ttft-ms 20 --itl-ms 2 ...]
    mlpe-fast analyze RUN_FOLDER [--tokenizer DIR]
    mlpe-fast score RUN_FOLDER [--dataset acc:PATH,...]
    mlpe-fast compare RUN_OR_CURVE RUN_OR_CURVE [...] [--html PATH] [--png PATH]
    mlpe-fast init | bundle REPORT_DIR --system FILE --out DIR | check BUNDLE

Exit status: 0 done; 2 a mistake in the command or its files (one line on
stderr); 3 mlpe-fast could not get ready (the simulated endpoint did not
start, say); 4 the run finished but no request succeeded; 5 an engine
process was lost; 6 the run finished, but some answers are not what was
asked for (``EmptyAnswer`` failures, answers without a finish reason or
longer than asked: ``metrics/answers.py``); 130 interrupted; 141 the output
pipe closed (``| head``: what the run had written stays)
(the run folder is still written, its summary says ``interrupted``).
Endpoint faults during a run are counted and explained in the results, not
raised.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import MlpeError, SetupError, UsageError
from .heap import fix_malloc_thresholds
from .run_status import EXIT_FOLDER_REFUSED, EXIT_INTERRUPTED

if TYPE_CHECKING:
    from .config import RunConfig
    from .sweep.rates import RatePlan
    from .sweep.runner import SweepPlan

__all__ = ("main",)

EXIT_USAGE = 2
EXIT_SETUP = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command its pipe ended

#: The errors only a write gets: the disk full, a file-size limit, a quota, a
#: read-only file system.
_DISK_REFUSED = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and status 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from . import NATIVE
    from .accuracy.rescore import add_arguments as add_score_arguments
    from .analyze import add_arguments as add_analyze_arguments
    from .config import add_run_arguments
    from .sim.server import add_arguments as add_serve_arguments

    core = "native core" if NATIVE else "pure-Python core"
    parser = _Parser(prog="mlpe-fast", description="Load generator for MLPerf Endpoints.")
    parser.add_argument("--version", action="version", version=f"mlpe-fast {__version__} ({core})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = commands.add_parser(
        "run",
        help="measure one point, or a curve with --concurrency N,N,... "
        "(with no --endpoints: a demo against the simulated endpoint)",
        description="Measure an OpenAI-compatible endpoint at one load point, or a curve of "
        "points (--concurrency N,N,... or --max-concurrency C_MAX).",
    )
    add_run_arguments(run)
    run.add_argument(
        "--no-progress", action="store_true", help="do not draw the progress line on stderr"
    )
    serve = commands.add_parser(
        "serve",
        help="serve the simulated OpenAI-compatible endpoint",
        description="Serve the simulated OpenAI-compatible endpoint on loopback.",
    )
    add_serve_arguments(serve)
    analyze = commands.add_parser(
        "analyze",
        help="recompute a run folder's result_summary.json from its events.jsonl",
        description="Recompute result_summary.json from an events.jsonl in the reference "
        "client's format (mlpe-fast's or the reference client's).",
    )
    add_analyze_arguments(analyze)
    score = commands.add_parser(
        "score",
        help="score a finished run's accuracy datasets again from its events.jsonl",
        description="Score the accuracy datasets of a run folder from its recorded outputs.",
    )
    add_score_arguments(score)
    compare = commands.add_parser(
        "compare",
        help="print two or more run or curve folders side by side, with their differences, "
        "and draw the curves on one page",
        description="Print the figures of two or more run folders or curve folders (all of "
        "one kind; the first is the baseline) side by side with their differences, absolute "
        "and in %, and write one HTML page with the curves overlaid.",
    )
    from .report.compare import add_arguments as add_compare_arguments

    add_compare_arguments(compare)
    from .submission import commands as submission

    for name, adder, text in (
        ("init", submission.add_init_arguments, "write a system description template"),
        ("bundle", submission.add_bundle_arguments, "build a submission bundle from a curve"),
        ("check", submission.add_check_arguments, "run the official checker on a bundle"),
    ):
        adder(commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + "."))
    # Listed for --help only: main() hands "endpoints ARGS..." over before parsing.
    commands.add_parser(
        "endpoints",
        help="run the reference client (inference-endpoint) with mlpe-fast's engine as its "
        "HTTP client; every further argument is the reference's",
        add_help=False,
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    from .config import given_fields, resolve
    from .demo import DEMO_SERVER_FLAGS, demo_config, demo_defaults, simulated_endpoint
    from .engine.loop import loop_runner_for_platform
    from .point import PointResult, run_point
    from .run_status import RunStatus

    config = resolve(args)
    if not config.endpoints:  # the demo's prompts and tokenizer, checked as a user's are
        config = resolve(args, defaults=demo_defaults())
    given = given_fields(args)
    status = RunStatus()

    async def point(config: RunConfig, endpoints: tuple[str, ...]) -> PointResult:
        result = await run_point(config, endpoints, progress=not args.no_progress)
        print(result.table, end="")
        if config.report_dir:
            print(f"run folder: {config.report_dir}")
        status.took(config, result)
        return result

    async def measure(endpoints: tuple[str, ...]) -> int:
        from .point.server_metrics import notices_once

        with notices_once():  # a curve's points say a missing /metrics page once
            return await measure_all(endpoints)

    async def measure_all(endpoints: tuple[str, ...]) -> int:
        if config_for_run.rate_sweep:
            from .sweep.rates import RatePlan, run_rate_sweep

            assert isinstance(sweep_plan, RatePlan)
            _, interrupted = await run_rate_sweep(config_for_run, endpoints, point, plan=sweep_plan)
            return status.exit_status(interrupted=interrupted, curve=True)
        if config_for_run.sweep or config_for_run.max_concurrency is not None:
            from .sweep.runner import SweepPlan, run_sweep

            assert sweep_plan is None or isinstance(sweep_plan, SweepPlan)
            _, interrupted = await run_sweep(config_for_run, endpoints, point, plan=sweep_plan)
            return status.exit_status(interrupted=interrupted, curve=True)
        result = await point(config_for_run, endpoints)
        return status.exit_status(interrupted=result.state == "interrupted", curve=False)

    if not config.endpoints and (config.insecure or config.ca_bundle):
        flag = "--insecure" if config.insecure else "--ca-bundle"
        raise UsageError(
            f"{flag} is for an https:// endpoint; without --endpoints the demo measures its "
            "simulated endpoint over plain http://"
        )
    loop_runner = loop_runner_for_platform()
    config_for_run = config if config.endpoints else demo_config(config, given)
    # The plan before the first request; refusals before any endpoint starts.
    sweep_plan = _announce(config_for_run)
    if config.dry_run:
        from .point.setup import check_counting

        check_counting(config_for_run)
        demo = "" if config.endpoints else " (no --endpoints: the demo's simulated endpoint)"
        print(f"mlpe-fast: dry run: no request sent{demo}, no file written")
        return 0
    if config.endpoints:
        return loop_runner(measure(config.endpoints))
    # --http2 without an endpoint: the demo endpoint serves h2c too.
    flags = (*DEMO_SERVER_FLAGS, "--http2") if config.http2 else DEMO_SERVER_FLAGS
    with simulated_endpoint(flags) as endpoint:
        print(f"mlpe-fast: no --endpoints given: measuring the simulated endpoint at {endpoint}")
        return loop_runner(measure((endpoint,)))


def _announce(config: RunConfig) -> SweepPlan | RatePlan | None:
    """Prints what the run will measure (all that ``--dry-run`` does): a
    curve's plan and warnings, or a point's line; the curve's plan comes
    back for :func:`~.sweep.runner.run_sweep` (a request-rate curve's for
    :func:`~.sweep.rates.run_rate_sweep`).  No endpoints: the demo's.

    Raises:
        UsageError: a bad dataset, or a curve that cannot be measured as
            asked (:func:`~.sweep.runner.prepare_sweep`).
    """
    if config.rate_sweep:
        from .sweep.rates import announce_rate_sweep

        return announce_rate_sweep(config, config.endpoints or None)
    if config.sweep or config.max_concurrency is not None:
        from .sweep.runner import announce_sweep

        return announce_sweep(config, config.endpoints or None)
    from .sweep.preview import announce_point

    announce_point(config)
    return None


def _serve(args: argparse.Namespace) -> int:
    from .sim.server import BindError, config_from_args, serve_forever

    try:
        config = config_from_args(args)
    except ValueError as error:
        raise UsageError(f"mlpe-fast serve: {error}") from None
    try:
        serve_forever(config, exit_with_parent=args.exit_with_parent)
    except BindError as error:  # the port in use, say: the user's to change
        raise UsageError(f"mlpe-fast serve: {error}") from None
    return 0


#: numpy's OpenBLAS starts a thread per core that spins after each call it
#: splits; the figures' arrays are too small to gain from them, and on a
#: small client host the spinning takes a core from the load and the
#: endpoint: 4.8 % of a 14,000-request run's cycles, which took 0.91x the
#: cycles without it (perf, docs/performance.md).
#: Set before numpy is first imported; a value the user set is kept.
BLAS_THREADS = "1"


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", BLAS_THREADS)
    fix_malloc_thresholds()  # a long run's heap flat in its length (heap.py)
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["endpoints"]:
        from .compat.endpoints_launcher import main as endpoints_main

        return endpoints_main(arguments[1:])
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "run":
            status = _run(args)
            sys.stdout.flush()  # a closed pipe is said here, not by Python at exit
            return status
        if args.command == "serve":
            return _serve(args)
        if args.command == "analyze":
            from .analyze import main as analyze_main

            return analyze_main(args)
        if args.command == "score":
            from .accuracy.rescore import main as score_main

            return score_main(args)
        if args.command == "compare":
            from .report.compare import main as compare_main

            return compare_main(args)
        if args.command in ("init", "bundle", "check"):
            from .submission import commands as submission

            command: Callable[[argparse.Namespace], int] = getattr(submission, args.command)
            return command(args)
        parser.print_help()
        return 0
    except UsageError as error:
        message = str(error)
        print(
            message if message.startswith("mlpe-fast") else f"mlpe-fast: {message}", file=sys.stderr
        )
        return EXIT_USAGE
    except SetupError as error:
        print(f"mlpe-fast: {error}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print("mlpe-fast: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of the output went away (``| head``): no traceback, and
        # no second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("mlpe-fast: the output pipe closed; stopped there", file=sys.stderr)
        return EXIT_BROKEN_PIPE
    except MlpeError as error:
        print(f"mlpe-fast: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        if error.errno not in _DISK_REFUSED or error.filename is None:
            raise  # not a write the disk refused: a bug, with its traceback
        # A result file past the run folder's own (a curve's pareto.json, its
        # reports) on a disk that filled: one line, as the folder's (run_status.py).
        print(f"mlpe-fast: cannot write {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_FOLDER_REFUSED


if __name__ == "__main__":
    sys.exit(main())
