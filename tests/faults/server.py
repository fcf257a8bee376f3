"""The service as `tailor serve` runs it, with one fail point, for the crash tests:
``python -m tests.faults.server PORT`` with the usual TAILOR_ settings.

A request carrying ``X-Fault: die-before-response`` SIGKILLs the process the moment its
response starts: after the route's transaction committed, before the client gets a byte."""

from __future__ import annotations

import os
import signal
import sys

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.app import create_app
from service.config import Settings

FAULT = (b"x-fault", b"die-before-response")


class DieBeforeResponse:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or FAULT not in scope["headers"]:
            await self.app(scope, receive, send)
            return

        async def die_at_start(message: Message) -> None:
            if message["type"] == "http.response.start":
                os.kill(os.getpid(), signal.SIGKILL)
            await send(message)

        await self.app(scope, receive, die_at_start)


def main() -> None:
    app = DieBeforeResponse(create_app(Settings()))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")


if __name__ == "__main__":
    main()
