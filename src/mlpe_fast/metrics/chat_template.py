"""Chat-template rendering equal to ``transformers``' ``apply_chat_template``.

MLPerf Endpoints counts tokens through the model's reference chat template
(``mlperf-endpoints-spec.md`` §1.2, rules §2.8):

* **OSL / TPOT tokens** of a response with reasoning or tool calls: render
  (a) an empty user message plus the rebuilt assistant message and (b) an
  empty user message plus an empty assistant message, both without the
  generation prompt, tokenize both; the count is ``max(0, len(a) - len(b))``;
* **ISL** of a chat request: the messages as sent, rendered with the
  generation prompt, the request's ``tools`` and ``chat_template_kwargs``.

The reference client renders with ``transformers`` (``AutoTokenizer
.apply_chat_template``; transformers 5.5.0 is its pin).  Importing
transformers costs seconds and hundreds of MB, so this module renders the
same Jinja template the same way with ``jinja2`` alone.  What transformers
does, and what is done here (``transformers/utils/chat_template_utils.py``
``_compile_jinja_template``, ``render_jinja_template``;
``tokenization_utils_base.py`` ``apply_chat_template``,
``get_chat_template``, ``_from_pretrained``, ``special_tokens_map``):

* the environment is Jinja's ``ImmutableSandboxedEnvironment`` (chat
  templates come from model repositories and are untrusted code) with
  ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension
  (``{% break %}``, ``{% continue %}``) and a ``{% generation %}`` block
  that renders its body unchanged (transformers uses it to mark assistant
  tokens for training masks);
* ``tojson`` is ``json.dumps`` with ``ensure_ascii=False`` and the
  ``indent``, ``separators`` and ``sort_keys`` arguments (Jinja's own filter
  would escape HTML characters); globals ``raise_exception(message)``
  (raises a template error) and ``strftime_now(format)`` (local time);
  ``namespace`` refuses names starting with ``_`` and ``dict`` only builds
  dicts, as recent transformers hardens them;
* the variables are the tokenizer's special tokens (``bos_token``,
  ``eos_token``, ... as strings), then the caller's keyword arguments over
  them, then ``messages``, ``tools`` (None when not given), ``documents``
  and ``add_generation_prompt``;
* the rendered text is tokenized with ``add_special_tokens=False``: BOS and
  other special tokens count only when the template writes them.

The template is read from the tokenizer directory as ``from_pretrained``
reads it: ``chat_template.jinja`` (and named templates in
``additional_chat_templates/*.jinja``) take priority over the
``chat_template`` entry of ``tokenizer_config.json`` (a string, or a list of
``{"name", "template"}``).  Among named templates a request with ``tools``
uses ``"tool_use"`` when there is one, else ``"default"``.

Not reproduced: transformers' conversion of Python callables in ``tools``
to JSON schemas (requests carry schemas), ``continue_final_message``, and
special tokens that a tokenizer *class* fills in by default when the files
do not name them (and the ``pad_token`` a ``tokenizer.json`` padding
section implies).  Transformers 5.24 and later also copy
``reasoning_content`` into ``thinking`` (for gpt-oss templates) and drop
``None`` values from messages; the reference's pin (5.5.0) does neither.
This module puts a reply's reasoning in the field the template reads
(:attr:`ChatTemplate.reasoning_field`, spec §1.2: the output "as the
template renders it"): ``thinking`` for gpt-oss templates, so the analysis
channel counts in OSL, TPOT and system tokens/s, where the reference's pin
leaves it out; ``reasoning_content`` for the others, as the reference.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MlpeError, UsageError
from .hf_cache import cached_snapshots, looks_like_path, repo_cache_dir

if TYPE_CHECKING:
    import jinja2

__all__ = (
    "EMPTY_ASSISTANT_MESSAGE",
    "EMPTY_USER_MESSAGE",
    "REASONING_FIELDS",
    "ChatTemplate",
    "ChatTemplateError",
    "assistant_message",
    "normalize_tool_calls",
    "prompt_messages_for_template",
    "tokenizer_dir",
)

#: The user message that precedes the assistant message being counted: some
#: templates reject a conversation that starts with the assistant
#: (reference ``token_metrics.py`` ``_PREFIX_USER_MSG``).
EMPTY_USER_MESSAGE: Mapping[str, str] = {"role": "user", "content": ""}

#: The assistant message of the framing, whose rendering is subtracted.
EMPTY_ASSISTANT_MESSAGE: Mapping[str, str] = {"role": "assistant", "content": ""}

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
#: A processor's template file (``{"chat_template": ...}``).  ``AutoTokenizer``
#: does not read it; it is used here only when nothing else names a template.
PROCESSOR_CHAT_TEMPLATE_FILE = "chat_template.json"

# Arguments of apply_chat_template that it consumes itself: when they come in
# chat_template_kwargs they never reach the template.
_CALL_ONLY_ARGUMENTS = frozenset(
    {
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "sanitize_control_tokens",
    }
)

_MAX_MESSAGE = 300


class ChatTemplateError(MlpeError):
    """The chat template could not render a conversation.

    Raised by :meth:`ChatTemplate.render` with a one-line message: the
    template called ``raise_exception``, failed on the data (a missing key,
    a value of the wrong type), or asked for something the sandbox forbids.
    The reference client then counts a plain-text fallback instead
    (``token_metrics.py`` ``_warn_template_fallback``).
    """


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."


def _describe(exc: BaseException) -> str:
    lineno = getattr(exc, "lineno", None)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    where = f" (template line {lineno})" if isinstance(lineno, int) else ""
    return _one_line(f"{type(exc).__name__}: {message}{where}")


# The Jinja environment ----------------------------------------------------------------


def _import_jinja() -> None:
    try:
        import jinja2  # noqa: F401  (a runtime dependency; imported on first use)
    except ImportError as exc:
        raise UsageError(
            "cannot render the model's chat template: the 'jinja2' package is not installed; "
            "install it with: pip install 'jinja2>=3.1'"
        ) from exc


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: plain ``json.dumps``, non-ASCII kept as is."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    """The local time now, formatted (Llama 3.x templates print today's date)."""
    return datetime.datetime.now().strftime(format)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """The one sandboxed environment every template is compiled in."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.parser
    import jinja2.runtime
    import jinja2.sandbox
    import jinja2.utils

    class GenerationBlock(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body, in a
        scope of its own (a call block, as transformers compiles it)."""

        tags = {"generation"}  # noqa: RUF012  (jinja2's own class attribute)

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: jinja2.runtime.Macro) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    class SafeNamespace(jinja2.utils.Namespace):
        """``namespace(...)`` that refuses attribute names starting with ``_``."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attributes = dict(*rest, **kwargs)
            for name in attributes:
                SafeNamespace.check_name(name)
            jinja2.utils.Namespace.__init__(self, attributes)

        def __setitem__(self, name: str, value: Any) -> None:
            SafeNamespace.check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check_name(name: object) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates may not set the namespace attribute {name!r}"
                )

    class SafeDict:
        """``dict(...)`` and ``dict.fromkeys(...)``, and nothing else of the type."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
            return dict.fromkeys(keys, value)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = SafeNamespace
    env.globals["dict"] = SafeDict()
    return env


@functools.lru_cache(maxsize=64)
def _compile(source: str) -> jinja2.Template:
    """Compiles a template once (requests may name an inline template)."""
    return _environment().from_string(source)


# Reading a tokenizer directory ----------------------------------------------------------


def _read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {_one_line(str(exc))}") from exc
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({_one_line(str(exc))})") from exc
    if not isinstance(value, dict):
        raise UsageError(f"{path} does not hold a JSON object")
    return value


def _templates_from_value(value: object, origin: str) -> str | dict[str, str] | None:
    """A ``chat_template`` entry: a string, or named templates (the list of
    ``{"name", "template"}`` that tokenizer_config.json stores, or a dict)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    named: dict[str, str] = {}
    if isinstance(value, list):
        for entry in value:
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)
            ):
                raise UsageError(
                    f"{origin}: chat_template list entries must be "
                    '{"name": <string>, "template": <string>}'
                )
            named[entry["name"]] = entry["template"]
    elif isinstance(value, dict):
        for name, template in value.items():
            if not isinstance(template, str):
                raise UsageError(f"{origin}: chat template {name!r} is not a string")
            named[name] = template
    else:
        raise UsageError(
            f"{origin}: chat_template must be a string or a list of named templates, "
            f"not {type(value).__name__}"
        )
    return named or None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read chat template {path}: {_one_line(str(exc))}") from exc


def _templates_from_files(directory: Path) -> str | dict[str, str] | None:
    """``chat_template.jinja`` ("default") and ``additional_chat_templates/
    NAME.jinja``: a lone default is the template, several are named."""
    named: dict[str, str] = {}
    default = directory / CHAT_TEMPLATE_FILE
    if default.is_file():
        named["default"] = _read_text(default)
    extra = directory / CHAT_TEMPLATE_DIR
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            named[path.name.removesuffix(".jinja")] = _read_text(path)
    if not named:
        return None
    if list(named) == ["default"]:
        return named["default"]
    return named


def _token_text(value: object) -> str | None:
    """A special token as a string: the string itself, or the ``content`` of
    an ``AddedToken`` as JSON stores it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _special_tokens(directory: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """The special tokens a template sees (transformers 5 ``special_tokens_map``).

    The named tokens (``bos_token``, ``eos_token``, ``unk_token``,
    ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``) and the
    model-specific ones (any other ``*_token`` key with a token value, and a
    dict of ``extra_special_tokens``), from ``tokenizer_config.json``;
    ``special_tokens_map.json`` overrides them when the config has no
    ``added_tokens_decoder`` (its legacy role in ``_from_pretrained``).
    """
    values: dict[str, Any] = dict(config)
    if "additional_special_tokens" in values:
        values.setdefault("extra_special_tokens", values.pop("additional_special_tokens"))
    if "added_tokens_decoder" not in config:
        legacy = _read_json_object(directory / SPECIAL_TOKENS_MAP_FILE) or {}
        if "additional_special_tokens" in legacy:
            legacy.setdefault("extra_special_tokens", legacy.pop("additional_special_tokens"))
        values.update(legacy)
    tokens: dict[str, str] = {}
    for key, value in values.items():
        text = _token_text(value)
        if key.endswith("_token") and text is not None:
            tokens[key] = text
    extra = values.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            text = _token_text(value)
            if text is not None:
                tokens[str(key)] = text
    return tokens


# The template ---------------------------------------------------------------------------


REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
"""Message fields chat templates render reasoning from, in the order one is
chosen when a template reads several: the reference's field, gpt-oss's
(its analysis channel), a third seen in the wild."""


class ChatTemplate:
    """A model's chat template(s), compiled, with its special tokens.

    Args:
        templates: the template source, or named templates (``"default"``,
            ``"tool_use"``, ...), as transformers holds ``chat_template``.
        special_tokens: template variables such as ``bos_token`` (strings).
        source: where the template came from, for error messages.

    Raises:
        UsageError: jinja2 is missing or a template does not compile.
    """

    def __init__(
        self,
        templates: str | Mapping[str, str],
        special_tokens: Mapping[str, str] | None = None,
        *,
        source: str = "chat template",
    ) -> None:
        _import_jinja()
        self.source = source
        self.special_tokens: dict[str, str] = dict(special_tokens or {})
        self._single: jinja2.Template | None = None
        self._named: dict[str, jinja2.Template] | None = None
        self._framing: str | None = None
        self._framing_error: str | None = None
        self._sources = (templates,) if isinstance(templates, str) else tuple(templates.values())
        if isinstance(templates, str):
            self._single = self._compile_or_fail(templates, None)
        else:
            self._named = {
                name: self._compile_or_fail(text, name) for name, text in templates.items()
            }

    def _compile_or_fail(self, text: str, name: str | None) -> jinja2.Template:
        try:
            return _compile(text)
        except Exception as exc:
            which = f"chat template {name!r}" if name is not None else "chat template"
            raise UsageError(f"the {which} of {self.source} is broken: {_describe(exc)}") from exc

    @classmethod
    def from_tokenizer_dir(cls, path: str | Path) -> ChatTemplate | None:
        """The chat template of a tokenizer directory; None if it has none.

        Reads the files as ``AutoTokenizer.from_pretrained`` does (module
        docstring); ``chat_template.json`` is used only when neither
        ``chat_template.jinja`` nor ``tokenizer_config.json`` holds a
        template (processors read it; ``AutoTokenizer`` does not, so the
        reference client would then have no template).

        Raises:
            UsageError: a template is present but broken (or unreadable), or
                jinja2 is missing; one line naming the file.
        """
        directory = Path(path)
        config_path = directory / TOKENIZER_CONFIG_FILE
        config = _read_json_object(config_path) or {}
        templates = _templates_from_files(directory)
        if templates is None:
            templates = _templates_from_value(config.get("chat_template"), str(config_path))
        if templates is None:
            processor_path = directory / PROCESSOR_CHAT_TEMPLATE_FILE
            processor = _read_json_object(processor_path) or {}
            templates = _templates_from_value(processor.get("chat_template"), str(processor_path))
        if templates is None:
            return None
        return cls(templates, _special_tokens(directory, config), source=str(directory))

    @functools.cached_property
    def reasoning_field(self) -> str:
        """The message field the template renders a reply's reasoning from:
        the first of :data:`REASONING_FIELDS` that any of its templates
        reads off an object (``message.thinking``, ``message['thinking']``),
        else ``reasoning_content``, the reference's."""
        from jinja2 import nodes

        read: set[str] = set()
        for source in self._sources:
            tree = _environment().parse(source)
            read.update(node.attr for node in tree.find_all(nodes.Getattr))
            for item in tree.find_all(nodes.Getitem):
                if isinstance(item.arg, nodes.Const) and isinstance(item.arg.value, str):
                    read.add(item.arg.value)
        return next((f for f in REASONING_FIELDS if f in read), REASONING_FIELDS[0])

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the templates; empty for a single unnamed template."""
        return tuple(self._named) if self._named is not None else ()

    def _select(self, chosen: object, tools: object) -> jinja2.Template:
        """transformers' ``get_chat_template``: a name, else an inline
        template, else ``tool_use`` when tools are given, else ``default``."""
        if chosen is not None and not isinstance(chosen, str):
            raise ChatTemplateError(f"chat_template must be a string, not {type(chosen).__name__}")
        named = self._named
        if named is not None:
            if chosen is not None and chosen in named:
                return named[chosen]
            if chosen is None:
                if tools is not None and "tool_use" in named:
                    return named["tool_use"]
                if "default" in named:
                    return named["default"]
                raise ChatTemplateError(
                    f"{self.source} has several chat templates and none is named 'default' "
                    f"(names: {', '.join(sorted(named))})"
                )
        elif chosen is None:
            assert self._single is not None
            return self._single
        try:
            return _compile(chosen)
        except Exception as exc:
            raise ChatTemplateError(
                f"the request's chat template is broken: {_describe(exc)}"
            ) from exc

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> str:
        """The conversation as the template writes it (not tokenized).

        Equal to ``tokenizer.apply_chat_template(messages, tools=tools,
        add_generation_prompt=..., tokenize=False, chat_template=...,
        tool_choice=..., **chat_template_kwargs)``, the call the reference
        client makes for ISL (``token_metrics.py`` ``_token_count_prompt``).
        ``chat_template`` names one of the model's templates or is a
        template itself; ``tools``, ``chat_template`` and ``tool_choice``
        win over the same keys in ``chat_template_kwargs``.  Messages are
        rendered as given: normalise tool calls in a prompt with
        :func:`prompt_messages_for_template` first, as the reference does.

        Raises:
            ChatTemplateError: the template failed (one line).
        """
        variables: dict[str, Any] = dict(chat_template_kwargs or {})
        if tools is not None:
            variables["tools"] = list(tools)
        if chat_template is not None:
            variables["chat_template"] = chat_template
        if tool_choice is not None:
            variables["tool_choice"] = tool_choice
        tools_value = variables.pop("tools", None)
        documents = variables.pop("documents", None)
        chosen = variables.pop("chat_template", None)
        variables.pop("add_generation_prompt", None)
        if variables.pop("continue_final_message", False):
            raise ChatTemplateError("continue_final_message is not supported")
        for name in _CALL_ONLY_ARGUMENTS:
            variables.pop(name, None)
        if "messages" in variables:
            raise ChatTemplateError("chat_template_kwargs may not set 'messages'")
        template = self._select(chosen, tools_value)
        if tools_value is not None:
            tools_value = list(tools_value)
            if not all(isinstance(tool, Mapping) for tool in tools_value):
                raise ChatTemplateError("tools must be JSON schemas (objects)")
        if documents is not None and not all(isinstance(d, Mapping) for d in documents):
            raise ChatTemplateError("documents must be objects with 'title' and 'text' keys")
        context = {**self.special_tokens, **variables}
        context["messages"] = list(messages)
        context["tools"] = tools_value
        context["documents"] = documents
        context["add_generation_prompt"] = add_generation_prompt
        try:
            return template.render(context)
        except Exception as exc:  # a template can fail in any way; report it
            raise ChatTemplateError(
                f"chat template of {self.source} failed: {_describe(exc)}"
            ) from exc

    def render_reply(self, message: Mapping[str, Any]) -> str:
        """An assistant message after :data:`EMPTY_USER_MESSAGE`, without the
        generation prompt: conversation (a) of spec §1.2."""
        return self.render([EMPTY_USER_MESSAGE, message], add_generation_prompt=False)

    @property
    def framing(self) -> str:
        """The empty user and empty assistant messages rendered (conversation
        (b) of spec §1.2): what is subtracted from every message count.

        Rendered once.  When the template cannot render it (nor the user
        message alone) the reference logs the failure and subtracts nothing
        (``token_metrics.py`` ``_load_tokenizer``); here the error is raised
        on every read, for the caller to do the same.

        Raises:
            ChatTemplateError: the template failed (one line).
        """
        if self._framing is None and self._framing_error is None:
            try:
                # The reference renders the user message alone first (its
                # prefix) and gives up on the baseline if either fails.
                self.render([EMPTY_USER_MESSAGE], add_generation_prompt=False)
                self._framing = self.render_reply(EMPTY_ASSISTANT_MESSAGE)
            except ChatTemplateError as exc:
                self._framing_error = str(exc)
        if self._framing_error is not None:
            raise ChatTemplateError(self._framing_error)
        assert self._framing is not None
        return self._framing

    def __repr__(self) -> str:
        names = f" {list(self.names)}" if self._named is not None else ""
        return f"<ChatTemplate{names} from {self.source}>"


# Messages ---------------------------------------------------------------------------------


def normalize_tool_calls(tool_calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls for a template: ``function.arguments`` parsed from its JSON
    string when that is an object (spec §1.2; reference ``token_metrics.py``
    ``_normalize_tool_calls_for_template``).

    Templates in the Hermes style iterate the arguments as a mapping; a
    string that is not JSON, or JSON that is not an object, is kept as is.
    Every call is a shallow copy with the same keys in the same order; the
    input is not modified.
    """
    normalized: list[dict[str, Any]] = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                copy = dict(call)
                copy["function"] = {**function, "arguments": parsed}
                normalized.append(copy)
                continue
        normalized.append(dict(call))
    return normalized


def assistant_message(
    content: str,
    reasoning: str | None,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    *,
    reasoning_field: str = REASONING_FIELDS[0],
) -> dict[str, Any]:
    """The assistant message whose tokens are counted (spec §1.2).

    Built as the reference builds it (``token_metrics.py``
    ``_token_count_message``): ``role`` and ``content`` always (``""`` for
    none), the reasoning only when non-empty, in ``reasoning_field`` (the
    field the template reads: :attr:`ChatTemplate.reasoning_field`),
    ``tool_calls`` only when there are some, each through
    :func:`normalize_tool_calls`.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if reasoning:
        message[reasoning_field] = reasoning
    if tool_calls:
        message["tool_calls"] = normalize_tool_calls(tool_calls)
    return message


def prompt_messages_for_template(
    messages: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """Prompt messages with their tool calls normalised for the template
    (reference ``_normalize_prompt_messages_for_template``); the messages
    themselves are not modified."""
    normalized: list[Mapping[str, Any]] = []
    for message in messages:
        tool_calls = message.get("tool_calls")
        if isinstance(tool_calls, list | tuple) and tool_calls:
            normalized.append({**message, "tool_calls": normalize_tool_calls(tool_calls)})
        else:
            normalized.append(message)
    return normalized


# Where the template lives -------------------------------------------------------------------


def tokenizer_dir(name_or_path: str) -> Path | None:
    """The directory whose files describe the tokenizer ``name_or_path``
    names, resolved as :func:`mlpe_fast.metrics.tokens.load_tokenizer`
    resolves it: a directory is itself, a file (``tokenizer.json``) its
    directory, a Hugging Face id the cached hub snapshot that holds
    ``tokenizer.json`` (``refs/main`` first).  None when nothing matches;
    loading the tokenizer then reports why.
    """
    name = name_or_path.strip()
    if not name:
        return None
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    if looks_like_path(name):
        return None
    for snapshot in cached_snapshots(repo_cache_dir(name)):
        if (snapshot / "tokenizer.json").is_file():
            return snapshot
    return None
