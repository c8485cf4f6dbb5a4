"""The vLLM endpoint plugin served on 127.0.0.1 with a stand-in engine (needs vLLM light).

No vLLM engine runs without an accelerator, so `StandInEngine` yields real
`vllm.outputs.RequestOutput` objects built from arrays a test or the demo supplies;
everything else is vLLM's own (its plugin loader, `GenerateRequest`, `SamplingParams`),
plus uvicorn. Used by the plugin tests and by ``objstore-payload demo --through-plugin``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from argparse import Namespace
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Self

__all__ = ["PluginServer", "StandInEngine"]

OutputFactory = Callable[[list[int], Any], Any]
"""``(prompt_token_ids, sampling_params) -> CompletionOutput`` for one request."""


class StandInEngine:
    """An engine client whose ``generate`` yields one finished `RequestOutput`."""

    def __init__(self, make_output: OutputFactory) -> None:
        self.make_output = make_output
        self.params: list[Any] = []

    async def generate(
        self, prompt: dict[str, Any], sampling_params: Any, request_id: str, **_: Any
    ) -> AsyncIterator[Any]:
        from vllm.outputs import RequestOutput

        self.params.append(sampling_params)
        token_ids = list(prompt["prompt_token_ids"])
        yield RequestOutput(
            request_id=request_id,
            prompt=None,
            prompt_token_ids=token_ids,
            prompt_logprobs=None,
            outputs=[self.make_output(token_ids, sampling_params)],
            finished=True,
        )


class PluginServer:
    """The plugin mounted through vLLM's own loader on a FastAPI app, served by uvicorn
    on 127.0.0.1 (free port); stop it with `stop` or ``with``."""

    def __init__(self, engine: StandInEngine, settings: Any) -> None:
        import uvicorn
        from fastapi import FastAPI
        from vllm.plugins.endpoint_plugins.interface import (
            attach_endpoint_plugins,
            init_endpoint_plugins_state,
        )

        from objstore_payload.adapters.vllm import PayloadEndpointPlugin

        previous = os.environ.get("VLLM_PLUGINS")
        os.environ["VLLM_PLUGINS"] = "objstore_payload"
        try:
            self.app = FastAPI()
            attach_endpoint_plugins(self.app, ("generate",))
        finally:
            if previous is None:
                os.environ.pop("VLLM_PLUGINS", None)
            else:
                os.environ["VLLM_PLUGINS"] = previous
        plugins = [
            p for p in self.app.state.endpoint_plugins if isinstance(p, PayloadEndpointPlugin)
        ]
        if len(plugins) != 1:
            raise RuntimeError("vLLM's loader did not load the objstore_payload plugin")
        plugins[0]._settings = settings
        asyncio.run(init_endpoint_plugins_state(engine, self.app.state, Namespace()))
        self.engine = engine
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the plugin server did not start")
            time.sleep(0.01)

    def generate(self, body: dict[str, Any]) -> Any:
        """POST ``body`` to ``/inference/v1/generate``; the httpx response."""
        import httpx

        return httpx.post(f"{self.url}/inference/v1/generate", json=body, timeout=60)

    def stop(self) -> None:
        """Stop the server and its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
