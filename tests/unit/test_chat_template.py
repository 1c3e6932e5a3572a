"""Chat-template rendering (spec §1.2): exact renderings and token counts
worked out by hand with one-character-per-token tokenizers, and equality
with ``transformers``' ``apply_chat_template`` (the reference client's
renderer) where transformers is installed.

The ``char_chat`` tokenizer is the one in ``tests/data``; the other
templates are written into tmp dirs with a character tokenizer built here.
"""

from __future__ import annotations

import datetime
import json
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from mlpe_fast.artifacts.events import text_model_output
from mlpe_fast.errors import MlpeError, UsageError
from mlpe_fast.metrics.chat_template import (
    EMPTY_ASSISTANT_MESSAGE,
    EMPTY_USER_MESSAGE,
    ChatTemplate,
    ChatTemplateError,
    assistant_message,
    normalize_tool_calls,
    prompt_messages_for_template,
    tokenizer_dir,
)
from mlpe_fast.metrics.count_inputs import merge_tool_call_chunks
from mlpe_fast.metrics.tokens import load_tokenizer
from mlpe_fast.wire.events import NO_RESPONSE, ResponseSummary, ToolCall
from tests.data_files import CHAR_CHAT_TOKENIZER as CHAR_CHAT

U = dict(EMPTY_USER_MESSAGE)
EA = dict(EMPTY_ASSISTANT_MESSAGE)


def tool_call(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call = {"id": call_id, **call}
    return call


# A character tokenizer: every character one token, the specials one token each ------------

SPECIALS = (
    "<unk>",
    "<pad>",
    "<s>",
    "</s>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
)


def char_tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for char in [chr(c) for c in range(32, 127)] + ["\n", "\t", "ü", "é"]:
        vocab.setdefault(char, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def write_dir(
    directory: Path, config: Mapping[str, Any], files: Mapping[str, str] | None = None
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    char_tokenizer().save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "TokenizersBackend", **config}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    for name, text in (files or {}).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return directory


def count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


# Templates in the styles of real models --------------------------------------------------

# Llama 3.1 style: BOS from the special tokens, strftime_now, raise_exception,
# tojson(indent=4), trim, `is defined`, {%- -%} everywhere.
LLAMA = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/...') }}
    {%- endif %}
    {%- if message.tool_calls is defined and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {%- for tool_call in message.tool_calls %}
            {{- '{"name": "' + tool_call.function.name + '", "parameters": ' }}
            {{- tool_call.function.arguments | tojson }}
            {{- "}" }}
        {%- endfor %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Qwen 3 style: tools | tojson, namespace, a reversed loop with {% break %},
# reasoning_content, {% generation %}, string or object arguments,
# enable_thinking from chat_template_kwargs.
QWEN = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- if message.role == "user" %}
        {%- set ns.last_query_index = (messages|length - 1) - loop.index0 %}
        {%- break %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- generation %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' }}
            {{- content.lstrip('\n') }}
        {%- else %}
            {{- content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {%- endgeneration %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# A "tool_use" companion: documents, {% continue %}, dict(), tojson with
# separators and sort_keys, whole tool calls printed with tojson (key order).
TOOL_USE = r"""{{ bos_token }}TOOLS:{{ tools | tojson(separators=(',', ':'), sort_keys=true) }}
{% if documents %}DOCS:{% for d in documents %}{{ d.title }}={{ d.text }};{% endfor %}
{% endif %}
{% for m in messages %}
{% if m.role == 'system' %}{% continue %}{% endif %}
{% set meta = dict(role=m.role, n=loop.index) %}
[{{ meta | tojson }}]{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}>{% endif %}"""


@pytest.fixture(scope="module")
def template_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("templates")
    llama = write_dir(
        root / "llama",
        {
            "bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "special": True},
            "eos_token": "<|eot_id|>",
        },
        {"chat_template.jinja": LLAMA},
    )
    qwen = write_dir(
        root / "qwen",
        {
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "chat_template": [
                {"name": "default", "template": QWEN},
                {"name": "tool_use", "template": TOOL_USE},
            ],
        },
    )
    return {"llama": llama, "qwen": qwen, "char_chat": CHAR_CHAT}


# char_chat: exact renderings and counts by hand -----------------------------------------

CHAR_PREFIX = "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def char_chat() -> ChatTemplate:
    template = ChatTemplate.from_tokenizer_dir(CHAR_CHAT)
    assert template is not None
    return template


@pytest.fixture(scope="module")
def char_chat_tokenizer() -> Tokenizer:
    return load_tokenizer(str(CHAR_CHAT))


def test_char_chat_renders_the_message_of_spec_1_2(
    char_chat: ChatTemplate, char_chat_tokenizer: Tokenizer
) -> None:
    message = assistant_message("hi", "ab", [tool_call("get", '{"x": 1}')])
    assert message == {
        "role": "assistant",
        "content": "hi",
        "reasoning_content": "ab",
        "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"x": 1}}}],
    }
    # trim_blocks eats the newline after each {% if %}/{% for %} tag.
    body = 'hi<think>ab</think><tool_call>get({"x": 1})</tool_call>'
    assert char_chat.render_reply(message) == CHAR_PREFIX + body + "<|im_end|>\n"
    assert char_chat.framing == CHAR_PREFIX + "<|im_end|>\n"
    # <|im_start|>=12 user\n=5 <|im_end|>=10 \n=1 <|im_start|>=12 assistant\n=10 <|im_end|>=10 \n=1
    framing = count(char_chat_tokenizer, char_chat.framing)
    assert framing == 61
    # hi=2 <think>=7 ab=2 </think>=8 <tool_call>=11 get=3 (=1 {"x": 1}=8 )=1 </tool_call>=12
    assert count(char_chat_tokenizer, char_chat.render_reply(message)) - framing == 55


@pytest.mark.parametrize(
    ("content", "reasoning", "calls", "expected"),
    [
        ("hi", None, None, 2),
        ("", "ab", None, 17),  # <think>=7 ab=2 </think>=8
        ("<s>", None, None, 1),  # an added token in the output counts once
        # <tool_call>=11 f(=2 ...arguments... )=1 </tool_call>=12, so 26 + the arguments:
        ("", None, [tool_call("f", "not json")], 36),  # not JSON, a string: "not json"=10
        ("", None, [tool_call("f", "[1, 2]")], 34),  # JSON, not an object: "[1, 2]"=8
        ("", None, [tool_call("f", '{"c": "Zürich"}')], 41),  # an object: {"c": "Zürich"}=15
    ],
)
def test_char_chat_counts(
    char_chat: ChatTemplate,
    char_chat_tokenizer: Tokenizer,
    content: str,
    reasoning: str | None,
    calls: list[dict[str, Any]] | None,
    expected: int,
) -> None:
    text = char_chat.render_reply(assistant_message(content, reasoning, calls))
    framing = count(char_chat_tokenizer, char_chat.framing)
    assert max(0, count(char_chat_tokenizer, text) - framing) == expected


def test_char_chat_prompt_with_tools_and_generation_prompt(char_chat: ChatTemplate) -> None:
    tools = [{"type": "function", "function": {"name": "get", "description": "<b>&'"}}]
    text = char_chat.render(
        [{"role": "user", "content": "Zürich?"}], add_generation_prompt=True, tools=tools
    )
    # tojson neither escapes HTML characters nor non-ASCII letters.
    assert text == (
        '<|tools|>{"type": "function", "function": {"name": "get", "description": "<b>&\'"}}'
        "<|/tools|>\n<|im_start|>user\nZürich?<|im_end|>\n<|im_start|>assistant\n"
    )
    no_prompt = char_chat.render([{"role": "user", "content": "x"}], add_generation_prompt=False)
    assert no_prompt == "<|im_start|>user\nx<|im_end|>\n"


def test_char_chat_special_tokens_come_from_its_config(char_chat: ChatTemplate) -> None:
    assert char_chat.special_tokens == {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    }
    assert char_chat.names == ()


# The environment: what transformers' _compile_jinja_template sets up ---------------------


def render_one(source: str, **variables: Any) -> str:
    return ChatTemplate(source).render([U], add_generation_prompt=False, **variables)


def test_whitespace_control_trims_blocks_and_strips_their_indent() -> None:
    assert render_one("  {% if true %}\nX\n  {% endif %}\nY") == "X\nY"


def test_tojson_arguments() -> None:
    source = '{{ {"b": 1, "a": "é<"} | tojson(indent=2, sort_keys=true) }}'
    assert render_one(source) == '{\n  "a": "é<",\n  "b": 1\n}'
    assert render_one("{{ [1, 'x'] | tojson(separators=(',', ':')) }}") == '[1,"x"]'


def test_strftime_now_is_local_time() -> None:
    before = datetime.datetime.now().strftime("%Y-%m-%d")
    text = render_one('{{ strftime_now("%Y-%m-%d") }}')
    after = datetime.datetime.now().strftime("%Y-%m-%d")
    assert text in (before, after)


def test_generation_block_renders_its_body_in_its_own_scope() -> None:
    source = "{% set x = 1 %}{% generation %}{% set x = 2 %}[{{ x }}]{% endgeneration %}{{ x }}"
    assert render_one(source) == "[2]1"


def test_loop_controls() -> None:
    source = "{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}"
    source += "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render_one(source) == "023"


def test_namespace_and_dict_globals() -> None:
    source = "{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}"
    source += "{{ dict(a=1) | tojson }}{{ dict.fromkeys(['k'], 0) | tojson }}"
    assert render_one(source) == '2{"a": 1}{"k": 0}'


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{ raise_exception('roles must alternate') }}", "TemplateError: roles must alternate"),
        ("{{ messages.__class__.__mro__ }}", "SecurityError"),
        ("{% set ns = namespace(_x=1) %}", "SecurityError"),
        ("{% set ns = namespace() %}{% set ns._y = 1 %}", "SecurityError"),
        ("{{ messages[0].content.nope() }}", "UndefinedError"),
        ("{{ messages[0].role + 1 }}", "TypeError"),
    ],
)
def test_render_errors_are_one_line_chat_template_errors(source: str, fragment: str) -> None:
    with pytest.raises(ChatTemplateError) as info:
        render_one(source)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert isinstance(info.value, MlpeError)


def test_a_broken_template_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"broken: TemplateSyntaxError: .*line 2") as info:
        ChatTemplate("ok\n{% if %}", source="mydir")
    assert "mydir" in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_jinja2_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(UsageError, match="jinja2"):
        ChatTemplate("{{ messages }}")


# Variables and template choice (apply_chat_template / get_chat_template) -----------------

PROBE = (
    "{{ bos_token }}|{{ tools | tojson }}|{{ documents | tojson }}|{{ add_generation_prompt }}"
    "|{{ tool_choice | default('-') }}|{{ tokenize is defined }}|{{ flag | default('-') }}"
)


def test_variables_passed_to_the_template() -> None:
    template = ChatTemplate(PROBE, {"bos_token": "<s>"})
    assert template.render([U], add_generation_prompt=True) == "<s>|null|null|True|-|False|-"
    text = template.render(
        [U],
        add_generation_prompt=False,
        tools=[{"name": "t"}],
        tool_choice="auto",
        chat_template_kwargs={
            "bos_token": "B",  # caller's kwargs win over special tokens
            "tools": [{"name": "ignored"}],  # the explicit argument wins
            "documents": [{"title": "a", "text": "b"}],
            "add_generation_prompt": True,  # the explicit argument wins
            "tokenize": True,  # consumed by apply_chat_template, not a template variable
            "flag": 7,
        },
    )
    assert text == 'B|[{"name": "t"}]|[{"title": "a", "text": "b"}]|False|auto|False|7'


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tools": ["not a schema"]}, "JSON schemas"),
        ({"chat_template_kwargs": {"documents": ["x"]}}, "documents"),
        ({"chat_template_kwargs": {"messages": []}}, "messages"),
        ({"chat_template_kwargs": {"continue_final_message": True}}, "continue_final_message"),
        ({"chat_template": "{% if %}"}, "request's chat template is broken"),
    ],
)
def test_bad_render_arguments(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ChatTemplateError, match=fragment):
        ChatTemplate(PROBE).render([U], add_generation_prompt=False, **kwargs)


def test_named_templates_are_chosen_like_get_chat_template() -> None:
    template = ChatTemplate({"default": "D", "tool_use": "T", "other": "O"})
    assert template.names == ("default", "tool_use", "other")

    def render(**kwargs: Any) -> str:
        return template.render([U], add_generation_prompt=False, **kwargs)

    assert render() == "D"
    assert render(tools=[]) == "T"  # any tools, even none, pick tool_use
    assert render(tools=[], chat_template="default") == "D"
    assert render(chat_template="other") == "O"
    assert render(chat_template="inline {{ 1 + 1 }}") == "inline 2"
    assert ChatTemplate("S").render([U], add_generation_prompt=False, chat_template="X") == "X"
    without_default = ChatTemplate({"tool_use": "T"})
    with pytest.raises(ChatTemplateError, match="none is named 'default'"):
        without_default.render([U], add_generation_prompt=False)
    assert without_default.render([U], add_generation_prompt=False, tools=[]) == "T"


def test_framing_is_rendered_once() -> None:
    template = ChatTemplate("{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}")
    assert template.framing == "<user:><assistant:>"
    assert template.framing is template.framing


def test_framing_error_is_raised_on_every_read() -> None:
    # The reference gives up on the baseline when the user message alone fails.
    source = "{% if messages|length == 1 %}{{ raise_exception('one') }}{% endif %}ok"
    template = ChatTemplate(source)
    assert template.render_reply(EA) == "ok"
    for _ in range(2):
        with pytest.raises(ChatTemplateError, match="one"):
            _ = template.framing


# Reading tokenizer directories --------------------------------------------------------------


def test_no_template_is_none(tmp_path: Path) -> None:
    assert ChatTemplate.from_tokenizer_dir(write_dir(tmp_path / "a", {})) is None
    (tmp_path / "empty").mkdir()
    assert ChatTemplate.from_tokenizer_dir(tmp_path / "empty") is None


def test_template_files_take_priority_over_the_config(tmp_path: Path) -> None:
    directory = write_dir(
        tmp_path, {"chat_template": "config"}, {"chat_template.jinja": "file {{ eos_token }}"}
    )
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert template.render([U], add_generation_prompt=False) == "file "
    (directory / "additional_chat_templates").mkdir()
    (directory / "additional_chat_templates" / "tool_use.jinja").write_text("tools", "utf-8")
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert sorted(template.names) == ["default", "tool_use"]
    assert template.render([U], add_generation_prompt=False, tools=[]) == "tools"


def test_config_list_of_named_templates(tmp_path: Path) -> None:
    named = [{"name": "default", "template": "D"}, {"name": "rag", "template": "R"}]
    template = ChatTemplate.from_tokenizer_dir(write_dir(tmp_path, {"chat_template": named}))
    assert template is not None
    assert template.names == ("default", "rag")
    assert template.render([U], add_generation_prompt=False, chat_template="rag") == "R"


def test_processor_chat_template_json_is_the_last_resort(tmp_path: Path) -> None:
    directory = write_dir(tmp_path, {}, {"chat_template.json": json.dumps({"chat_template": "P"})})
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert template.render([U], add_generation_prompt=False) == "P"
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": "C"}), "utf-8")
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert template.render([U], add_generation_prompt=False) == "C"


@pytest.mark.parametrize(
    ("config", "files", "fragment"),
    [
        ({"chat_template": "{% for %}"}, {}, "broken: TemplateSyntaxError"),
        ({}, {"chat_template.jinja": "{{ x"}, "broken: TemplateSyntaxError"),
        ({"chat_template": [{"name": "default", "template": "{% endif %}"}]}, {}, "'default'"),
        ({"chat_template": 3}, {}, "must be a string or a list"),
        ({"chat_template": [{"name": "x"}]}, {}, "list entries"),
    ],
)
def test_broken_templates_are_usage_errors(
    tmp_path: Path, config: dict[str, Any], files: dict[str, str], fragment: str
) -> None:
    directory = write_dir(tmp_path, config, files)
    with pytest.raises(UsageError, match=fragment) as info:
        ChatTemplate.from_tokenizer_dir(directory)
    assert "\n" not in str(info.value)


def test_malformed_config_is_a_usage_error(tmp_path: Path) -> None:
    directory = write_dir(tmp_path, {})
    (directory / "tokenizer_config.json").write_text("{nope", "utf-8")
    with pytest.raises(UsageError, match=r"tokenizer_config\.json is not valid JSON"):
        ChatTemplate.from_tokenizer_dir(directory)


SPECIAL_CONFIG: dict[str, Any] = {
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "special": True},
    "eos_token": "</s>",
    "pad_token": None,
    "add_bos_token": True,
    "image_token": "<img>",
    "extra_special_tokens": {"audio_token": "<aud>"},
    "chat_template": "{{ bos_token }}",
}


def test_special_tokens_from_the_config(tmp_path: Path) -> None:
    template = ChatTemplate.from_tokenizer_dir(write_dir(tmp_path, SPECIAL_CONFIG))
    assert template is not None
    assert template.special_tokens == {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "image_token": "<img>",
        "audio_token": "<aud>",
    }


def test_legacy_special_tokens_map(tmp_path: Path) -> None:
    legacy = {"bos_token": {"content": "<B>", "lstrip": False}, "unk_token": "<unk>"}
    files = {"special_tokens_map.json": json.dumps(legacy)}
    directory = write_dir(tmp_path, {"bos_token": "<s>", "chat_template": "x"}, files)
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert template.special_tokens == {"bos_token": "<B>", "unk_token": "<unk>"}
    # With added_tokens_decoder in the config the legacy file is not read.
    config = {"bos_token": "<s>", "chat_template": "x", "added_tokens_decoder": {}}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    template = ChatTemplate.from_tokenizer_dir(directory)
    assert template is not None
    assert template.special_tokens == {"bos_token": "<s>"}


def test_tokenizer_dir_resolves_like_load_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_dir(tmp_path / "model", {})
    assert tokenizer_dir(str(model)) == model
    assert tokenizer_dir(f"  {model / 'tokenizer.json'} ") == model
    assert tokenizer_dir(str(tmp_path / "missing")) is None
    assert tokenizer_dir("./missing") is None
    assert tokenizer_dir("") is None

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    repo = cache / "models--org--name"
    old = write_dir(repo / "snapshots" / "old", {})
    main = write_dir(repo / "snapshots" / "abc123", {})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n", "utf-8")
    assert tokenizer_dir("org/name") == main != old
    # the file load_tokenizer reads is the one beside the template
    assert (
        load_tokenizer("org/name").to_str()
        == Tokenizer.from_file(str(main / "tokenizer.json")).to_str()
    )
    assert tokenizer_dir("org/other") is None


# Messages and tool calls --------------------------------------------------------------------


def test_assistant_message_keys_only_when_non_empty() -> None:
    assert assistant_message("", None, None) == {"role": "assistant", "content": ""}
    assert assistant_message("x", "", []) == {"role": "assistant", "content": "x"}


def test_normalize_tool_calls_parses_object_arguments_only() -> None:
    calls = [
        tool_call("a", '{"x": 1, "y": [true, null]}', "c0"),
        tool_call("b", "not json"),
        tool_call("c", "[1, 2]"),
        tool_call("d", "NaN"),
        tool_call("e", {"already": "object"}),
        {"type": "function"},
    ]
    original = json.loads(json.dumps(calls))
    out = normalize_tool_calls(calls)
    assert calls == original  # the input is not modified
    assert out[0] == {
        "id": "c0",
        "type": "function",
        "function": {"name": "a", "arguments": {"x": 1, "y": [True, None]}},
    }
    assert list(out[0]) == ["id", "type", "function"]
    assert list(out[0]["function"]) == ["name", "arguments"]
    assert out[1:] == calls[1:]


def test_prompt_messages_normalise_history_tool_calls() -> None:
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("f", '{"a": 1}')]},
        {"role": "tool", "content": "r", "tool_calls": []},
    ]
    out = prompt_messages_for_template(history)
    assert out[0] is history[0]
    assert out[2] is history[2]
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert history[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_merge_tool_call_chunks_per_index() -> None:
    chunks = [
        [
            {
                "index": 1,
                "id": "c1",
                "type": "function",
                "function": {"name": "put", "arguments": ""},
            }
        ],
        [
            {"index": 0, "id": "c0", "function": {"name": "get", "arguments": '{"x"'}},
            {"index": 1, "function": {"arguments": "{}"}},
        ],
        [{"index": 0, "id": "", "function": {"name": "", "arguments": ": 1}"}}],
        [{"function": {"name": "get2"}}],  # no index: 0; a name replaces, never appends
    ]
    assert merge_tool_call_chunks(chunks) == (
        {"type": "function", "function": {"arguments": '{"x": 1}', "name": "get2"}, "id": "c0"},
        {"type": "function", "function": {"arguments": "{}", "name": "put"}, "id": "c1"},
    )
    whole = (tool_call("f", "{}", "i"),)
    assert merge_tool_call_chunks(whole) == whole
    assert merge_tool_call_chunks(None) is None
    assert merge_tool_call_chunks(()) is None


def summary_with_calls(
    calls: Sequence[ToolCall], after: Sequence[ToolCall], **fields: Any
) -> ResponseSummary:
    return msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        t_head=1,
        t_first=2,
        t_done=3,
        tool_calls=tuple(calls),
        tool_calls_after_first=tuple(after),
        finish_reason="tool_calls",
        complete=True,
        done=True,
        **fields,
    )


ROUND_TRIPS = {
    "split-arguments": (
        [ToolCall(0, "c0", "function", "get", '{"x": 1}'), ToolCall(1, "c1", "", "put", "{}")],
        [ToolCall(0, "c0", "function", "", " 1}"), ToolCall(1, "c1", "", "put", "{}")],
        {},
    ),
    "all-in-first-chunk": ([ToolCall(0, "", "function", "f", '{"a": "b"}')], [], {}),
    "after-reasoning": (
        [ToolCall(2, "z", "function", "late", '{"k": [1]}')],
        [ToolCall(2, "z", "function", "late", '{"k": [1]}')],
        {"reasoning": "hm", "reasoning_after_first": "m"},
    ),
}


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_tool_calls_round_trip_through_events(case: str, streaming: bool) -> None:
    calls, after, fields = ROUND_TRIPS[case]
    summary = summary_with_calls(calls, after, **fields)
    stored = text_model_output(summary, streaming=streaming).tool_calls
    merged = merge_tool_call_chunks(stored)
    assert merged is not None and len(merged) == len(calls)
    for call, got in zip(sorted(calls, key=lambda c: c.index), merged, strict=True):
        assert got.get("id") == (call.id or None)
        assert got["type"] == (call.type or "function")
        assert got["function"] == {"name": call.name, "arguments": call.arguments}
        if streaming:  # the key order the reference's merge_tool_calls gives
            assert [k for k in got if k != "id"] == ["type", "function"]
            assert list(got["function"]) == ["arguments", "name"]


# Equality with transformers.apply_chat_template ---------------------------------------------


@pytest.fixture(scope="module")
def auto_tokenizer() -> Callable[[Path], Any]:
    with warnings.catch_warnings():
        # transformers and its dependencies may warn on import (deprecations).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        transformers = pytest.importorskip(
            "transformers", minversion="5.5", reason="equality checks need transformers>=5.5"
        )
    loaded: dict[Path, Any] = {}

    def load(directory: Path) -> Any:
        if directory not in loaded:
            loaded[directory] = transformers.AutoTokenizer.from_pretrained(str(directory))
        return loaded[directory]

    return load


SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Find <pages> & 'quotes' in Zürich",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}

CALLS = [tool_call("get", '{"city": "Zürich", "html": "<b>&</b>"}', "call_0")]
TWO_CALLS = [
    tool_call("get", '{"x": 1}', "c0"),
    tool_call("put", "not json", "c1"),
    tool_call("arr", "[1, 2]", "c2"),
]

# name -> (messages, render kwargs)
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "user": ([{"role": "user", "content": "Hello"}], {}),
    "system-user": (
        [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}],
        {},
    ),
    "multi-turn": (
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
        {},
    ),
    "empty-user": ([U], {}),
    "framing": ([U, EA], {}),
    "reply-content": ([U, assistant_message("The answer.", None, None)], {}),
    "reply-reasoning": ([U, assistant_message("hi", "\nab\n", None)], {}),
    "reply-tool-call": ([U, assistant_message("", "think", CALLS)], {}),
    "reply-tool-calls": ([U, assistant_message("Calling.", None, TWO_CALLS)], {}),
    "tool-response": (
        [
            {"role": "user", "content": "weather?"},
            assistant_message("", None, CALLS),
            {"role": "tool", "content": '{"t": 21}'},
        ],
        {},
    ),
    "tools": ([{"role": "user", "content": "find"}], {"tools": [SEARCH_TOOL]}),
    "tools-empty": ([{"role": "user", "content": "x"}], {"tools": []}),
    "tools-history": (
        [
            {"role": "user", "content": "weather?"},
            assistant_message("Let me see.", "plan", TWO_CALLS),
            {"role": "tool", "content": "sunny"},
        ],
        {"tools": [SEARCH_TOOL]},
    ),
    "kwargs": (
        [{"role": "user", "content": "x"}],
        {
            "chat_template_kwargs": {
                "enable_thinking": False,
                "date_string": "26 Jul 2024",
                "bos_token": "<BOS>",
                "documents": [{"title": "T", "text": "body"}],
            }
        },
    ),
    "custom-tools": (
        [{"role": "user", "content": "x"}],
        {"chat_template_kwargs": {"custom_tools": [SEARCH_TOOL]}},
    ),
    "named-template": ([{"role": "user", "content": "x"}], {"chat_template": "tool_use"}),
    "roles-do-not-alternate": (
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        {},
    ),
}


def apply_with_transformers(
    tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any
) -> str:
    """The reference's call (token_metrics.py _token_count_prompt), untokenized."""
    call: dict[str, Any] = dict(kwargs.pop("chat_template_kwargs", None) or {})
    call.update(kwargs)
    return str(
        tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **call
        )
    )


@pytest.mark.parametrize("add_generation_prompt", [False, True], ids=["no-prompt", "prompt"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ["char_chat", "llama", "qwen"])
def test_render_equals_apply_chat_template(
    auto_tokenizer: Callable[[Path], Any],
    template_dirs: dict[str, Path],
    name: str,
    case: str,
    add_generation_prompt: bool,
) -> None:
    directory = template_dirs[name]
    messages, kwargs = CASES[case]
    if "chat_template" in kwargs and name != "qwen":
        pytest.skip("only the qwen dir has named templates")
    ours = ChatTemplate.from_tokenizer_dir(directory)
    assert ours is not None
    tokenizer = auto_tokenizer(directory)
    try:
        expected = apply_with_transformers(
            tokenizer, json.loads(json.dumps(messages)), add_generation_prompt, **kwargs
        )
    except Exception as exc:  # the template failed there: it must fail here the same way
        with pytest.raises(ChatTemplateError) as info:
            ours.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        assert str(exc) in str(info.value)
        return
    assert ours.render(messages, add_generation_prompt=add_generation_prompt, **kwargs) == expected


@pytest.mark.parametrize("name", ["char_chat", "llama", "qwen"])
def test_counts_equal_the_references_token_count_message(
    auto_tokenizer: Callable[[Path], Any], template_dirs: dict[str, Path], name: str
) -> None:
    """Our count (render, tokenize with ``tokenizers``, subtract the framing)
    against the reference's (apply_chat_template tokenized, minus the user
    prefix and the empty-assistant baseline)."""
    directory = template_dirs[name]
    ours = ChatTemplate.from_tokenizer_dir(directory)
    assert ours is not None
    encoder = load_tokenizer(str(directory))
    tokenizer = auto_tokenizer(directory)

    def reference_tokens(messages: list[dict[str, Any]]) -> int:
        ids = tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=False, return_dict=False
        )
        return len(ids)

    prefix = reference_tokens([U])
    baseline = reference_tokens([U, EA]) - prefix
    framing = count(encoder, ours.framing)
    for content, reasoning, calls in [
        ("hi", "ab", [tool_call("get", '{"x": 1}')]),
        ("", "only reasoning", None),
        ("", None, TWO_CALLS),
        ("<|im_end|> and <s> as text", None, None),
    ]:
        message = assistant_message(content, reasoning, calls)
        reference = max(0, reference_tokens([U, message]) - prefix - baseline)
        assert max(0, count(encoder, ours.render_reply(message)) - framing) == reference


def test_special_tokens_equal_transformers_special_tokens_map(
    auto_tokenizer: Callable[[Path], Any], tmp_path: Path
) -> None:
    directory = write_dir(tmp_path, SPECIAL_CONFIG)
    ours = ChatTemplate.from_tokenizer_dir(directory)
    assert ours is not None
    assert ours.special_tokens == auto_tokenizer(directory).special_tokens_map


# The field a template renders reasoning from (spec §1.2) ------------------------------

THINKING_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>"
    "{% if m.thinking %}<|analysis|>{{ m.thinking }}<|final|>{% endif %}"
    "{{ m.content }}<|end|>{% endfor %}"
)


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (THINKING_TEMPLATE, "thinking"),  # gpt-oss: message.thinking
        (THINKING_TEMPLATE.replace("m.thinking", "m['thinking']"), "thinking"),
        (THINKING_TEMPLATE.replace("thinking", "reasoning_content"), "reasoning_content"),
        # reads both (transformers >= 5.24 copies one into the other): the reference's first
        (THINKING_TEMPLATE + "{{ messages[0].reasoning_content }}", "reasoning_content"),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", "reasoning_content"),
    ],
)
def test_the_reasoning_goes_in_the_field_the_template_reads(template: str, field: str) -> None:
    chat = ChatTemplate(template)
    assert chat.reasoning_field == field
    message = assistant_message("hi", "why", None, reasoning_field=chat.reasoning_field)
    assert message[field] == "why"


def test_a_template_that_reads_thinking_counts_the_reasoning() -> None:
    # spec §1.2: the output as the template renders it; a gpt-oss template
    # renders message.thinking, so the analysis channel is in the OSL
    from mlpe_fast.metrics.count_inputs import MessageText
    from mlpe_fast.metrics.tokens import CountJob, TokenCounter

    counter = TokenCounter(
        load_tokenizer(str(CHAR_CHAT)), template=ChatTemplate(THINKING_TEMPLATE), live=False
    )
    try:
        counter.submit(CountJob(osl=MessageText("hi", "abc")))
        counter.submit(CountJob(osl=MessageText("hi")))
        counts = counter.finish()
    finally:
        counter.close()
    # one token per character of the char tokenizer: the reasoning adds what
    # the template renders of it
    assert int(counts.osl[0]) - int(counts.osl[1]) == len("<|analysis|>abc<|final|>")
