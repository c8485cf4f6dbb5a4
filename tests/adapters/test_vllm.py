"""The vLLM endpoint plugin with real vLLM classes, over real HTTP.

No engine can run here (no accelerator), so a stand-in engine client yields real
`RequestOutput` objects; everything else is vLLM's own: `SamplingParams`, the
`GenerateRequest` protocol, the endpoint-plugin loader, and a uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import gc
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM light is not installed (scripts/setup.sh dev installs it)"
)

from vllm.logprobs import FlatLogprobs, Logprob  # noqa: E402
from vllm.outputs import CompletionOutput, RequestOutput, SamplingMask  # noqa: E402
from vllm.plugins import load_endpoint_plugins  # noqa: E402

from objstore_payload import (  # noqa: E402
    PayloadReader,
    PayloadWriter,
    Store,
    StoreConfig,
    codec,
)
from objstore_payload.adapters.client import decode_generate_response  # noqa: E402
from objstore_payload.adapters.vllm import (  # noqa: E402
    GC_THRESHOLD,
    PayloadEndpointPlugin,
    ServerSettings,
    UnsupportedVllmError,
    choice_arrays,
    write_request_outputs,
)
from objstore_payload.testing.vllm_server import PluginServer, StandInEngine  # noqa: E402

PROMPT = [101, 102, 103, 104]
COMPLETION = [11, 12, 13]
ROUTING = np.arange(24, dtype=np.int32).reshape(4, 2, 3)  # routed_experts_prompt_start = 2
MASK = [[7], [8, 9, 10], []]


def flat_logprobs(values: list[float]) -> FlatLogprobs:
    flat = FlatLogprobs()
    for token, value in zip(COMPLETION, values, strict=True):
        flat.append({token: Logprob(logprob=value, rank=1)})
    return flat


def completion(**overrides: Any) -> CompletionOutput:
    values: dict[str, Any] = {
        "index": 0,
        "text": "",
        "token_ids": COMPLETION,
        "cumulative_logprob": None,
        "logprobs": flat_logprobs([-0.5, -1.0, -20000.0]),
        "routed_experts": ROUTING,
        "sampling_mask": SamplingMask(token_ids=MASK),
        "finish_reason": "length",
    }
    values.update(overrides)
    return CompletionOutput(**values)


def stand_in_engine() -> StandInEngine:
    return StandInEngine(lambda _prompt, _params: completion())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(StoreConfig(root=(tmp_path / "payloads").as_uri())) as s:
        yield s


@pytest.fixture
def server(store: Store) -> Iterator[PluginServer]:
    with PluginServer(stand_in_engine(), ServerSettings(store=store.config)) as running:
        yield running


def request(**extra_args: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"max_tokens": 3, "logprobs": 1, "routed_experts_prompt_start": 2}
    if extra_args:
        params["extra_args"] = extra_args
    return {"token_ids": PROMPT, "sampling_params": params}


def test_the_plugin_loads_through_vllms_loader_only_when_allowlisted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert load_endpoint_plugins(("generate",)) == []
    monkeypatch.setenv("VLLM_PLUGINS", "objstore_payload")
    (plugin,) = load_endpoint_plugins(("generate",))
    assert isinstance(plugin, PayloadEndpointPlugin)
    assert load_endpoint_plugins(("embed",)) == []


def test_by_handle_the_worked_example_holds_end_to_end(server: PluginServer, store: Store) -> None:
    response = server.generate(request(payload_dir=store.version_prefix(3)))
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert "routed_experts" not in choice
    assert "sampling_mask" not in choice
    assert choice["token_ids"] == COMPLETION
    (turn,) = decode_generate_response(
        response.content, np.array(PROMPT), allowed_roots=[store.root.url]
    )
    routing, _mask = turn.segments
    assert (routing.pos, routing.rows, routing.dtype, routing.shape) == (2, 4, "uint8", (2, 3))
    assert routing.uri.startswith(store.version_prefix(3) + "/")
    reader = PayloadReader(store)
    got_mask = reader.read_field(turn.segments, "sampling_mask", 4, 7)
    assert got_mask is not None
    assert got_mask.tolist() == [[7, -1, -1], [8, 9, 10], [-1, -1, -1]]
    got_routing = reader.read_field(turn.segments, "routed_experts", 2, 6)
    assert got_routing is not None
    np.testing.assert_array_equal(got_routing, ROUTING)
    assert turn.completion_logprobs is not None
    assert turn.completion_logprobs.tolist() == [-0.5, -1.0, -9999.0]  # clamped like vLLM
    (params,) = server.engine.params
    assert params.flat_logprobs
    assert not params.detokenize


def test_without_a_destination_the_arrays_come_back_packed(server: PluginServer) -> None:
    response = server.generate(request())
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    rows, start = codec.decode_routing(choice["routed_experts"])
    assert start == 2
    np.testing.assert_array_equal(rows, ROUTING)
    counts, ids = codec.decode_mask(choice["sampling_mask"])
    assert counts.tolist() == [1, 3, 0]
    assert ids.tolist() == [7, 8, 9, 10]
    assert "segments" not in choice
    (turn,) = decode_generate_response(response.content, np.array(PROMPT))
    assert turn.routed_experts is not None


@pytest.mark.parametrize(
    "destination",
    ["s3://other-bucket/run/v3", "file:///etc", "memory://x/v1", "relative/v3", 7, "{root}/../v3"],
)
def test_destinations_outside_the_root_are_refused_with_400(
    server: PluginServer, store: Store, destination: Any
) -> None:
    if isinstance(destination, str):
        destination = destination.replace("{root}", store.root.url)
    response = server.generate(request(payload_dir=destination))
    assert response.status_code == 400
    assert "payload destination refused" in response.json()["error"]["message"]
    assert server.engine.params == []  # refused before any generation
    assert store.list() == []


def test_a_failed_write_answers_an_error_and_no_handles(
    server: PluginServer, store: Store, tmp_path: Path
) -> None:
    (tmp_path / "payloads").mkdir(exist_ok=True)
    (tmp_path / "payloads" / "v5").write_text("a file where the version folder should be")
    response = server.generate(request(payload_dir=store.version_prefix(5)))
    assert response.status_code == 500
    body = response.json()
    assert body["error"]["type"] == "payload_write_failed"
    assert "choices" not in body


def test_stop_strings_keep_detokenization(server: PluginServer) -> None:
    body = request()
    body["sampling_params"]["stop"] = ["</answer>"]
    assert server.generate(body).status_code == 200
    assert server.engine.params[-1].detokenize


def test_malformed_requests_answer_400(server: PluginServer) -> None:
    assert (
        httpx.post(f"{server.url}/inference/v1/generate", content=b"{", timeout=10).status_code
        == 400
    )
    assert server.generate({"token_ids": [], "sampling_params": {}}).status_code == 400
    streaming = request()
    streaming["stream"] = True
    assert server.generate(streaming).status_code == 400


def test_offline_helper_writes_request_outputs(store: Store) -> None:
    outputs = [
        RequestOutput(
            "r0",
            None,
            PROMPT,
            None,
            [completion(), completion(index=1, routed_experts=ROUTING.astype(np.uint16))],
            True,
        )
    ]
    ((first, second),) = write_request_outputs(
        outputs, PayloadWriter(store), store.version_prefix(1)
    )
    reader = PayloadReader(store)
    for segments in (first, second):
        got = reader.read_field(segments, "routed_experts", 2, 6)
        assert got is not None
        np.testing.assert_array_equal(got, ROUTING)


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8, np.uint16, np.int64])
def test_routing_of_every_vllm_dtype_is_read(dtype: type) -> None:
    arrays, _ = choice_arrays(completion(routed_experts=ROUTING.astype(dtype)), len(PROMPT))
    assert arrays.routed_experts is not None
    np.testing.assert_array_equal(arrays.routed_experts, ROUTING)


class PackedMask:
    """A packed mask as some servers keep it (ids and counts arrays)."""

    def __init__(self) -> None:
        self.ids = np.array([7, 8, 9, 10], np.int32)
        self.counts = np.array([1, 3, 0], np.int32)


@pytest.mark.parametrize("mask", [SamplingMask(token_ids=MASK), MASK, PackedMask()])
def test_masks_in_every_known_form_become_csr(mask: object) -> None:
    arrays, _ = choice_arrays(completion(sampling_mask=mask), len(PROMPT))
    assert arrays.sampling_mask is not None
    assert arrays.sampling_mask[0].tolist() == [1, 3, 0]
    assert arrays.sampling_mask[1].tolist() == [7, 8, 9, 10]


def test_list_logprobs_are_read_too() -> None:
    logprobs = [{11: Logprob(-0.5)}, {12: Logprob(-1.0), 5: Logprob(-3.0)}, {}]
    _, values = choice_arrays(completion(logprobs=logprobs), len(PROMPT))
    assert values is not None
    assert values.tolist() == [-0.5, -1.0, -9999.0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"routed_experts": [[1, 2]]}, "vLLM 0.21"),
        ({"routed_experts": ROUTING.astype(np.float32)}, "dtype"),
        ({"sampling_mask": "ids"}, "not supported"),
        ({"logprobs": 3.0}, "not supported"),
    ],
)
def test_unknown_forms_fail_with_a_clear_message(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedVllmError, match=message):
        choice_arrays(completion(**overrides), len(PROMPT))


def test_gc_tuning_is_off_by_default_and_applies_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = gc.get_threshold()
    state = Namespace()
    asyncio.run(
        PayloadEndpointPlugin(ServerSettings()).init_state(stand_in_engine(), state, Namespace())
    )
    assert gc.get_threshold() == before
    try:
        asyncio.run(
            PayloadEndpointPlugin(ServerSettings(gc_tuning=True)).init_state(
                stand_in_engine(), state, Namespace()
            )
        )
        assert gc.get_threshold() == GC_THRESHOLD
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_settings_come_from_a_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        '[store]\nroot = "s3://bucket/run"\n[store.s3]\naddressing_style = "path"\n'
        '[server]\nallowed_prefixes = ["s3://bucket/run/payloads"]\ngc_tuning = true\n'
    )
    settings = ServerSettings.from_env(
        {
            "OBJSTORE_PAYLOAD_CONFIG": str(config),
            "OBJSTORE_PAYLOAD_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        }
    )
    assert settings.store is not None
    assert settings.store.root == "s3://bucket/run"
    assert settings.store.s3.addressing_style == "path"
    assert settings.store.s3.endpoint_url == "http://127.0.0.1:9000"
    assert settings.allowed_prefixes == ("s3://bucket/run/payloads",)
    assert settings.gc_tuning
    assert ServerSettings.from_env({}).store is None


def test_demo_runs_the_writer_through_the_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from objstore_payload.cli.main import main

    assert (
        main(["demo", "--store", (tmp_path / "p").as_uri(), "--requests", "2", "--through-plugin"])
        == 0
    )
    out = capsys.readouterr().out
    assert "through the vLLM plugin (2 requests" in out
    assert "equal the engine's arrays: OK (2/2)" in out


class TwoChoiceEngine(StandInEngine):
    """n = 2, the second choice's mask broken: nothing may be written for either."""

    async def generate(
        self, prompt: dict[str, Any], sampling_params: Any, request_id: str, **_: Any
    ):  # type: ignore[no-untyped-def,override]
        self.params.append(sampling_params)
        broken = completion(index=1, sampling_mask=SamplingMask(token_ids=[[1]]))
        yield RequestOutput(
            request_id, None, prompt["prompt_token_ids"], None, [completion(), broken], True
        )


def test_a_bad_choice_leaves_no_blob_of_the_good_ones(store: Store) -> None:
    with PluginServer(
        TwoChoiceEngine(lambda *_: None), ServerSettings(store=store.config)
    ) as server:
        response = server.generate(request(payload_dir=store.version_prefix(3)))
    assert response.status_code == 500
    assert "choices" not in response.json()
    assert store.list() == []
