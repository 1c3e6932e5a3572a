"""Request bodies: encoded once per sample, salted at issue time by splicing.

Each sample's JSON body is encoded once, with msgspec, before the load
starts (architecture.md, "The request body is pre-encoded; the salt is
spliced into it at issue time").  When salting is on, the body is kept as
two byte strings split right after the opening quote of the string that
receives the salt, so issuing is one join::

    body = head + b"[" + 16 hex + b"] " + tail

The salt is ASCII and needs no JSON escaping, so the result is the JSON
that encoding the salted prompt would give, byte for byte.

Bodies (OpenAI API, as the reference client's adapters build them,
``mlcommons/endpoints:src/inference_endpoint/openai/openai_msgspec_adapter.py``
and ``completions_adapter.py``):

* chat (``api_type="openai"``, ``POST /v1/chat/completions``)::

    {"model", "messages": [system?, user] or the sample's messages,
     "temperature"?, "max_completion_tokens", "max_tokens"? (--send-max-tokens),
     "stream"?, "stream_options"?,
     "seed"?, "top_p"?, "top_k"?, "repetition_penalty"?,
     "presence_penalty"?, "frequency_penalty"?, "chat_template_kwargs"?}

  ``stream`` is sent only when streaming (the reference leaves it out
  otherwise); the salt goes into the user message's content, after the
  system message, or into the first user message of a ``messages`` sample.

* completions (``api_type="openai-completions"``, ``POST /v1/completions``)::

    {"model", "prompt", "stream", "stream_options"?, "max_tokens",
     "skip_special_tokens"?, sampling...}

  ``prompt`` is the sample's text, or its token ids (``[id, ...]``) for a
  pre-tokenized dataset (``parser.input_tokens``), as the reference's
  ``OpenAITextCompletionsAdapter`` sends them: the server applies no chat
  template (gpt-oss-120b's Harmony format is in the ids already).  A token
  body carries ``"skip_special_tokens": false`` (the reference's gpt-oss
  setting): the output keeps its special tokens -- the Harmony channel
  markers -- so the analysis channel is in the text and in the OSL count.
  Token ids are salted in the token stream (spec §2.5): the salt's ids
  go where :mod:`.token_salt` places them in each sample (after the user
  turn's header, or first), and the body is split there as a text body is
  split at its salt::

    head = ...,"prompt":[<ids before>,   tail = ,<ids after>],...
    body = head + b"17,4,98" + tail      (the salt's ids, comma-joined)

  (``head`` ends with ``[`` when the salt goes first; ``tail`` starts with
  ``]`` when it goes last), so issuing is still one join plus the encoding
  of 19 characters.  The reference refuses to salt an ``input_tokens``
  sample (``dataset_manager/dataset.py``, ``_check_unsaltable``).

* SGLang's native route (``api_type="sglang"``, ``POST /generate``), as the
  reference's ``SGLangGenerateAdapter`` builds it
  (``mlcommons/endpoints:src/inference_endpoint/sglang/types.py``)::

    {"input_ids": [id, ...],
     "sampling_params": {"max_new_tokens", "temperature"?, "sampling_seed"?,
                         "top_p"?, "top_k"?, "repetition_penalty"?,
                         "presence_penalty"?, "frequency_penalty"?,
                         "skip_special_tokens": false},
     "stream"}

  for pre-tokenized datasets only: the reference encodes every text
  dataset into Harmony token ids before it sends one (``Harmonize()``), so a
  text prompt (SGLang's ``text``, which no chat template would wrap) is
  refused.  The ids are salted in the token stream and spliced as in a
  completions body (``input_ids`` takes the place of ``prompt``).  The
  sampling parameters go where SGLang reads them, in ``sampling_params``,
  under SGLang's names (``seed`` is ``sampling_seed``; its
  ``SamplingParams`` refuses unknown names); ``skip_special_tokens:
  false`` keeps gpt-oss's Harmony markers in the text, as the completions
  body does, so that the OSL counts what ``completion_tokens`` counts and
  the first token is the first token generated.  ``chat_template_kwargs``
  has no place: no template is applied to ids.

A dataset's ``generation_config_override`` (``load/dataset.py``
:class:`~mlpe_fast.load.dataset.GenerationOverride`) replaces the run's
output cap and sampling settings in that dataset's bodies.  The run's
``--extra-body`` fields go last in every body (``ignore_eos``,
``min_tokens``, a vendor's own); the fields mlpe-fast sets itself are
refused when the run is configured (``config/request_extras.py``), so the
only field both may write is a token body's ``skip_special_tokens``, which
is then the user's.

``stream_options: {"include_usage": true}`` goes with every streamed
request, so the server's token counts can cross-check ours (the reference
never sends it, reference-client.md §0).

Sample order is the reference's (``load_generator/sample_order.py``):
performance and warmup phases shuffle the indices without replacement with
``random.Random(seed)`` and reshuffle the same list in place when it runs
out; accuracy phases go 0, 1, 2, ... in order and are never salted.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import msgspec

from ..errors import UsageError
from .dataset import Dataset, Sample
from .salt import Salter
from .token_salt import TokenSalt, TokenSalting, ids_json, token_salting

if TYPE_CHECKING:
    from ..config import RunConfig

__all__ = (
    "CHAT_ROUTE",
    "COMPLETIONS_ROUTE",
    "SGLANG_ROUTE",
    "BodyTemplate",
    "IssuedPrompts",
    "IssuedRequest",
    "Prompt",
    "RequestFeed",
    "TokenPrompt",
    "build_body_templates",
    "default_route",
    "prompt_of",
    "salted_body",
    "sequential_order",
    "shuffled_order",
    "templates_for",
    "token_salting_for",
)

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"
SGLANG_ROUTE = "/generate"


class TokenPrompt(msgspec.Struct, frozen=True, gc=False):
    """A pre-tokenized prompt as sent: the ISSUED line's ``token_ids``."""

    token_ids: tuple[int, ...]


Prompt = str | tuple[dict[str, Any], ...] | TokenPrompt
"""What a query asked, as the reference's ISSUED ``PromptData`` holds it: the
(salted) user prompt text -- without the system prompt, as the reference --
the (salted) chat messages, or the token ids of a pre-tokenized sample
(their number is the ISL: no tokenizer pass).  It is the input of the ISL
count."""

Phase = Literal["performance", "accuracy", "warmup"]

# Stands in for the salted string while a body is encoded; found again in the
# encoded bytes to split the body.  NULs are escaped by JSON, so this cannot
# collide with the model name or an encoding artefact.
_PLACEHOLDER = "\x00mlpe-fast-salt-splice\x00"
_PLACEHOLDER_JSON = msgspec.json.encode(_PLACEHOLDER)

_SAMPLING_ORDER = (
    "seed",
    "top_p",
    "top_k",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "chat_template_kwargs",
)
# SGLang's names of the sampling parameters it spells otherwise
# (sglang/srt/sampling/sampling_params.py).
_SGLANG_NAMES = {"seed": "sampling_seed"}


class IssuedRequest(NamedTuple):
    """One query ready to go: dataset index, body bytes, the prompt for ISL."""

    sample_index: int
    body: bytes
    prompt: Prompt


class BodyTemplate(msgspec.Struct, frozen=True, gc=False):
    """A pre-encoded body.  Salted: ``head + prefix + tail``; unsalted: ``head``.

    ``token_salt`` is set for a salted token-id body: its prefix is the
    salt's ids (:meth:`~.token_salt.TokenSalt.salt_json`), not its text.
    """

    head: bytes
    tail: bytes = b""
    token_salt: TokenSalt | None = None

    def render(self, prefix: bytes | None = None) -> bytes:
        """The body bytes, with ``prefix`` (``b"[<hex>] "``) spliced in if given."""
        if prefix is None:
            return self.head + self.tail if self.tail else self.head
        return b"".join((self.head, prefix, self.tail))


# Body encoding ---------------------------------------------------------------------


def build_body_templates(
    dataset: Dataset,
    *,
    model: str,
    api_type: str = "openai",
    stream: bool = True,
    max_output_tokens: int = 1024,
    sampling: Mapping[str, Any] | None = None,
    salt: bool = True,
    send_max_tokens: bool = False,
    token_salting: TokenSalting | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> tuple[BodyTemplate, ...]:
    """Encodes every sample's body once.

    Args:
        dataset: the loaded samples.
        model: the ``model`` field.
        api_type: "openai" (chat completions), "openai-completions" or
            "sglang" (``/generate``, pre-tokenized datasets only).
        stream: streamed responses (``stream``, ``stream_options``).
        max_output_tokens: ``max_completion_tokens`` (chat) or ``max_tokens``
            (a sample's own ``output_tokens`` instead, where it has one).
        sampling: optional ``temperature``, ``seed``, ``top_p``, ``top_k``,
            ``repetition_penalty``, ``presence_penalty``,
            ``frequency_penalty``, ``chat_template_kwargs``; None values are
            left out.
        salt: split each body where the salt goes.
        send_max_tokens: a chat body carries ``max_tokens`` beside
            ``max_completion_tokens`` (for servers that honour only the
            older field; ``metrics/answers.py`` detects them).
        token_salting: where the salt goes in the samples of a
            pre-tokenized dataset (:func:`token_salting_for`); needed to
            salt one.
        extra_body: fields merged into every body after its own
            (``--extra-body``; the configuration has refused the fields
            mlpe-fast owns, ``config/request_extras.py``).

    Raises:
        UsageError: a sample the API type cannot send, or cannot salt.
    """
    extra = {k: v for k, v in (sampling or {}).items() if v is not None}
    unknown = sorted(set(extra) - set(_SAMPLING_ORDER) - {"temperature"})
    if unknown:
        raise ValueError(f"unknown sampling parameters: {', '.join(unknown)}")
    if dataset.spec.pre_tokenized:
        _check_token_route(dataset, api_type=api_type, salt=salt, token_salting=token_salting)
    elif api_type == "sglang":
        raise UsageError(
            f"dataset {dataset.spec.path}: api_type sglang sends token ids (input_ids) only; "
            "give the dataset's ids column with parser.input_tokens=COL"
        )
    templates: list[BodyTemplate] = []
    for index, sample in enumerate(dataset.samples):
        # A synthetic sample carries its own cap, its OSL (load/synthetic.py).
        cap = max_output_tokens if sample.output_tokens is None else sample.output_tokens
        if sample.token_ids is not None:
            build = _sglang_doc if api_type == "sglang" else _token_doc
            doc = build(model=model, stream=stream, max_output_tokens=cap, extra=extra)
            doc.update(extra_body or {})
            at = None if token_salting is None or not salt else token_salting.positions[index]
            templates.append(_encode_tokens(doc, sample.token_ids, at, token_salting))
            continue
        if api_type == "openai":
            doc, salted = _chat_doc(
                sample,
                model=model,
                stream=stream,
                max_output_tokens=cap,
                extra=extra,
                salt=salt,
                send_max_tokens=send_max_tokens,
            )
        elif api_type == "openai-completions":
            doc, salted = _completions_doc(
                dataset,
                index,
                sample,
                model=model,
                stream=stream,
                max_output_tokens=cap,
                extra=extra,
                salt=salt,
            )
        else:
            raise ValueError(f"unknown api_type {api_type!r}")
        doc.update(extra_body or {})
        if salt and salted is None:
            raise UsageError(
                f"dataset {dataset.spec.path}: sample {index} has no user message with "
                "text content to salt; use --no-salt (performance runs should be salted)"
            )
        templates.append(_encode(doc, salted))
    return tuple(templates)


def templates_for(
    dataset: Dataset,
    config: RunConfig,
    *,
    salt: bool,
    token_salting: TokenSalting | None = None,
) -> tuple[BodyTemplate, ...]:
    """Every sample's body as ``config`` asks for it (model, API type,
    streaming, output cap, sampling) with the dataset's
    ``generation_config_override`` on top, split for the salt when ``salt``
    (for a pre-tokenized dataset, where ``token_salting`` places it, by
    default :func:`token_salting_for`)."""
    if salt and token_salting is None:
        token_salting = token_salting_for(dataset, config)
    max_output_tokens, sampling = generation_of(dataset, config)
    return build_body_templates(
        dataset,
        model=config.model,
        api_type=config.api_type,
        stream=config.stream,
        max_output_tokens=max_output_tokens,
        sampling=sampling,
        salt=salt,
        send_max_tokens=config.send_max_tokens,
        token_salting=token_salting,
        extra_body=config.extra_body,
    )


def token_salting_for(dataset: Dataset, config: RunConfig) -> TokenSalting | None:
    """Where the salt goes in each sample of ``dataset`` if it is
    pre-tokenized (the run's tokenizer and ``--token-salt``); None for a
    text dataset.

    Raises:
        UsageError: the salt cannot be placed (``load/token_salt.py``).
    """
    if not dataset.spec.pre_tokenized:
        return None
    return token_salting(dataset, config.tokenizer or config.model, config.token_salt)


def generation_of(dataset: Dataset, config: RunConfig) -> tuple[int, dict[str, Any]]:
    """The output cap and sampling settings of ``dataset``'s requests: the
    run's, with the dataset's override on top (``chat_template_kwargs``
    merged key by key, as the reference deep-merges nested settings)."""
    sampling = config.generation.as_dict()
    override = dataset.spec.generation_override
    if override is None:
        return config.max_output_tokens, sampling
    changes = override.as_dict()
    max_output_tokens = changes.pop("max_new_tokens", config.max_output_tokens)
    kwargs = changes.pop("chat_template_kwargs", None)
    sampling.update(changes)
    if kwargs is not None:
        sampling["chat_template_kwargs"] = {
            **(sampling.get("chat_template_kwargs") or {}),
            **kwargs,
        }
    return max_output_tokens, sampling


def _check_token_route(
    dataset: Dataset, *, api_type: str, salt: bool, token_salting: TokenSalting | None
) -> None:
    """Token ids go to /v1/completions (module docstring); the run's
    configuration refuses another route before any load
    (``config/rules.py``); this guards the callers that build bodies
    themselves."""
    if api_type not in ("openai-completions", "sglang"):
        raise UsageError(
            f"dataset {dataset.spec.path}: token ids (parser.input_tokens) are sent to "
            "/v1/completions or SGLang's /generate only; add --api-type openai_completions "
            "(or sglang)"
        )
    if salt and token_salting is None:
        raise ValueError("salting token ids needs their token_salting (token_salting_for)")


def _token_doc(
    *,
    model: str,
    stream: bool,
    max_output_tokens: int,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    # "prompt" is filled in by _encode_tokens.
    doc: dict[str, Any] = {"model": model, "prompt": _PLACEHOLDER, "stream": stream}
    if stream:
        doc["stream_options"] = {"include_usage": True}
    doc["max_tokens"] = max_output_tokens
    doc["skip_special_tokens"] = False
    if "temperature" in extra:
        doc["temperature"] = extra["temperature"]
    for key in _SAMPLING_ORDER:
        if key in extra and key != "chat_template_kwargs":
            doc[key] = extra[key]
    return doc


def _sglang_doc(
    *,
    model: str,
    stream: bool,
    max_output_tokens: int,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    # "input_ids" is filled in by _encode_tokens; /generate takes no model
    # (the server has one), as the reference's body has none.
    del model
    params: dict[str, Any] = {"max_new_tokens": max_output_tokens}
    if "temperature" in extra:
        params["temperature"] = extra["temperature"]
    for key in _SAMPLING_ORDER:
        if key in extra and key != "chat_template_kwargs":
            params[_SGLANG_NAMES.get(key, key)] = extra[key]
    params["skip_special_tokens"] = False
    return {"input_ids": _PLACEHOLDER, "sampling_params": params, "stream": stream}


def _chat_doc(
    sample: Sample,
    *,
    model: str,
    stream: bool,
    max_output_tokens: int,
    extra: Mapping[str, Any],
    salt: bool,
    send_max_tokens: bool = False,
) -> tuple[dict[str, Any], str | None]:
    salted: str | None = None
    messages: list[dict[str, Any]]
    if sample.messages is not None:
        messages = list(sample.messages)
        if salt:
            for i, message in enumerate(messages):
                if message.get("role") == "user" and isinstance(message.get("content"), str):
                    salted = message["content"]
                    messages[i] = {**message, "content": _PLACEHOLDER}
                    break
    else:
        assert sample.prompt is not None
        messages = []
        if sample.system is not None:
            messages.append({"role": "system", "content": sample.system})
        salted = sample.prompt if salt else None
        messages.append({"role": "user", "content": _PLACEHOLDER if salt else sample.prompt})
    doc: dict[str, Any] = {"model": model, "messages": messages}
    if "temperature" in extra:
        doc["temperature"] = extra["temperature"]
    doc["max_completion_tokens"] = max_output_tokens
    if send_max_tokens:
        doc["max_tokens"] = max_output_tokens
    if stream:
        doc["stream"] = True
        doc["stream_options"] = {"include_usage": True}
    for key in _SAMPLING_ORDER:
        if key in extra:
            doc[key] = extra[key]
    return doc, salted


def _completions_doc(
    dataset: Dataset,
    index: int,
    sample: Sample,
    *,
    model: str,
    stream: bool,
    max_output_tokens: int,
    extra: Mapping[str, Any],
    salt: bool,
) -> tuple[dict[str, Any], str | None]:
    if sample.prompt is None:
        raise UsageError(
            f"dataset {dataset.spec.path}: sample {index} is a chat 'messages' sample; "
            "api_type openai-completions sends a plain prompt (use api_type openai)"
        )
    if sample.system is not None:
        raise UsageError(
            f"dataset {dataset.spec.path}: sample {index} has a system prompt, which "
            "api_type openai-completions cannot send (use api_type openai)"
        )
    doc: dict[str, Any] = {
        "model": model,
        "prompt": _PLACEHOLDER if salt else sample.prompt,
        "stream": stream,
    }
    if stream:
        doc["stream_options"] = {"include_usage": True}
    doc["max_tokens"] = max_output_tokens
    if "temperature" in extra:
        doc["temperature"] = extra["temperature"]
    for key in _SAMPLING_ORDER:
        if key in extra and key != "chat_template_kwargs":
            doc[key] = extra[key]
    return doc, (sample.prompt if salt else None)


def _encode(doc: dict[str, Any], salted: str | None) -> BodyTemplate:
    body = msgspec.json.encode(doc)
    if salted is None:
        return BodyTemplate(head=body)
    at = body.find(_PLACEHOLDER_JSON)
    if at < 0 or body.find(_PLACEHOLDER_JSON, at + 1) >= 0:
        raise AssertionError("salt splice point not found exactly once")  # cannot happen
    # head ends with the opening quote; tail starts with the escaped prompt
    # and its closing quote, then the rest of the body.
    head = body[: at + 1]
    tail = msgspec.json.encode(salted)[1:] + body[at + len(_PLACEHOLDER_JSON) :]
    return BodyTemplate(head=head, tail=tail)


def _encode_tokens(
    doc: dict[str, Any],
    token_ids: tuple[int, ...],
    at: int | None,
    token_salting: TokenSalting | None,
) -> BodyTemplate:
    """A token body, split for the salt at id position ``at`` (None:
    unsalted).  The ids are written as msgspec writes an int array (no
    spaces), so a salted body is byte for byte the body of the salted ids."""
    body = msgspec.json.encode(doc)
    where = body.find(_PLACEHOLDER_JSON)
    if where < 0 or body.find(_PLACEHOLDER_JSON, where + 1) >= 0:
        raise AssertionError("prompt splice point not found exactly once")  # cannot happen
    before, after = body[:where], body[where + len(_PLACEHOLDER_JSON) :]
    if at is None:
        return BodyTemplate(head=before + msgspec.json.encode(token_ids) + after)
    assert token_salting is not None
    head = b"".join((before, b"[", *(b"%d," % i for i in token_ids[:at])))
    tail = b"".join((*(b",%d" % i for i in token_ids[at:]), b"]", after))
    return BodyTemplate(head=head, tail=tail, token_salt=token_salting.token_salt)


# Sample order ----------------------------------------------------------------------


def shuffled_order(n: int, seed: int) -> Iterator[int]:
    """Indices 0..n-1 shuffled without replacement, reshuffled per pass.

    The reference's ``WithoutReplacementSampleOrder``: one
    ``random.Random(seed)``, one list shuffled in place before every pass
    (the second pass shuffles the first pass's order, not a fresh range).
    Infinite.
    """
    if n <= 0:
        raise ValueError("a sample order needs at least one sample")
    rng = random.Random(seed)
    order = list(range(n))
    while True:
        rng.shuffle(order)
        yield from order


def sequential_order(n: int) -> Iterator[int]:
    """0, 1, ..., n-1, 0, 1, ... (accuracy phases).  Infinite."""
    if n <= 0:
        raise ValueError("a sample order needs at least one sample")
    while True:
        yield from range(n)


# The issue-time feed ------------------------------------------------------------------


class RequestFeed:
    """Yields the queries of one phase: sample order, salt, body.

    Iterating gives :class:`IssuedRequest` tuples; :meth:`next_request`
    gives ``(sample_index, body)`` for the scheduler and leaves the prompt
    of that query in :attr:`last_prompt`.

    Args:
        samples: the dataset's samples (for the prompt of each query).
        templates: their pre-encoded bodies, from
            :func:`build_body_templates` (salted templates when ``salter``
            is given).
        order: the sample indices to issue, in order.
        salter: the salt stream; None for unsalted queries.
        token_salting: where the salt went in the templates of a
            pre-tokenized dataset (for the prompt of each query).
    """

    __slots__ = ("_order", "_salter", "_samples", "_templates", "_token_salting", "last_prompt")

    def __init__(
        self,
        samples: Sequence[Sample],
        templates: Sequence[BodyTemplate],
        order: Iterator[int],
        salter: Salter | None = None,
        token_salting: TokenSalting | None = None,
    ) -> None:
        if len(samples) != len(templates):
            raise ValueError("one body template per sample")
        if salter is not None and any(not t.tail for t in templates):
            raise ValueError("salting needs templates built with salt=True")
        if salter is not None and token_salting is None and any(t.token_salt for t in templates):
            raise ValueError("salted token-id templates need their token_salting")
        self._samples = samples
        self._templates = templates
        self._order = order
        self._salter = salter
        self._token_salting = token_salting
        self.last_prompt: Prompt = ""

    @property
    def salter(self) -> Salter | None:
        """The feed's salt stream (None: unsalted), to continue in a later
        phase (:meth:`for_phase`)."""
        return self._salter

    @classmethod
    def for_phase(
        cls,
        dataset: Dataset,
        config: RunConfig,
        phase: Phase = "performance",
        *,
        salter: Salter | None = None,
    ) -> RequestFeed:
        """The feed of one phase of ``config`` (see the module docstring).

        performance: shuffled with the sample-index seed, salted when
        ``config.salt``; warmup: shuffled with ``warmup seed + 1``, salted
        (``warmup seed + 2``) when ``config.warmup_salt``, as the reference;
        accuracy: sequential, unsalted.  Pass ``salter`` to continue a salt
        stream from an earlier phase (so warmup and performance never share
        a salt value).
        """
        seeds = config.seeds
        n = len(dataset)
        salt_seed: int | None
        if phase == "performance":
            order = shuffled_order(n, seeds.sample_index)
            salt_seed = seeds.salt_seed if config.salt else None
        elif phase == "warmup":
            order = shuffled_order(n, seeds.warmup_seed + 1)
            salt_seed = seeds.warmup_seed + 2 if config.warmup_salt else None
        elif phase == "accuracy":
            order = sequential_order(n)
            salt_seed = None
        else:
            raise ValueError(f"unknown phase {phase!r}")
        salted = salt_seed is not None
        token_salting = token_salting_for(dataset, config) if salted else None
        templates = templates_for(dataset, config, salt=salted, token_salting=token_salting)
        if salted and salter is None:
            assert salt_seed is not None
            salter = Salter(salt_seed)
        return cls(dataset.samples, templates, order, salter if salted else None, token_salting)

    def __iter__(self) -> Iterator[IssuedRequest]:
        return self

    def __next__(self) -> IssuedRequest:
        index, body = self.next_request()
        return IssuedRequest(index, body, self.last_prompt)

    def next_request(self) -> tuple[int, bytes]:
        """The next query's sample index and body (salted if salting is on)."""
        index = next(self._order)
        template = self._templates[index]
        sample = self._samples[index]
        salter = self._salter
        if salter is None:
            self.last_prompt = prompt_of(sample, None)
            return index, template.render()
        hex_salt = salter.next_hex_bytes()
        token_salt = template.token_salt
        if token_salt is None:
            body = b"".join((template.head, b"[", hex_salt, b"] ", template.tail))
            self.last_prompt = prompt_of(sample, hex_salt.decode("ascii"))
            return index, body
        # A token-id body: the salt's ids, encoded once for body and prompt.
        assert self._token_salting is not None and sample.token_ids is not None
        salt_ids = token_salt.salt_ids(hex_salt)
        body = b"".join((template.head, ids_json(salt_ids), template.tail))
        self.last_prompt = TokenPrompt(
            self._token_salting.insert(sample.token_ids, index, salt_ids)
        )
        return index, body


def salted_body(template: BodyTemplate, hex_salt: bytes | None) -> bytes:
    """A query's body: ``template`` with the salt ``hex_salt`` (16 hex
    digits) spliced in -- as text, or as ids in a token-id body -- or
    unsalted when None."""
    if hex_salt is None:
        return template.render()
    if template.token_salt is not None:
        return b"".join((template.head, template.token_salt.salt_json(hex_salt), template.tail))
    return b"".join((template.head, b"[", hex_salt, b"] ", template.tail))


class IssuedPrompts:
    """What each query asked (the ISSUED prompt, the ISL's input) from its
    sample index and salt: for a caller that has the salts but not the
    bodies (``scale/driver.py``, whose engines build the bodies).

    Args:
        samples: the dataset's samples.
        token_salting: where the salt goes in a pre-tokenized dataset's
            samples (:func:`token_salting_for`); None for a text dataset or
            an unsalted phase.
    """

    __slots__ = ("_samples", "_token_salting")

    def __init__(self, samples: Sequence[Sample], token_salting: TokenSalting | None) -> None:
        self._samples = samples
        self._token_salting = token_salting

    @classmethod
    def for_run(cls, dataset: Dataset, config: RunConfig, *, salt: bool) -> IssuedPrompts:
        """The prompts of ``dataset``'s queries under ``config``, salted when ``salt``."""
        return cls(dataset.samples, token_salting_for(dataset, config) if salt else None)

    def __call__(self, index: int, salt_text: str | None) -> Prompt:
        sample = self._samples[index]
        if sample.token_ids is None or salt_text is None:
            return prompt_of(sample, salt_text)
        if self._token_salting is None:
            raise ValueError("a salted token-id query needs the dataset's token_salting")
        return TokenPrompt(
            self._token_salting.salted_ids(sample.token_ids, index, salt_text.encode("ascii"))
        )


def prompt_of(sample: Sample, salt_text: str | None) -> Prompt:
    """What a query of ``sample`` asked (the ISSUED prompt, the ISL's input),
    salted with ``salt_text`` unless None.  A salted token-id query needs
    where its salt went: :class:`IssuedPrompts`.

    Raises:
        ValueError: ``sample`` is token ids and ``salt_text`` is given.
    """
    if sample.token_ids is not None:
        if salt_text is not None:
            raise ValueError("the salted prompt of token ids is IssuedPrompts' to build")
        return TokenPrompt(sample.token_ids)
    if salt_text is None:
        return sample.prompt if sample.prompt is not None else _messages(sample)
    if sample.prompt is not None:
        return f"[{salt_text}] {sample.prompt}"
    return _salted_messages(_messages(sample), salt_text)


def _messages(sample: Sample) -> tuple[dict[str, Any], ...]:
    assert sample.messages is not None
    return sample.messages


def _salted_messages(
    messages: tuple[dict[str, Any], ...], salt_text: str
) -> tuple[dict[str, Any], ...]:
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            salted = {**message, "content": f"[{salt_text}] {content}"}
            return (*messages[:i], salted, *messages[i + 1 :])
    return messages  # unreachable for templates built with salt=True


def default_route(api_type: str) -> str:
    """The request path of an API type (the reference's ``APIType.default_route``)."""
    if api_type == "openai-completions":
        return COMPLETIONS_ROUTE
    return SGLANG_ROUTE if api_type == "sglang" else CHAT_ROUTE
