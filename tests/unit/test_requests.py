"""Request bodies, the salt and its splice, and the sample order.

The salt must be the reference's (``random.Random(seed).randbytes(8).hex()``
per query, ``"[<hex>] " + prompt``), and a spliced body must be byte for byte
what encoding the salted request would give.
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

import msgspec
import pytest

from mlpe_fast.config import SEED_SET_A_SAMPLE_INDEX, RunConfig, add_run_arguments, resolve
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import Dataset, DatasetSpec, Sample, load_dataset, parse_dataset_arg
from mlpe_fast.load.requests import (
    BodyTemplate,
    RequestFeed,
    build_body_templates,
    default_route,
    sequential_order,
    shuffled_order,
)
from mlpe_fast.load.salt import SALT_PREFIX_LEN, Salter, default_salt_seed, salt_prompt
from tests.data_files import DUMMY_1K


def dataset(*samples: Sample) -> Dataset:
    return Dataset(spec=DatasetSpec(path="mem.jsonl"), columns=("prompt",), samples=samples)


def config(*argv: str) -> RunConfig:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return resolve(parser.parse_args(list(argv)), {})


def reference_salts(seed: int, n: int) -> list[str]:
    """The reference's algorithm (Dataset._apply_salt), one call per query."""
    rng = random.Random(seed)
    return [rng.randbytes(8).hex() for _ in range(n)]


def reference_order(n: int, seed: int, count: int) -> list[int]:
    """The reference's WithoutReplacementSampleOrder, written out."""
    rng = random.Random(seed)
    order = list(range(n))
    out: list[int] = []
    position = n + 1
    while len(out) < count:
        if position >= n:
            rng.shuffle(order)
            position = 0
        out.append(order[position])
        position += 1
    return out


# Salt ----------------------------------------------------------------------------------------


def test_salt_test_vectors() -> None:
    # CPython's Mersenne Twister; these pin the reference algorithm's output.
    assert Salter(42).next_hex() == "9d79b1a37f31801c"
    assert [Salter(0).next_hex()] == ["cd072cd8be6f9f62"]
    salter = Salter(default_salt_seed(SEED_SET_A_SAMPLE_INDEX))
    assert [salter.next_hex() for _ in range(3)] == [
        "14751c39e8f63bbd",
        "9baeaae08dc57e08",
        "fddb44ac94106bad",
    ]


@pytest.mark.parametrize("seed", [0, 42, 2**64 - 1, SEED_SET_A_SAMPLE_INDEX + 2])
def test_salts_match_the_reference_across_blocks(seed: int) -> None:
    salter = Salter(seed)
    ours = [
        salter.next_hex() if i % 2 else salter.next_prefix()[1:17].decode() for i in range(1200)
    ]
    assert ours == reference_salts(seed, 1200)
    assert all(len(s) == 16 and int(s, 16) >= 0 for s in ours)


def test_salt_format() -> None:
    assert salt_prompt("0011223344556677", "hi") == "[0011223344556677] hi"
    prefix = Salter(1).next_prefix()
    assert len(prefix) == SALT_PREFIX_LEN == 19
    assert prefix[:1] == b"[" and prefix[-2:] == b"] "


# Bodies ----------------------------------------------------------------------------------------


def test_chat_body_streaming_bytes() -> None:
    (template,) = build_body_templates(dataset(Sample(prompt="hi")), model="m", salt=False)
    assert template.render() == (
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
        b'"max_completion_tokens":1024,"stream":true,"stream_options":{"include_usage":true}}'
    )


def test_chat_body_non_streaming_and_sampling() -> None:
    (template,) = build_body_templates(
        dataset(Sample(prompt="hi", system="be brief")),
        model="m",
        stream=False,
        max_output_tokens=64,
        sampling={"temperature": 0.0, "top_p": 0.9, "seed": 7, "top_k": None},
        salt=False,
    )
    body = json.loads(template.render())
    assert list(body) == [
        "model",
        "messages",
        "temperature",
        "max_completion_tokens",
        "seed",
        "top_p",
    ]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert (body["temperature"], body["max_completion_tokens"], body["seed"]) == (0.0, 64, 7)
    assert "stream" not in body  # as the reference when not streaming


def test_chat_body_with_max_tokens_too() -> None:
    # --send-max-tokens: for servers that honour only the older field.
    (template,) = build_body_templates(
        dataset(Sample(prompt="hi")),
        model="m",
        max_output_tokens=64,
        salt=False,
        send_max_tokens=True,
    )
    body = json.loads(template.render())
    assert (body["max_completion_tokens"], body["max_tokens"]) == (64, 64)
    assert list(body).index("max_tokens") == list(body).index("max_completion_tokens") + 1


def test_completions_body() -> None:
    (template,) = build_body_templates(
        dataset(Sample(prompt="once upon")),
        model="m",
        api_type="openai-completions",
        stream=False,
        max_output_tokens=8,
        salt=False,
    )
    assert template.render() == b'{"model":"m","prompt":"once upon","stream":false,"max_tokens":8}'
    assert default_route("openai-completions") == "/v1/completions"
    assert default_route("openai") == "/v1/chat/completions"


def token_dataset(*ids: tuple[int, ...]) -> Dataset:
    spec = DatasetSpec(path="tokens.jsonl", input_tokens_column="ids")
    return Dataset(spec=spec, columns=("ids",), samples=tuple(Sample(token_ids=i) for i in ids))


def test_sglang_body_is_the_reference_s_with_sampling_params_inside() -> None:
    # sglang/types.py's SGLangGenerateRequest; SGLang's own names inside
    # sampling_params (its SamplingParams refuses others), no model
    (template,) = build_body_templates(
        token_dataset((1, 2, 3)),
        model="m",
        api_type="sglang",
        max_output_tokens=8,
        sampling={
            "temperature": 0.5,
            "seed": 7,
            "top_k": 20,
            "top_p": None,
            "chat_template_kwargs": {"reasoning_effort": "low"},
        },
        salt=False,
    )
    assert template.render() == (
        b'{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":8,"temperature":0.5,'
        b'"sampling_seed":7,"top_k":20,"skip_special_tokens":false},"stream":true}'
    )
    (plain,) = build_body_templates(
        token_dataset((4,)), model="m", api_type="sglang", stream=False, salt=False
    )
    assert json.loads(plain.render()) == {
        "input_ids": [4],
        "sampling_params": {"max_new_tokens": 1024, "skip_special_tokens": False},
        "stream": False,
    }
    assert default_route("sglang") == "/generate"


def test_sglang_sends_token_ids_only() -> None:
    with pytest.raises(UsageError) as info:
        build_body_templates(dataset(Sample(prompt="hello")), model="m", api_type="sglang")
    assert str(info.value) == (
        "dataset mem.jsonl: api_type sglang sends token ids (input_ids) only; give the "
        "dataset's ids column with parser.input_tokens=COL"
    )
    with pytest.raises(UsageError, match="sent to /v1/completions or SGLang's /generate only"):
        build_body_templates(token_dataset((1,)), model="m", api_type="openai", salt=False)


def test_completions_rejects_what_it_cannot_send() -> None:
    with pytest.raises(UsageError) as info:
        build_body_templates(
            dataset(Sample(messages=({"role": "user", "content": "x"},))),
            model="m",
            api_type="openai-completions",
        )
    assert str(info.value) == (
        "dataset mem.jsonl: sample 0 is a chat 'messages' sample; api_type "
        "openai-completions sends a plain prompt (use api_type openai)"
    )
    with pytest.raises(UsageError) as info:
        build_body_templates(
            dataset(Sample(prompt="p", system="s")), model="m", api_type="openai-completions"
        )
    assert str(info.value) == (
        "dataset mem.jsonl: sample 0 has a system prompt, which api_type openai-completions "
        "cannot send (use api_type openai)"
    )


TRICKY = [
    "plain",
    "",
    'quotes " and \\ backslashes \\" and </script>',
    "new\nlines\r\tand \x00 \x1f controls",
    "unicode é 世 😀 \u2028",
    "[0123456789abcdef] looks salted already",
]


@pytest.mark.parametrize("api_type", ["openai", "openai-completions"])
@pytest.mark.parametrize("stream", [True, False])
def test_splice_equals_encoding_the_salted_request(api_type: str, stream: bool) -> None:
    data = dataset(*(Sample(prompt=p) for p in TRICKY))
    salted = build_body_templates(data, model="m", api_type=api_type, stream=stream, salt=True)
    plain = build_body_templates(data, model="m", api_type=api_type, stream=stream, salt=False)
    salter = Salter(5)
    for prompt, template, unsalted in zip(TRICKY, salted, plain, strict=True):
        prefix = salter.next_prefix()
        body = template.render(prefix)
        text = salt_prompt(prefix[1:17].decode(), prompt)
        expected = build_body_templates(
            dataset(Sample(prompt=text)), model="m", api_type=api_type, stream=stream, salt=False
        )[0].render()
        assert body == expected
        decoded = json.loads(body)
        got = decoded["prompt"] if api_type == "openai-completions" else decoded["messages"][-1]
        assert (got if isinstance(got, str) else got["content"]) == text
        assert template.render() == unsalted.render()


def test_salt_goes_after_the_system_prompt() -> None:
    (template,) = build_body_templates(dataset(Sample(prompt="q", system="sys")), model="m")
    body = json.loads(template.render(b"[0011223344556677] "))
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "[0011223344556677] q"},
    ]


def test_messages_sample_salts_the_first_user_message() -> None:
    messages = (
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "second"},
    )
    (template,) = build_body_templates(dataset(Sample(messages=messages)), model="m")
    body = json.loads(template.render(b"[0011223344556677] "))
    assert [m["content"] for m in body["messages"]] == [
        "s",
        "[0011223344556677] first",
        "a",
        "second",
    ]


def test_unsaltable_messages_sample() -> None:
    parts = [{"type": "text", "text": "multimodal"}]
    data = dataset(Sample(messages=({"role": "user", "content": parts},)))
    with pytest.raises(UsageError) as info:
        build_body_templates(data, model="m", salt=True)
    assert str(info.value) == (
        "dataset mem.jsonl: sample 0 has no user message with text content to salt; "
        "use --no-salt (performance runs should be salted)"
    )
    (template,) = build_body_templates(data, model="m", salt=False)
    assert json.loads(template.render())["messages"][0]["content"] == parts


def test_body_template_render() -> None:
    assert BodyTemplate(head=b"ab").render() == b"ab"
    assert BodyTemplate(head=b'{"x":"', tail=b'y"}').render() == b'{"x":"y"}'
    assert BodyTemplate(head=b'{"x":"', tail=b'y"}').render(b"[s] ") == b'{"x":"[s] y"}'


# Sample order ----------------------------------------------------------------------------------


def test_shuffled_order_is_the_reference_order() -> None:
    order = shuffled_order(7, 123)
    got = [next(order) for _ in range(30)]
    assert got == reference_order(7, 123, 30)
    for start in range(0, 28, 7):  # each pass is a permutation
        assert sorted(got[start : start + 7]) == list(range(7))
    assert got[:7] != got[7:14]  # reshuffled, not repeated


def test_sequential_order() -> None:
    order = sequential_order(3)
    assert [next(order) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        next(shuffled_order(0, 1))


# Feeds --------------------------------------------------------------------------------------------


def small() -> Dataset:
    return dataset(*(Sample(prompt=f"prompt {i}") for i in range(5)))


def test_performance_feed_is_deterministic_and_salted() -> None:
    cfg = config("--model", "m", "--endpoints", "http://h", "--sample-index-seed", "9")
    feed = RequestFeed.for_phase(small(), cfg)
    issued = [next(feed) for _ in range(12)]
    again = [next(RequestFeed.for_phase(small(), cfg)) for _ in range(1)]
    assert again[0] == issued[0]
    assert [r.sample_index for r in issued] == reference_order(5, 9, 12)
    salts = reference_salts(11, 12)  # sample-index seed + 2
    for request, salt in zip(issued, salts, strict=True):
        text = f"[{salt}] prompt {request.sample_index}"
        assert request.prompt == text
        assert json.loads(request.body)["messages"][-1]["content"] == text
        assert json.loads(request.body)["model"] == "m"


def test_next_request_and_last_prompt() -> None:
    feed = RequestFeed.for_phase(small(), config("--no-salt"))
    index, body = feed.next_request()
    assert feed.last_prompt == f"prompt {index}"
    assert json.loads(body)["messages"] == [{"role": "user", "content": f"prompt {index}"}]


def test_accuracy_feed_is_sequential_and_unsalted() -> None:
    feed = RequestFeed.for_phase(small(), config(), "accuracy")
    issued = [next(feed) for _ in range(6)]
    assert [r.sample_index for r in issued] == [0, 1, 2, 3, 4, 0]
    assert [r.prompt for r in issued[:2]] == ["prompt 0", "prompt 1"]


def test_warmup_feed_uses_the_reference_warmup_seeds() -> None:
    feed = RequestFeed.for_phase(small(), config("--warmup-seed", "100"), "warmup")
    issued = [next(feed) for _ in range(5)]
    assert [r.sample_index for r in issued] == reference_order(5, 101, 5)
    salts = reference_salts(102, 5)
    assert [r.prompt for r in issued] == [
        f"[{s}] prompt {r.sample_index}" for s, r in zip(salts, issued, strict=True)
    ]


def test_a_shared_salter_never_repeats_a_salt_across_phases() -> None:
    cfg = config()
    salter = Salter(cfg.seeds.salt_seed)
    warmup = RequestFeed.for_phase(small(), cfg, "warmup", salter=salter)
    performance = RequestFeed.for_phase(small(), cfg, "performance", salter=salter)
    prompts = [next(warmup).prompt for _ in range(4)] + [next(performance).prompt for _ in range(4)]
    salts = [str(p)[1:17] for p in prompts]
    assert salts == reference_salts(cfg.seeds.salt_seed, 8)


def test_messages_feed_prompt_is_the_salted_messages() -> None:
    messages = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
    data = dataset(Sample(messages=messages))
    request = next(RequestFeed.for_phase(data, config()))
    assert isinstance(request.prompt, tuple)
    salt = reference_salts(SEED_SET_A_SAMPLE_INDEX + 2, 1)[0]
    assert request.prompt == (
        {"role": "system", "content": "s"},
        {"role": "user", "content": f"[{salt}] u"},
    )
    assert json.loads(request.body)["messages"] == list(request.prompt)
    assert messages[1]["content"] == "u"  # the dataset is not modified


def test_feed_checks_its_inputs() -> None:
    data = small()
    plain = build_body_templates(data, model="m", salt=False)
    with pytest.raises(ValueError, match="salt=True"):
        RequestFeed(data.samples, plain, sequential_order(5), Salter(1))
    with pytest.raises(ValueError, match="one body template per sample"):
        RequestFeed(data.samples[:2], plain, sequential_order(2))


def test_dummy_1k_feed() -> None:
    data = load_dataset(parse_dataset_arg(f"{DUMMY_1K},parser.prompt=text_input"))
    cfg = config("--model", "llama", "--endpoints", "http://h:1", "--max-output-tokens", "128")
    feed = RequestFeed.for_phase(data, cfg)
    seen: dict[int, int] = {}
    salts = reference_salts(cfg.seeds.salt_seed, 1000)
    for i in range(1000):
        request = next(feed)
        seen[request.sample_index] = seen.get(request.sample_index, 0) + 1
        body: dict[str, Any] = msgspec.json.decode(request.body)
        assert body["max_completion_tokens"] == 128
        content = body["messages"][0]["content"]
        assert content == f"[{salts[i]}] {data.samples[request.sample_index].prompt}"
    assert sorted(seen) == list(range(1000)) and set(seen.values()) == {1}  # one full pass
