"""The vLLM plugin under hostile destinations: it answers 400 before generating, writes
nothing outside its root, and never fails with a 500 or a dropped connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm", reason="needs vLLM (scripts/setup.sh dev installs a light copy)")

from vllm.outputs import CompletionOutput, SamplingMask

from objstore_payload import Store, StoreConfig
from objstore_payload.adapters.vllm import ServerSettings
from objstore_payload.testing.vllm_server import PluginServer, StandInEngine
from tests.security.test_fuzz_hostile_input import hostile_uris

PROMPT = [1, 2, 3, 4]


def _output(_prompt: list[int], _params: Any) -> CompletionOutput:
    return CompletionOutput(
        index=0,
        text="",
        token_ids=[5, 6, 7],
        cumulative_logprob=None,
        logprobs=None,
        routed_experts=np.zeros((6, 2, 2), np.int32),
        sampling_mask=SamplingMask(token_ids=[[5], [6, 9], [7]]),
        finish_reason="length",
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PluginServer, Store, Path]]:
    base = tmp_path_factory.mktemp("plugin-fuzz")
    (base / "payloads-evil").mkdir()
    with (
        Store(StoreConfig(root=(base / "payloads").as_uri())) as store,
        PluginServer(StandInEngine(_output), ServerSettings(store=store.config)) as server,
    ):
        yield server, store, base


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=40),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(), inner)),
    max_leaves=6,
)


@st.composite
def destinations(draw: st.DrawFn, root_url: str) -> Any:
    return draw(st.one_of(hostile_uris(root_url), json_values))


def test_hostile_destinations_answer_400_and_write_nothing_outside(
    served: tuple[PluginServer, Store, Path],
) -> None:
    server, store, base = served

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(destinations(store.root.url), st.sampled_from(["payload_dir", "payload_destination"]))
    def check(destination: Any, key: str) -> None:
        calls = len(server.engine.params)
        body = {
            "token_ids": PROMPT,
            "sampling_params": {"max_tokens": 3, "extra_args": {key: destination}},
        }
        response = server.generate(body)
        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert len(server.engine.params) == calls  # refused before generating
            assert response.json()["error"]["message"]
        # Whatever was accepted was written under the root, and only there.
        assert list((base / "payloads-evil").iterdir()) == []
        for uri in store.list():
            assert uri.startswith(store.root.url + "/")

    check()
