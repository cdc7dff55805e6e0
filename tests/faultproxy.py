"""A loopback TCP proxy that injects network faults between Kafka clients and a broker.

The broker advertises the proxy's port (``CDC_KAFKA_ADVERTISED_PORT``), so every connection a
client makes — bootstrap and the ones metadata points it to — goes through here. Faults:

* :meth:`FaultProxy.cut`: every open connection is closed at once (both directions), as when a
  network path or a broker's socket dies mid-request; new connections are accepted again.
* :meth:`FaultProxy.stall`: for a while no byte moves in either direction, connections stay
  open (a frozen path: the clients' own timeouts have to notice).

Bounded and local: it listens on 127.0.0.1 only, forwards to one loopback port, and its threads
end when it is closed.
"""

from __future__ import annotations

import socket
import threading
import time


class FaultProxy:
    def __init__(self, target_port: int, listen_port: int = 0) -> None:
        self.target = ("127.0.0.1", target_port)
        self._server = socket.create_server(("127.0.0.1", listen_port))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._resume = threading.Event()
        self._resume.set()
        self._closed = False
        self.cuts = 0
        self.stalls = 0
        threading.Thread(target=self._accept, daemon=True).start()

    # -- faults ---------------------------------------------------------------------------------

    def cut(self) -> int:
        """Close every open connection now; returns how many were cut."""
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self.cuts += 1
        return len(conns) // 2

    def stall(self, seconds: float) -> None:
        """Move no byte for ``seconds`` (returns at once; the stall ends by itself)."""
        self.stalls += 1
        self._resume.clear()
        threading.Timer(seconds, self._resume.set).start()

    def close(self) -> None:
        self._closed = True
        self._resume.set()
        self._server.close()
        self.cut()

    # -- plumbing -------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while not self._resume.wait(0.1):
                    if self._closed:
                        return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                try:
                    conn.close()
                except OSError:
                    pass
            with self._lock:
                self._conns.discard(source)
                self._conns.discard(sink)


def flapping(
    proxy: FaultProxy, every: float, until: threading.Event, first: float | None = None
) -> threading.Thread:
    """A thread that cuts every connection ``first`` seconds after it starts (default ``every``),
    then each ``every`` seconds, until ``until`` is set."""

    def run() -> None:
        wait = every if first is None else first
        while not until.wait(wait):
            proxy.cut()
            wait = every

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")
