"""Byte-counting TCP relays between the appliers and kube-apiserver: one listening port per
applier, TLS passed through untouched (the apiserver's certificate names 127.0.0.1, so a relay on
127.0.0.1 verifies), bytes counted each way. What an applier costs the apiserver in bytes is
then what crossed its relay: the initial list, the watch events of its node, its requests.
Stdlib only; runs its own event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass


@dataclass
class Count:
    connections: int = 0
    to_client: int = 0  # bytes from the apiserver
    to_server: int = 0


class Relays:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.counts: dict[int, Count] = {}
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    count: Count, to_client: bool) -> None:
        try:
            while data := await reader.read(65536):
                if to_client:
                    count.to_client += len(data)
                else:
                    count.to_server += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _serve(self, count: Count) -> int:
        async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
            try:
                ur, uw = await asyncio.open_connection(*self.upstream)
            except OSError:
                cw.close()
                return
            count.connections += 1
            await asyncio.gather(self._pipe(cr, uw, count, False),
                                 self._pipe(ur, cw, count, True))

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    def add(self) -> int:
        """A new relay on a free port; returns the port (its Count is self.counts[port])."""
        count = Count()
        port = asyncio.run_coroutine_threadsafe(self._serve(count), self.loop).result(10)
        self.counts[port] = count
        return port

    def close(self) -> None:
        async def shut() -> None:
            for s in self._servers:
                s.close()
        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
