"""An ASGI app behind uvicorn on a real socket, in a thread of the test process: real HTTP without a process."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn


class ThreadedServer:
    """`app` on 127.0.0.1:`port` (a free one if 0); `start()` again after `stop()` serves on the same port.

    Example:
        >>> with ThreadedServer(app) as url:  # doctest: +SKIP
        ...     httpx.get(f"{url}/health/live")
    """

    def __init__(self, app: Any, port: int = 0) -> None:
        self.app = app
        self.port = port or free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen()  # connections queue in the backlog until uvicorn accepts them: no need to wait
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = self._thread = None

    def __enter__(self) -> str:
        self.start()
        return self.url

    def __exit__(self, *_: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
