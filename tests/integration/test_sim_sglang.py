"""The simulated endpoint's SGLang route, ``POST /generate``, over real
loopback sockets and the independent client of ``test_sim_server.py``: what
its objects say, cumulative (SGLang's default) or incremental
(``--incremental-streaming-output``), streamed, buffered or whole; and what it
refuses."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from mlpe_fast.sim.server import SimConfig, SimServer, build_arg_parser, config_from_args
from tests.integration.test_sim_server import Client

GENERATE = "/generate"


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Any]]:
    """One server per way of streaming, shared by the module's tests."""
    started = {
        "cumulative": SimServer.start_in_thread(SimConfig(seed=5)),
        "length": SimServer.start_in_thread(SimConfig(seed=5, framing="length")),
    }
    yield started
    for handle in started.values():
        handle.stop()


def generate(ids: Any = (1, 2, 3), max_new_tokens: int | None = 5, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"input_ids": list(ids), "stream": True, **kw}
    if max_new_tokens is not None:
        body["sampling_params"] = {"max_new_tokens": max_new_tokens, "skip_special_tokens": False}
    return body


def test_a_stream_carries_the_whole_text_so_far(sims: dict[str, Any]) -> None:
    with Client(sims["cumulative"].port) as c:
        resp = c.request("POST", GENERATE, generate((7, 8, 9, 10)))
    assert resp.status == 200 and resp.headers["content-type"] == "text/event-stream"
    docs = resp.docs()
    texts = [d["text"] for d in docs]
    assert [len(t) for t in texts] == [1, 2, 3, 4, 5]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    metas = [d["meta_info"] for d in docs]
    assert [m["completion_tokens"] for m in metas] == [1, 2, 3, 4, 5]
    assert {m["prompt_tokens"] for m in metas} == {4}
    assert [m["finish_reason"] for m in metas] == [None] * 4 + [{"type": "length", "length": 5}]
    assert len({m["id"] for m in metas}) == 1
    # the ground truth of every event, as on the OpenAI routes
    assert all(0 < d["mlpe_recv_ns"] <= d["mlpe_send_ns"] for d in docs)


def test_incremental_output_sends_each_token_s_text_alone() -> None:
    # two fresh servers of one seed: the same first answer
    answers = []
    for incremental in (False, True):
        with (
            SimServer.start_in_thread(
                SimConfig(seed=9, incremental_streaming_output=incremental)
            ) as sim,
            Client(sim.port) as c,
        ):
            answers.append(c.request("POST", GENERATE, generate()))
    whole, deltas = answers
    texts = [d["text"] for d in deltas.docs()]
    assert [len(t) for t in texts] == [1] * 5
    # the same seed, the same answer: the deltas join to the whole text
    assert "".join(texts) == whole.docs()[-1]["text"]
    assert [d["meta_info"]["completion_tokens"] for d in deltas.docs()] == [1, 2, 3, 4, 5]


def test_a_non_streaming_answer_is_one_object(sims: dict[str, Any]) -> None:
    with Client(sims["cumulative"].port) as c:
        resp = c.request("POST", GENERATE, generate(stream=False, max_new_tokens=6))
        text = c.request("POST", GENERATE, {"text": "hello", "stream": False})
    assert resp.headers["content-type"] == "application/json"
    doc = resp.json()
    assert len(doc["text"]) == 6 and doc["output_ids"] == list(range(6))
    meta = doc["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (3, 6)
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    # a text prompt counts its characters; no limit: a draw, and "stop"
    meta = text.json()["meta_info"]
    assert meta["prompt_tokens"] == 5 and meta["finish_reason"]["type"] == "stop"
    assert meta["completion_tokens"] == len(text.json()["text"]) == 128


def test_a_buffered_stream_has_the_same_objects(sims: dict[str, Any]) -> None:
    with Client(sims["length"].port) as c:
        resp = c.request("POST", GENERATE, generate())
    assert "content-length" in resp.headers
    texts = [d["text"] for d in resp.docs()]
    assert [len(t) for t in texts] == [1, 2, 3, 4, 5]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"stream": True}, "either 'text' or 'input_ids' should be provided"),
        ({"input_ids": []}, "'input_ids' must be a non-empty array of token ids"),
        ({"input_ids": [1, "2"]}, "'input_ids' must be a non-empty array of token ids"),
        ({"input_ids": [1], "stream": "yes"}, "'stream' must be a boolean"),
        ({"input_ids": [1], "sampling_params": [5]}, "'sampling_params' must be an object"),
        (
            {"input_ids": [1], "sampling_params": {"max_new_tokens": 0}},
            "'max_new_tokens' must be an integer >= 1",
        ),
        (
            {"input_ids": [1], "sampling_params": {"max_new_tokens": 1 << 21}},
            "'max_new_tokens' exceeds the simulated context of 1048576 tokens",
        ),
        ([1, 2], "the request body must be a JSON object"),
    ],
)
def test_bad_requests_get_400(sims: dict[str, Any], body: Any, message: str) -> None:
    with Client(sims["cumulative"].port) as c:
        resp = c.request("POST", GENERATE, body)
        again = c.request("POST", GENERATE, generate())  # the connection is kept
    assert resp.status == 400 and resp.json()["error"]["message"] == message
    assert again.status == 200


def test_generate_takes_post_only(sims: dict[str, Any]) -> None:
    with Client(sims["cumulative"].port) as c:
        resp = c.request("GET", GENERATE)
    assert resp.status == 405 and resp.headers["allow"] == "POST"


def test_the_flag_maps_to_the_config() -> None:
    parser = build_arg_parser()
    assert config_from_args(parser.parse_args([])).incremental_streaming_output is False
    flagged = parser.parse_args(["--incremental-streaming-output"])
    assert config_from_args(flagged).incremental_streaming_output is True
