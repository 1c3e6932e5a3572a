import socket
from typing import Any

from .rx_sched import ReceiveScheduling

KEEP_BYTES: int
READ_SIZE: int
RESAMPLE_NS: int

class ArrivalClock:
    offset_ns: int
    error_ns: int
    sampled_at: int
    steps: int
    last_step_ns: int
    def __init__(self) -> None: ...
    def sample(self) -> None: ...
    def arrival(self, t_realtime: int, t_read: int, floor: int) -> int: ...

class ReceiveThread:
    wake_fd: int
    running: bool
    def __init__(self, priority: int = 0, cpus: tuple[int, ...] = ()) -> None: ...
    def scheduling(self) -> ReceiveScheduling: ...
    def dispatch(self) -> None: ...
    def stop(self) -> None: ...

class SocketReader:
    last_read_ns: int
    last_read_kernel: bool
    last_read_segment: int
    on_received: Any
    threaded: bool
    buffer_bytes: int
    def attach_socket(
        self,
        sock: socket.socket,
        clock: ArrivalClock,
        receiver: ReceiveThread | None = None,
        capture: Any = None,
    ) -> bool: ...
    def detach_socket(self) -> None: ...
    def read_socket(self) -> int: ...
