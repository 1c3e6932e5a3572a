"""``--header``, ``--extra-body``, ``--reset-prefix-cache`` and
``--tokenizer-check`` as settings (``config/request_extras.py``): what they
read, what they refuse, how ``config.yaml`` keeps them (secrets redacted)
and reads them back; the framing of the headers, and the calls before the
load when the endpoint fails them (``point/prefix_cache.py``,
``point/tokenizer_check.py``, ``engine/side_request.py``)."""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.artifacts.config_yaml import config_to_yaml_dict, write_config_yaml
from mlpe_fast.config import RunConfig, add_run_arguments, load_yaml, resolve
from mlpe_fast.engine.framing import RequestFraming
from mlpe_fast.engine.side_request import SideResponse, side_request
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import load_dataset
from mlpe_fast.load.requests import templates_for
from mlpe_fast.point.prefix_cache import reset_prefix_caches
from mlpe_fast.point.tokenizer_check import check_tokenizer
from mlpe_fast.sim.tokenize import TokenizeError, load_sim_tokenizer, tokenize
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K


def run(*argv: str, config: dict[str, Any] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(prog="mlpe-fast run")
    add_run_arguments(parser)
    return resolve(parser.parse_args(list(argv)), config or {})


def refused(*argv: str, config: dict[str, Any] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        run(*argv, config=config)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_headers_from_flags_and_from_yaml() -> None:
    assert run("--header", "X-A: 1", "--header", "X-B:two:parts").headers == (
        ("X-A", "1"),
        ("X-B", "two:parts"),
    )
    yaml = {"mlpe_fast": {"headers": {"X-A": "1"}}}
    assert run(config=yaml).headers == (("X-A", "1"),)
    assert run(config={"mlpe_fast": {"headers": ["X-A:1"]}}).headers == (("X-A", "1"),)
    # a flag gives the whole setting: the file's headers are replaced
    assert run("--header", "X-C:3", config=yaml).headers == (("X-C", "3"),)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"headers": 5}, "mlpe_fast.headers: expected NAME:VALUE headers, got int"),
        ({"headers": {"X-A": 1}}, "header X-A: expected a string value, got 1"),
        ({"headers": {"X-A": "a\nb"}}, "header X-A: the value contains CR, LF or NUL"),
        ({"headers": {"Content-Type": "x"}}, "header Content-Type is set by the client"),
        ({"extra_body": {"stream": False}}, "'stream' is mlpe-fast's to set: it is --streaming"),
        ({"extra_body": {"chat_template_kwargs": {}}}, "the ISL count renders the chat template"),
        ({"extra_body": {"x": "a\u0000b"}}, "a NUL character cannot be sent"),
        ({"reset_prefix_cache": "/a b"}, "'/a b' is not a URL path"),
    ],
)
def test_yaml_mistakes_name_their_key(config: dict[str, Any], message: str) -> None:
    assert message in refused(config={"mlpe_fast": config})


def test_a_sampling_field_is_given_one_way() -> None:
    assert run("--extra-body", '{"temperature": 0}').extra_body == {"temperature": 0}
    message = refused(
        "--extra-body", '{"temperature": 0}', config={"model_params": {"temperature": 1}}
    )
    assert message == "--extra-body: 'temperature' is model_params.temperature too; give it one way"
    override = {"datasets": [{"path": "x.jsonl", "generation_config_override": {"seed": 3}}]}
    assert "dataset x's generation_config_override.seed too" in refused(
        "--extra-body", '{"seed": 1}', config=override
    )


def test_the_reset_route_and_the_check() -> None:
    assert run("--reset-prefix-cache", "vllm").reset_prefix_cache == "/reset_prefix_cache"
    assert run("--reset-prefix-cache", "SGLang").reset_prefix_cache == "/flush_cache"
    assert run("--reset-prefix-cache", "/admin/cache?all=1").reset_prefix_cache == (
        "/admin/cache?all=1"
    )
    assert run().tokenizer_check == "auto"
    assert run(config={"mlpe_fast": {"tokenizer_check": False}}).tokenizer_check == "off"


def test_config_yaml_keeps_them_with_credentials_redacted(tmp_path: Path) -> None:
    config = run(
        *("--endpoints", "http://h:8000", "--model", "m"),
        *("--header", "X-Api-Key:secret", "--header", "X-Route:a"),
        *("--extra-body", '{"ignore_eos": true}', "--reset-prefix-cache", "sglang"),
        *("--tokenizer-check", "off", "--dataset", "synthetic:isl=8,osl=2,samples=3"),
    )
    own = config_to_yaml_dict(config)["mlpe_fast"]
    assert own["headers"] == {"X-Api-Key": "<redacted>", "X-Route": "a"}
    assert (own["extra_body"], own["reset_prefix_cache"], own["tokenizer_check"]) == (
        {"ignore_eos": True},
        "/flush_cache",
        "off",
    )
    path = tmp_path / "config.yaml"
    write_config_yaml(path, config)
    message = refused(config=load_yaml(path))
    assert message == (
        "mlpe_fast.headers: header X-Api-Key is '<redacted>' (a written config.yaml keeps no "
        "secrets): give it again with --header X-Api-Key:VALUE"
    )
    again = run("--header", "X-Api-Key:secret", "--header", "X-Route:a", config=load_yaml(path))
    assert again.headers == config.headers
    assert (again.extra_body, again.reset_prefix_cache) == (config.extra_body, "/flush_cache")
    # the synthetic spec, its seed included: the same prompts again
    (written,), (given,) = again.datasets, config.datasets
    assert (written.synthetic, written.display_name) == (given.synthetic, given.display_name)


def test_given_headers_follow_the_client_s_and_replace_accept_and_user_agent() -> None:
    framing = RequestFraming(
        "http", "h", 8000, "", api_key="k", headers={"user-agent": "bench/1", "X-A": "1"}
    )
    head = framing.h1(b"{}", "/v1/completions").split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[1:] == [
        b"Host: h:8000",
        b"Content-Type: application/json",
        b"Accept: text/event-stream, application/json",
        b"Authorization: Bearer k",
        b"User-Agent: bench/1",
        b"X-A: 1",
        b"Content-Length: 2",
    ]
    fields = [name for name, _ in framing.h2("/v1/completions", 2)]
    assert fields.count(b"user-agent") == 1 and b"x-a" in fields


def test_the_extra_body_goes_last_in_every_body() -> None:
    config = run(
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=2", "--model", "m"),
        *("--extra-body", '{"ignore_eos": true, "top_k": 5}'),
    )
    dataset = load_dataset(config.datasets[0])
    for template in templates_for(dataset, config, salt=True):
        body = template.render(b"[0123456789abcdef] ")
        doc = msgspec.json.decode(body)
        assert list(doc)[-2:] == ["ignore_eos", "top_k"] and doc["ignore_eos"] is True


# The calls before the load, when they fail -------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_side_request_without_an_answer_says_why() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    answer = asyncio.run(side_request(url, "POST", "/tokenize", b"{}", timeout_s=2))
    assert (answer.status, answer.ok, answer.body) == (None, False, b"")
    assert answer.url == f"{url}/tokenize" and "refused" in (answer.error or "").lower()


def test_a_reset_without_an_answer_stops_the_run(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    config = run("--reset-prefix-cache", "vllm")
    with pytest.raises(UsageError) as info:
        asyncio.run(reset_prefix_caches(config, [url]))
    assert str(info.value).startswith(
        f"--reset-prefix-cache: POST {url}/reset_prefix_cache got no answer: "
    )
    assert str(info.value).endswith(
        "the point was not measured (its prefix cache could not be emptied): fix the server, "
        "or leave --reset-prefix-cache out"
    )


def test_vllm_s_missing_route_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    async def not_found(url: str, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        return SideResponse(f"{url}{path}", 404, b'{"detail":"Not Found"}', 1000)

    monkeypatch.setattr("mlpe_fast.point.prefix_cache.side_request", not_found)
    with pytest.raises(
        UsageError,
        match=r"answered 404 \(\{\"detail\":\"Not Found\"\}\) \(vLLM "
        r"serves it only when started with VLLM_SERVER_DEV_MODE=1\)",
    ):
        asyncio.run(reset_prefix_caches(run("--reset-prefix-cache", "vllm"), ["http://h:1"]))


def test_a_check_without_an_answer_warns_unless_it_was_asked_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    config = run("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=3")
    dataset = load_dataset(config.datasets[0])
    tokenizer = load_sim_tokenizer(str(CHAR_TOKENIZER))
    found = asyncio.run(check_tokenizer(config, url, [dataset], tokenizer))
    assert found is not None and (found["offered"], found["status"]) == (False, None)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"mlpe-fast: warning: --tokenizer-check: POST {url}/tokenize got no ")
    assert line.endswith(": the token counts were not checked")
    on = msgspec.structs.replace(config, tokenizer_check="on")
    with pytest.raises(UsageError, match=r"; use --tokenizer-check auto or off$"):
        asyncio.run(check_tokenizer(on, url, [dataset], tokenizer))
    off = msgspec.structs.replace(config, tokenizer_check="off")
    assert asyncio.run(check_tokenizer(off, url, [dataset], tokenizer)) is None


def test_the_simulated_tokenize_answers_as_vllm_and_refuses_what_it_cannot() -> None:
    tokenizer = load_sim_tokenizer(str(CHAR_TOKENIZER))
    answer = msgspec.json.decode(
        tokenize(tokenizer, b'{"model":"m","prompt":"abc"}', skew=2, max_model_len=99)
    )
    assert answer == {"tokens": answer["tokens"], "count": 5, "max_model_len": 99}
    assert answer["tokens"][3:] == [answer["tokens"][0]] * 2
    for body, message in (
        (b"[]", "the request body must be a JSON object"),
        (b'{"prompt": [1]}', "'prompt' must be a string"),
        (b'{"prompt": "a", "add_special_tokens": 1}', "'add_special_tokens' must be a boolean"),
    ):
        with pytest.raises(TokenizeError, match=message):
            tokenize(tokenizer, body, skew=0, max_model_len=1)
