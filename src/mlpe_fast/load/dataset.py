"""Datasets: the ``--dataset`` syntax, file loaders and column mapping.

A dataset is a file of rows (JSONL, JSON list of objects, CSV, Parquet)
turned into :class:`Sample` records once, before any load is generated
(the reference client requires in-memory samples too: loading inside the
issue path would delay the ISSUED stamp, reference-client.md §1.2).

Command-line syntax, as the reference client's ``--dataset``
(``mlcommons/endpoints:src/inference_endpoint/config/utils.py``,
``parse_dataset_string``)::

    [perf|acc:]PATH[,parser.prompt=COL][,parser.system=COL][,parser.input_tokens=COL]
        [,format=F][,samples=N][,name=NAME]
        [,accuracy_config.ground_truth=COL][,accuracy_config.eval_method=M]
        [,accuracy_config.extractor=E][,accuracy_config.num_repeats=N]

Column mapping follows the reference's ``DataLoaderFactory`` and
``MakeAdapterCompatible`` transform (``dataset_manager/factory.py``,
``dataset_manager/transforms.py``):

1. ``parser.prompt=COL`` names the prompt column explicitly;
2. otherwise a ``prompt`` column is used, else the first of the reference's
   candidate names present (``user_prompt``, ``question``, ``input``,
   ``input_text``, ``problem``, ``query``); two candidates at once are
   ambiguous and an error, as in the reference;
3. otherwise a ``messages`` column (OpenAI chat messages) is used as is
   (an extension: the reference's file datasets need a ``prompt`` column);
4. otherwise the load fails and the message says which ``parser.prompt=``
   to add -- the reference's own ``dummy_1k.jsonl`` (``text_input``,
   ``ref_output``) needs ``,parser.prompt=text_input`` there too.

The system prompt comes from ``parser.system=COL``, else a ``system_prompt``
or ``system`` column when present.

``parser.input_tokens=COL`` makes the dataset pre-tokenized: each sample is
the token ids of that column (the reference's ``input_tokens``, sent as
``prompt: [id, ...]`` to ``/v1/completions``, bypassing the server's chat
template: gpt-oss-120b's ``perf_eval_ref.parquet`` and DeepSeek-R1's MLPerf
set, whose source column is ``tok_input``).  The other prompt columns are
then not read.  The column holds a list of non-negative integers per row: a
Parquet ``list<int>``, a JSON array in JSONL/JSON, a JSON array string in
CSV; an empty list is refused (a query of nothing measures nothing).

A text dataset whose spec carries ``harmony`` (the run's ``--harmony``,
on the token routes) is encoded into Harmony token ids as it is loaded
(:mod:`.harmony`): from then on it is a token-id dataset like a
pre-tokenized one.

An accuracy dataset (``acc:``) names its ground-truth column and how it is
scored (the reference's ``accuracy_config``, ``config/schema.py``
``AccuracyConfig``): ``ground_truth`` (default ``ground_truth``),
``eval_method`` (a scorer, :mod:`mlpe_fast.accuracy.scorers`), ``extractor``
and ``num_repeats`` (the dataset is issued that many times).

``samples=N`` keeps the first N rows.  (The reference declares the field
but applies it only in its audit mode; taking a prefix is the plain reading.)

``synthetic:isl=DIST,osl=DIST[,prefix=N][,samples=N][,seed=N][,name=NAME]``
is a dataset without a file: random prompts of exact token counts
(:mod:`.synthetic_spec` for the syntax, :mod:`.synthetic` for how they are
built).

Every mistake raises :class:`mlpe_fast.errors.UsageError` with one line
naming the file (and line or row) and what is wrong.
"""

from __future__ import annotations

import csv
import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..errors import UsageError
from .agentic import AgenticSettings
from .harmony import HarmonyPrompts, harmony_encoder
from .synthetic import synthetic_prompts
from .synthetic_spec import SYNTHETIC_PREFIX, SyntheticSpec, parse_synthetic_arg

__all__ = (
    "DATASET_FORMATS",
    "AccuracyConfig",
    "Dataset",
    "DatasetSpec",
    "GenerationOverride",
    "Sample",
    "load_dataset",
    "parse_dataset_arg",
)

DatasetType = Literal["performance", "accuracy"]
DatasetFormat = Literal["jsonl", "json", "csv", "parquet"]

DATASET_FORMATS: tuple[DatasetFormat, ...] = ("jsonl", "json", "csv", "parquet")

# The reference's fuzzy prompt columns, in its order (MakeAdapterCompatible).
_PROMPT_CANDIDATES = ("user_prompt", "question", "input", "input_text", "problem", "query")
_SYSTEM_CANDIDATES = ("system_prompt", "system")
_PARSER_TARGETS = ("prompt", "system", "input_tokens")
_ACCURACY_KEYS = ("eval_method", "ground_truth", "extractor", "num_repeats")

# A scorer whose ground truth is not a ``ground_truth`` column by default: the
# reference's LiveCodeBench scorer keys each sample by its problem's id
# (``code_bench_scorer``'s ``question_id_column``).
_DEFAULT_GROUND_TRUTH = {"code_bench_scorer": "question_id"}

#: The column naming each sample's subset in an ensemble accuracy set.
SUBSET_COLUMN = "dataset"
_OPTION_KEYS = (
    "name",
    "format",
    "samples",
    "parser.prompt",
    "parser.system",
    "parser.input_tokens",
    *(f"accuracy_config.{k}" for k in _ACCURACY_KEYS),
)


class AccuracyConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How an accuracy dataset is scored (the reference's ``accuracy_config``).

    Attributes:
        eval_method: the scorer ("rouge", "pass_at_1", "string_match"...);
            empty: chosen from the dataset when it is a known one.
        ground_truth: the column holding the reference answer.
        extractor: the answer extractor applied to outputs before
            comparison ("abcd_extractor", "boxed_math_extractor",
            "identity_extractor"); None for scorers that need none.
        num_repeats: how many times the dataset is issued (each repeat is
            scored; spec §3.4 ``num_repeats``).
        extras: scorer options (the reference's ``accuracy_config.extras``:
            the SWE-bench service's URL and settings, say).
    """

    eval_method: str = ""
    ground_truth: str = "ground_truth"
    extractor: str | None = None
    num_repeats: int = 1
    extras: dict[str, Any] | None = None


class GenerationOverride(msgspec.Struct, frozen=True, kw_only=True):
    """A dataset's own generation settings (the reference's per-dataset
    ``generation_config_override``, ``config/schema.py`` ``Dataset``, with
    its key names: ``max_new_tokens`` is the output cap).  None: the run's
    value.  gpt-oss-120b caps performance at 10,240 output tokens and
    accuracy at 32,768 in one run this way."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The settings it overrides, by key."""
        return {
            name: getattr(self, name)
            for name in self.__struct_fields__
            if getattr(self, name) is not None
        }


class DatasetSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One dataset as configured (``--dataset`` or a YAML ``datasets[]`` entry).

    Attributes:
        path: the file.
        type: "performance" (salted, shuffled) or "accuracy" (sequential,
            unsalted: spec §2.5).
        name: defaults to the file's stem, as in the reference.
        format: None to go by the file extension.
        samples: keep only the first N rows.
        prompt_column: ``parser.prompt``.
        system_column: ``parser.system``.
        input_tokens_column: ``parser.input_tokens``: the samples are
            token ids (module docstring).
        accuracy: how an accuracy dataset is scored (None: defaults).
        agentic: the ``agentic_inference`` block of an agentic performance
            dataset (``load/agentic.py``); None for a dataset of prompts.
        generation_override: the YAML entry's
            ``generation_config_override``: generation settings of this
            dataset's requests that differ from the run's; None: the run's.
        harmony: how its text prompts are encoded into Harmony token ids
            (``load/harmony.py``; set by the run's configuration,
            ``--harmony``); None: they are sent as text.
        synthetic: a synthetic dataset's spec (``load/synthetic_spec.py``):
            its samples are built, not read; ``path`` is then the spec's
            text.
    """

    path: str
    type: DatasetType = "performance"
    name: str = ""
    format: DatasetFormat | None = None
    samples: int | None = None
    prompt_column: str | None = None
    system_column: str | None = None
    input_tokens_column: str | None = None
    accuracy: AccuracyConfig | None = None
    agentic: AgenticSettings | None = None
    generation_override: GenerationOverride | None = None
    harmony: HarmonyPrompts | None = None
    synthetic: SyntheticSpec | None = None

    @property
    def pre_tokenized(self) -> bool:
        """Whether the samples are token ids: read as such
        (``parser.input_tokens``), encoded from text (``harmony``) or built
        as ids (a synthetic dataset on ``/v1/completions``)."""
        return (
            self.input_tokens_column is not None
            or self.harmony is not None
            or (self.synthetic is not None and self.synthetic.form == "ids")
        )

    @property
    def display_name(self) -> str:
        """``name``, or the file stem when unnamed (``synthetic`` for a
        synthetic dataset)."""
        if self.name:
            return self.name
        return "synthetic" if self.synthetic is not None else Path(self.path).stem


class Sample(msgspec.Struct, frozen=True, gc=False):
    """One prompt: text (``prompt``, optional ``system``), chat ``messages``
    or ``token_ids`` (a pre-tokenized prompt).

    Exactly one of ``prompt``, ``messages`` and ``token_ids`` is set.
    ``output_tokens`` is the sample's own output cap (a synthetic sample's
    OSL); None: the dataset's.
    """

    prompt: str | None = None
    system: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    token_ids: tuple[int, ...] | None = None
    output_tokens: int | None = None


class Dataset(msgspec.Struct, frozen=True, gc=False):
    """A loaded dataset: its spec, its columns and its samples in file order;
    for an accuracy dataset, the ground truth of each sample too, and its
    subset name when the dataset is an ensemble graded per subset (the
    ``dataset`` column of MLPerf's DeepSeek-R1 set)."""

    spec: DatasetSpec
    columns: tuple[str, ...]
    samples: tuple[Sample, ...]
    ground_truth: tuple[str, ...] | None = None
    subsets: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.spec.display_name

    def __len__(self) -> int:
        return len(self.samples)


# The --dataset syntax -------------------------------------------------------------


def parse_dataset_arg(text: str, flag: str = "--dataset") -> DatasetSpec:
    """Parses one ``--dataset`` value (syntax in the module docstring).

    Raises:
        UsageError: an option without ``=``, an unknown option, a bad
            ``format`` or ``samples`` value, or an empty path.
    """
    tag, _, rest = text.strip().partition(":")
    if text.strip().startswith(SYNTHETIC_PREFIX) or (
        tag in ("perf", "acc") and rest.startswith(SYNTHETIC_PREFIX)
    ):
        return _synthetic_arg(text, flag)
    parts = text.split(",")
    path = parts[0].strip()
    dtype: DatasetType = "performance"
    tag, sep, rest = path.partition(":")
    if sep and tag in ("perf", "acc"):
        dtype = "accuracy" if tag == "acc" else "performance"
        path = rest
    if not path:
        raise UsageError(f"{flag} {text!r}: no file path")
    options: dict[str, str] = {}
    for item in parts[1:]:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            hint = " (did you mean '=' instead of ':'?)" if ":" in item else ""
            raise UsageError(
                f"{flag} {text!r}: option {item!r} is not key=value{hint}, "
                "e.g. parser.prompt=text_input"
            )
        if key not in _OPTION_KEYS:
            if key.startswith("parser."):
                raise UsageError(
                    f"{flag} {text!r}: unknown parser target {key[7:]!r} "
                    f"(valid: {', '.join(_PARSER_TARGETS)})"
                )
            raise UsageError(
                f"{flag} {text!r}: unknown option {key!r} (valid: {', '.join(_OPTION_KEYS)})"
            )
        options[key] = value.strip()
    origin = f"{flag} {text!r}"
    accuracy = _accuracy_options(options, dtype, origin)
    return DatasetSpec(
        path=path,
        type=dtype,
        name=options.get("name", ""),
        format=_format_value(options["format"], origin) if "format" in options else None,
        samples=_samples_value(options["samples"], origin) if "samples" in options else None,
        prompt_column=options.get("parser.prompt") or None,
        system_column=options.get("parser.system") or None,
        input_tokens_column=options.get("parser.input_tokens") or None,
        accuracy=accuracy,
    )


def _synthetic_arg(text: str, flag: str) -> DatasetSpec:
    """``[perf:]synthetic:KEY=VALUE,...`` (``load/synthetic_spec.py``).

    Raises:
        UsageError: an accuracy dataset (a synthetic one has no ground
            truth), or what the synthetic syntax refuses.
    """
    origin = f"{flag} {text!r}"
    body = text.strip()
    if body.startswith("acc:"):
        raise UsageError(f"{origin}: a synthetic dataset has no ground truth to score: drop acc:")
    body = body.removeprefix("perf:").removeprefix(SYNTHETIC_PREFIX)
    spec, name = parse_synthetic_arg(body, origin)
    return synthetic_dataset_spec(spec, name)


def synthetic_dataset_spec(synthetic: SyntheticSpec, name: str = "") -> DatasetSpec:
    """The dataset spec of a synthetic dataset (``path``: the spec's text)."""
    return DatasetSpec(path=synthetic.text, name=name, synthetic=synthetic)


def _accuracy_options(
    options: Mapping[str, str], dtype: DatasetType, origin: str
) -> AccuracyConfig | None:
    given = {k[16:]: v for k, v in options.items() if k.startswith("accuracy_config.")}
    if given and dtype != "accuracy":
        raise UsageError(f"{origin}: accuracy_config options need an accuracy dataset (acc:PATH)")
    if dtype != "accuracy":
        return None
    return accuracy_config(given, origin)


def accuracy_config(options: Mapping[str, object], origin: str) -> AccuracyConfig:
    """An :class:`AccuracyConfig` from CLI or YAML ``accuracy_config`` keys.

    Raises:
        UsageError: an unknown key, an empty column name, or a
            ``num_repeats`` that is not a positive integer.
    """
    unknown = sorted(set(options) - set(_ACCURACY_KEYS) - {"extras"})
    if unknown:
        raise UsageError(
            f"{origin}: unknown accuracy_config key {unknown[0]!r} "
            f"(valid: {', '.join(_ACCURACY_KEYS)})"
        )
    method = options.get("eval_method", "")
    ground_truth = options.get(
        "ground_truth", _DEFAULT_GROUND_TRUTH.get(str(method).strip(), "ground_truth")
    )
    if not isinstance(ground_truth, str) or not ground_truth.strip():
        raise UsageError(f"{origin}: accuracy_config.ground_truth must name a column")
    extractor = options.get("extractor")
    if not isinstance(method, str) or not (extractor is None or isinstance(extractor, str)):
        raise UsageError(f"{origin}: accuracy_config eval_method and extractor are names")
    repeats = options.get("num_repeats", 1)
    extras = options.get("extras")
    if extras is not None and not isinstance(extras, dict):
        raise UsageError(f"{origin}: accuracy_config.extras must be a mapping")
    return AccuracyConfig(
        extras=None if extras is None else dict(extras),
        eval_method=method.strip(),
        ground_truth=ground_truth.strip(),
        extractor=extractor.strip() or None if isinstance(extractor, str) else None,
        num_repeats=_samples_value(repeats, origin, "accuracy_config.num_repeats"),
    )


def _format_value(value: object, origin: str) -> DatasetFormat:
    if isinstance(value, str):
        name = value.strip().lower().lstrip(".")
        for known in DATASET_FORMATS:
            if name == known:
                return known
    raise UsageError(f"{origin}: format {value!r} is not one of {', '.join(DATASET_FORMATS)}")


def _samples_value(value: object, origin: str, key: str = "samples") -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is None or number <= 0:
        raise UsageError(f"{origin}: {key} must be a positive integer, got {value!r}")
    return number


# Loading ----------------------------------------------------------------------------


def load_dataset(spec: DatasetSpec) -> Dataset:
    """Reads ``spec.path`` and maps its columns to samples.

    Raises:
        UsageError: missing file, unknown extension, malformed content
            (with file:line where there are lines), an empty file, a missing
            or ambiguous column (listing the available ones), a non-string
            prompt, malformed ``messages``, or Parquet without pyarrow.
    """
    if spec.synthetic is not None:
        return _synthetic_dataset(spec, spec.synthetic)
    path = Path(spec.path)
    if not path.exists():
        raise UsageError(f"dataset file not found: {spec.path}")
    if not path.is_file():
        raise UsageError(f"dataset {spec.path}: not a regular file")
    fmt = spec.format or _format_from_suffix(path)
    rows: list[tuple[str, Mapping[str, Any]]]
    if fmt == "jsonl":
        rows = list(_read_jsonl(path))
    elif fmt == "json":
        rows = list(_read_json(path))
    elif fmt == "csv":
        rows = list(_read_csv(path))
    else:
        rows = list(_read_parquet(path))
    if not rows:
        raise UsageError(f"dataset {spec.path}: no rows (empty dataset)")
    if spec.samples is not None:
        if spec.samples > len(rows):
            raise UsageError(
                f"dataset {spec.path}: samples={spec.samples} but the file has "
                f"only {len(rows)} rows"
            )
        rows = rows[: spec.samples]
    columns = tuple(rows[0][1])
    samples = _map_columns(spec, columns, rows)
    if spec.harmony is not None:
        samples = _harmony_samples(spec, spec.harmony, samples)
    truth = subsets = None
    if spec.type == "accuracy":
        truth = _ground_truth(spec, columns, rows)
        if SUBSET_COLUMN in columns:
            subsets = tuple(str(row.get(SUBSET_COLUMN, "")) for _, row in rows)
    return Dataset(spec=spec, columns=columns, samples=samples, ground_truth=truth, subsets=subsets)


def _synthetic_dataset(spec: DatasetSpec, synthetic: SyntheticSpec) -> Dataset:
    """A synthetic dataset's samples (``load/synthetic.py``): token ids, or
    text with the shared prefix as the system prompt; each with its OSL as
    its output cap."""
    if synthetic.tokenizer is None or synthetic.seed is None or synthetic.form is None:
        raise UsageError(
            f"dataset {spec.path}: a synthetic dataset is built with a run's tokenizer, seed and "
            "route (mlpe-fast run fills them in): give it to mlpe-fast run"
        )
    prompts = synthetic_prompts(synthetic)
    samples: tuple[Sample, ...]
    if synthetic.form == "ids":
        samples = tuple(
            Sample(token_ids=ids, output_tokens=n)
            for ids, n in zip(prompts.ids, prompts.output_tokens, strict=True)
        )
    else:
        system = prompts.prefix_text if prompts.prefix_ids else None
        samples = tuple(
            Sample(prompt=text, system=system, output_tokens=n)
            for text, n in zip(prompts.texts, prompts.output_tokens, strict=True)
        )
    return Dataset(spec=spec, columns=(), samples=samples)


def _ground_truth(
    spec: DatasetSpec, columns: Sequence[str], rows: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[str, ...]:
    """The ground-truth column as text (numbers, as in math answers, are
    written as the dataset holds them)."""
    column = (spec.accuracy or AccuracyConfig()).ground_truth
    if column not in columns:
        raise UsageError(
            f"dataset {spec.path}: ground-truth column {column!r} not found "
            f"(available columns: {', '.join(columns)}); "
            f"add accuracy_config.ground_truth=<column>"
        )
    out: list[str] = []
    for where, row in rows:
        value = row.get(column)
        if isinstance(value, bool) or value is None or isinstance(value, list | dict):
            raise UsageError(f"{where}: ground truth {column!r} is {_json_kind(value)}")
        out.append(value if isinstance(value, str) else str(value))
    return tuple(out)


def _format_from_suffix(path: Path) -> DatasetFormat:
    suffix = path.suffix.lower().lstrip(".")
    for known in DATASET_FORMATS:
        if suffix == known:
            return known
    raise UsageError(
        f"dataset {path}: unknown file extension {path.suffix!r}; add format=jsonl|json|csv|parquet"
    )


def _read_jsonl(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    decoder = msgspec.json.Decoder()
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = decoder.decode(line)
            except msgspec.DecodeError as e:
                raise UsageError(f"{where}: malformed JSON line: {_one_line(e)}") from None
            if not isinstance(row, dict):
                raise UsageError(f"{where}: expected a JSON object per line, got {_json_kind(row)}")
            yield where, row


_BYTE_POS = re.compile(r"\(byte (\d+)\)")


def _read_json(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    data = path.read_bytes()
    try:
        rows = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        message = _one_line(e)
        match = _BYTE_POS.search(message)
        line = data.count(b"\n", 0, int(match.group(1))) + 1 if match else 1
        raise UsageError(f"{path}:{line}: malformed JSON: {message}") from None
    if not isinstance(rows, list):
        raise UsageError(f"dataset {path}: expected a JSON list of objects, got {_json_kind(rows)}")
    for i, row in enumerate(rows):
        where = f"{path}: row {i}"
        if not isinstance(row, dict):
            raise UsageError(f"{where}: expected a JSON object, got {_json_kind(row)}")
        yield where, row


def _read_csv(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                return
            if len(set(header)) != len(header):
                raise UsageError(f"{path}:1: duplicate column names in the CSV header")
            start = reader.line_num
            for row in reader:
                where = f"{path}:{start + 1}"
                start = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise UsageError(f"{where}: {len(row)} fields, the header has {len(header)}")
                yield where, dict(zip(header, row, strict=True))
        except csv.Error as e:
            raise UsageError(f"{path}:{reader.line_num}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"dataset {path}: not UTF-8 text ({e.reason})") from None


def _read_parquet(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    try:
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise UsageError(
            f"dataset {path}: reading Parquet needs pyarrow (pip install pyarrow)"
        ) from None
    try:
        table = parquet.read_table(str(path))
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise UsageError(f"dataset {path}: unreadable Parquet file: {_one_line(e)}") from None
    rows: list[dict[str, Any]] = table.to_pylist()
    for i, row in enumerate(rows):
        yield f"{path}: row {i}", row


# Column mapping ---------------------------------------------------------------------


def _map_columns(
    spec: DatasetSpec, columns: Sequence[str], rows: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[Sample, ...]:
    path = spec.path
    available = ", ".join(columns)
    if spec.input_tokens_column is not None:
        return _token_samples(spec, columns, rows)
    prompt_col: str | None = None
    messages_col: str | None = None
    if spec.prompt_column is not None:
        if spec.prompt_column not in columns:
            raise UsageError(
                f"dataset {path}: column {spec.prompt_column!r} (parser.prompt) not found; "
                f"available columns: {available}"
            )
        prompt_col = spec.prompt_column
    elif "prompt" in columns:
        prompt_col = "prompt"
    else:
        found = [c for c in _PROMPT_CANDIDATES if c in columns]
        if len(found) > 1:
            raise UsageError(
                f"dataset {path}: columns {found[0]!r} and {found[1]!r} could both be the "
                f"prompt; add parser.prompt=<column>"
            )
        if found:
            prompt_col = found[0]
        elif "messages" in columns:
            messages_col = "messages"
        else:
            suggestion = next(
                (c for c in columns if isinstance(rows[0][1].get(c), str)), "<column>"
            )
            raise UsageError(
                f"dataset {path}: no prompt column (available columns: {available}); "
                f"add parser.prompt={suggestion}, e.g. --dataset {path},parser.prompt={suggestion}"
            )

    system_col: str | None = None
    if spec.system_column is not None:
        if spec.system_column not in columns:
            raise UsageError(
                f"dataset {path}: column {spec.system_column!r} (parser.system) not found; "
                f"available columns: {available}"
            )
        system_col = spec.system_column
    elif prompt_col is not None:
        system_col = next((c for c in _SYSTEM_CANDIDATES if c in columns), None)

    samples: list[Sample] = []
    if messages_col is not None:
        for where, row in rows:
            samples.append(Sample(messages=_messages(where, row, messages_col)))
        return tuple(samples)
    assert prompt_col is not None
    for where, row in rows:
        prompt = _text(where, row, prompt_col)
        system = None if system_col is None else _text(where, row, system_col, optional=True)
        samples.append(Sample(prompt=prompt, system=system))
    return tuple(samples)


def _harmony_samples(
    spec: DatasetSpec, prompts: HarmonyPrompts, samples: Sequence[Sample]
) -> tuple[Sample, ...]:
    """Text samples as Harmony token-id samples (:mod:`.harmony`).

    Raises:
        UsageError: a ``messages`` sample (Harmony prompts are built from a
            prompt column, as the reference's ``Harmonize``), or a tokenizer
            without the Harmony tokens.
    """
    encoder = harmony_encoder(prompts.tokenizer)
    effort, date = prompts.reasoning_effort, prompts.conversation_start_date
    out: list[Sample] = []
    for index, sample in enumerate(samples):
        if sample.prompt is None:
            raise UsageError(
                f"dataset {spec.path}: sample {index} is a conversation (messages); Harmony "
                "prompts are built from a prompt column: add parser.prompt=COLUMN, or --harmony off"
            )
        out.append(Sample(token_ids=encoder.encode(sample.prompt, sample.system, effort, date)))
    return tuple(out)


def _token_samples(
    spec: DatasetSpec, columns: Sequence[str], rows: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[Sample, ...]:
    column = spec.input_tokens_column
    assert column is not None
    if column not in columns:
        raise UsageError(
            f"dataset {spec.path}: column {column!r} (parser.input_tokens) not found; "
            f"available columns: {', '.join(columns)}"
        )
    from_text = (spec.format or _format_from_suffix(Path(spec.path))) == "csv"
    return tuple(Sample(token_ids=_token_ids(where, row, column, from_text)) for where, row in rows)


def _token_ids(where: str, row: Mapping[str, Any], column: str, from_text: bool) -> tuple[int, ...]:
    """One row's token ids; a CSV cell holds them as a JSON array string."""
    if column not in row:
        raise UsageError(f"{where}: missing column {column!r}")
    value = row[column]
    if from_text and isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            raise UsageError(
                f"{where}: column {column!r} (parser.input_tokens) is not a JSON array "
                f"of token ids: {_one_line(value)[:40]!r}"
            ) from None
    # Parquet list<int> reaches here as a list; numpy-backed readers could give
    # a tuple, accepted alike.
    if not isinstance(value, list | tuple):
        raise UsageError(
            f"{where}: column {column!r} (parser.input_tokens) is {_json_kind(value)}, "
            "not a list of token ids"
        )
    if not value:
        raise UsageError(f"{where}: column {column!r} (parser.input_tokens) is an empty list")
    for i, token in enumerate(value):
        if type(token) is not int or token < 0:
            raise UsageError(
                f"{where}: column {column!r} (parser.input_tokens) item {i} is "
                f"{token!r}, not a non-negative integer token id"
            )
    return tuple(value)


def _text(where: str, row: Mapping[str, Any], column: str, optional: bool = False) -> str | None:
    if column not in row:
        if optional:
            return None
        raise UsageError(f"{where}: missing column {column!r}")
    value = row[column]
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{where}: column {column!r} is {_json_kind(value)}, not a string")
    return value


def _messages(where: str, row: Mapping[str, Any], column: str) -> tuple[dict[str, Any], ...]:
    if column not in row:
        raise UsageError(f"{where}: missing column {column!r}")
    value = row[column]
    if not isinstance(value, list) or not value:
        raise UsageError(
            f"{where}: column {column!r} must be a non-empty list of chat messages, "
            f"got {_json_kind(value)}"
        )
    for i, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise UsageError(f"{where}: {column}[{i}] is not a chat message with a string 'role'")
    return tuple(value)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
