"""The agent endpoint's listening socket: at most ``max_connections`` connections held open, the
surplus answered with HTTP 429 at once.

Agent code runs in the trainer, so its own end of each connection to the endpoint takes a
descriptor of the same process as ours: 16 agents opening 1000 connections each had exhausted an
open-file limit of 20,000. :class:`CappedListener` therefore holds at most ``cap`` accepted
connections. A connection past that is accepted only to be answered ``429 Too Many Requests``
(``Retry-After: 1``, ``Connection: close``; OpenAI clients retry it) and closed once the client
has read it:
left in the kernel's queue, as before, the surplus of a 1000-request fan-out waited minutes and
timed out on the client's connect timeout. At most :data:`REFUSING_AT_ONCE` refusals are under
way at a time; past that, accepting pauses for a second (asyncio's own pause on EMFILE, which
:class:`AtCapacity` is raised as).
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import threading
import weakref
from typing import Any

REFUSING_AT_ONCE = 256
"""Surplus connections being answered 429 at once (each takes a descriptor until its client
closes it, :data:`DRAIN_S` at most)."""
DRAIN_S = 10.0
"""How long a refused connection is read from after its answer, until the client closes it:
closed with the client's request unread, it is reset, and the client loses the answer (with 1 s,
183 of 1000 refused requests ended in a read error on a busy client)."""


class AtCapacity(OSError):
    """The endpoint holds ``max_connections`` connections and answers :data:`REFUSING_AT_ONCE`
    more already: accepting pauses (asyncio stops accepting for a second on EMFILE)."""

    def __init__(self, cap: int) -> None:
        super().__init__(errno.EMFILE, f"the agent endpoint holds its {cap} connections (max_connections)")


def refusal(cap: int) -> bytes:
    """The HTTP answer to a connection past the cap."""
    body = json.dumps({"error": {
        "message": f"the agent endpoint holds its {cap} connections (environment.max_connections); retry after a "
                   f"second, or open fewer connections at once", "type": "rate_limit_error", "param": None,
        "code": None}}).encode()
    return (b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class CappedListener(socket.socket):
    """The endpoint's listening socket (IPv4, stream). Counts the accepted connections open, by
    their sockets' ``close`` (asyncio's transports close them), with a finalizer for one dropped
    unclosed; past ``cap``, :meth:`accept` answers each waiting connection with :func:`refusal`
    on the running event loop and tells asyncio that none waits."""

    def __init__(self, cap: int) -> None:
        super().__init__(socket.AF_INET, socket.SOCK_STREAM)
        self.cap = cap
        self.open = 0
        self.refusing = 0
        self.refused = 0
        """Connections answered 429 for the cap so far."""
        self._answer = refusal(cap)
        self._lock = threading.Lock()

    def accept(self) -> tuple[socket.socket, Any]:
        with self._lock:
            taken = self.open < self.cap
            if taken:
                self.open += 1
        if not taken:
            self._refuse_waiting()  # raises BlockingIOError once none waits: asyncio stops quietly
        try:
            fd, address = self._accept()  # type: ignore[attr-defined]
        except BaseException:
            self._release()
            raise
        conn = _Counted(self.family, self.type, self.proto, fileno=fd)
        conn.release = weakref.finalize(conn, self._release)
        # asyncio sets this only on sockets made with proto IPPROTO_TCP: without it, an answer's
        # second write waited for the client's delayed ACK, 40 ms a request
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, address

    def _refuse_waiting(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.refusing >= REFUSING_AT_ONCE:
                raise AtCapacity(self.cap)
            fd, _ = self._accept()  # type: ignore[attr-defined]
            conn = socket.socket(self.family, self.type, self.proto, fileno=fd)
            conn.setblocking(False)
            self.refusing += 1
            self.refused += 1
            loop.create_task(self._refuse(conn))

    async def _refuse(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_sendall(conn, self._answer), DRAIN_S)
            conn.shutdown(socket.SHUT_WR)
            async with asyncio.timeout(DRAIN_S):
                while await loop.sock_recv(conn, 65536):
                    pass
        except (OSError, TimeoutError):
            pass
        finally:
            conn.close()
            self.refusing -= 1

    def _release(self) -> None:
        with self._lock:
            self.open -= 1


class _Counted(socket.socket):
    """An accepted connection; closing it (or its collection) frees its place under the cap."""

    release: Any = None

    def close(self) -> None:
        if self.release is not None:
            self.release()  # a finalizer runs once
        super().close()


def quiet_at_cap(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The endpoint loop's exception handler: a pause at the cap is not an error to log."""
    if not isinstance(context.get("exception"), AtCapacity):
        loop.default_exception_handler(context)


def lift_open_file_limit() -> int:
    """Each connection to the endpoint costs the trainer two descriptors (the agent's end and
    ours): lift the soft limit to the hard one, as vLLM and Ray do (1024 is a common soft limit).
    Returns the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # as it was
    return soft if soft != resource.RLIM_INFINITY else 1 << 16
