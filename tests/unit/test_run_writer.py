"""The run folder's writer (``point/writer.py``) on a disk that refuses a
write: kept as the point's one-line error, never raised into the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mlpe_fast.config import RunConfig
from mlpe_fast.point.writer import SERVER_METRICS, RunWriter


class _Refusing:
    """A file whose every write and flush the disk refuses."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.writes = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        self.file.close()


def test_a_refused_scrape_line_is_kept_as_the_folder_s_error_and_the_point_told(
    tmp_path: Path,
) -> None:
    # The scraper writes its lines on the loop, in its own task: a refusal
    # raised there ended the task and came back as a traceback at its stop.
    writer = RunWriter(RunConfig(model="m", report_dir=str(tmp_path / "run")), ["http://x"])
    writer.open()
    assert writer.server_metrics_sink() is not None  # the file opened
    refusing = writer._server_metrics = _Refusing(writer._server_metrics)  # type: ignore[assignment]
    sink = writer.server_metrics_sink()
    assert sink is not None
    told: list[str] = []

    async def load() -> None:
        async with writer.session(on_refused=told.append):
            sink(b'{"scrape": 1}\n')  # refused: no raise
            sink(b'{"scrape": 2}\n')  # dropped: the file is cut there
            await asyncio.sleep(1.2)  # the second's flush tells the point

    asyncio.run(load())
    writer.close()
    expected = f"{SERVER_METRICS}: No space left on device"
    assert writer.write_error == expected
    assert told == [expected]
    assert refusing.writes == 1
