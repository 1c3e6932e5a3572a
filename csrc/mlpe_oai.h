/*
 * mlpe_oai.h -- decoding of one OpenAI streaming chunk (or one non-streaming
 * completion body) from its JSON text, sans-IO; or, in the SGLang dialect,
 * of one event (or body) of SGLang's native /generate.
 *
 * Input: the data of one SSE event (never "[DONE]": callers test for it
 * first), or a whole non-streaming response body.  Output: the fragments a
 * load generator needs.
 *
 * JSON (RFC 8259, strict)
 * -----------------------
 *  J1. The payload must be UTF-8 (RFC 8259 section 8.1): overlong forms,
 *      surrogates (ED A0..BF) and code points above U+10FFFF are invalid.
 *  J2. Grammar exactly as RFC 8259: no NaN/Infinity, no comments, no
 *      trailing commas, no leading zeros, whitespace is SP HTAB LF CR,
 *      any value at top level with whitespace around it.
 *  J3. Nesting (objects + arrays) deeper than MLPE_JSON_MAX_DEPTH is an error.
 *  J4. The payload is scanned left to right and the FIRST problem among
 *      J1-J3, in text order, decides the code (MLPE_E_JSON_UTF8,
 *      MLPE_E_JSON_SYNTAX or MLPE_E_JSON_DEPTH).  Bytes >= 0x80 outside a
 *      string are a syntax error, not a UTF-8 error.  An ill-formed UTF-8
 *      sequence is located at its first byte, so one cut short by the end
 *      of the payload is a UTF-8 error, not an unterminated string; the
 *      depth is exceeded where the 65th container opens.
 *  J5. Escapes: \" \\ \/ \b \f \n \r \t \uXXXX (hex in either case).  A
 *      \uD800-\uDBFF escape directly followed by a \uDC00-\uDFFF escape is one
 *      code point; any other (lone) surrogate escape decodes to U+FFFD.
 *  J6. Duplicate keys: the last occurrence wins (as Python's json does).
 *
 * Chunk shape (checked only for well-formed JSON)
 * -----------------------------------------------
 *  S1. The top level must be an object (else shape_path is "$").
 *  S2. "error": when present and not null, the chunk is an endpoint error
 *      (MLPE_E_ENDPOINT_ERROR); its message is error.message when error is an
 *      object with a string "message", the string itself when error is a
 *      string, else empty.  Nothing else of that chunk is reported.
 *  S3. "choices": array or null.  Each element must be an object.  Its
 *      "index" must be an integer or null.  Fragments are read from the first
 *      element whose index is 0, null or absent; every element is type
 *      checked, the others are then ignored (mlpe-fast sends n=1).
 *  S4. In a choice: "delta" (streaming) and "message" (non-streaming) are
 *      objects or null (both are checked, S5 and S6 included); the fragments
 *      come from delta when it is an object, else from message.  "text" (completions API) is a string or null and
 *      is the content when the delta/message has no non-null "content".
 *      "finish_reason" is a string or null.
 *  S5. In a delta/message: "content" string or null; "reasoning_content"
 *      string or null, else "reasoning" string or null (servers in a
 *      deprecation period send both with the same text: reasoning_content
 *      wins when not null, never both); "tool_calls" array or null.
 *  S6. Each tool call: object; "index" a non-negative integer below 2^31 or
 *      absent/null (then its position in the array, which must be below 2^31
 *      as well); "id", "type" strings or null; "function" object or null
 *      with "name", "arguments" strings or null.
 *  S7. "usage": object or null; reported as the raw JSON text of the object.
 *  S8. Integers are JSON numbers without fraction or exponent, of any
 *      length ("-0" is 0).
 *  S9. Type checks follow a fixed order, not text order: top level error,
 *      choices, usage; per choice (array order) index, delta, message, text,
 *      finish_reason; per delta content, reasoning_content, reasoning,
 *      tool_calls; per tool call (array order) index, id, type, function;
 *      per function name, arguments.  The order is depth first: a delta's
 *      (or message's) members are checked right after its own type, before
 *      the next member of its choice.  The first failing check sets
 *      shape_path (e.g. "choices[0].delta.content",
 *      "choices[1].message.tool_calls[0].function.name", "choices[2]" for
 *      an element that is not an object) and the result is
 *      MLPE_E_CHUNK_SHAPE.
 *  S10. All other members are validated as JSON and otherwise ignored.
 *
 * SGLang chunk shape (MLPE_DIALECT_SGLANG, checked only for well-formed JSON)
 * -------------------------------------------------------------------------
 * SGLang's native POST /generate sends, per event, the object its
 * non-streaming body is: {"text": ..., "output_ids": [...], "meta_info":
 * {"id", "finish_reason", "prompt_tokens", "completion_tokens",
 * "cached_tokens", ...}} (sglang/srt/entrypoints/http_server.py; the
 * reference client's sglang/types.py).  By SGLang's default its "text" is
 * the whole text so far, not a delta; this decoder reports it as it is, and
 * mlpe_response (R11) makes the deltas.
 *  G1. The top level must be an object (else shape_path is "$").
 *  G2. "error": as S2 (SGLang ends a failed stream with {"error":
 *      {"message": ...}}).  Nothing else of that chunk is reported.
 *  G3. "text": string or null; the content when a string.
 *  G4. "meta_info": object or null.  In it, "finish_reason": object or
 *      null, whose "type" (string or null) is the finish reason: "length",
 *      "stop", "abort" ({"type": "length", "length": 64}); a finish_reason
 *      object without a string "type" gives none.
 *  G5. In meta_info, "prompt_tokens" and "completion_tokens" (cumulative):
 *      integers (S8) or null.  When either is an integer the chunk has usage:
 *      the JSON text {"prompt_tokens":P,"completion_tokens":C}, each P and C
 *      the literal as sent, a null or absent one left out -- the members an
 *      OpenAI usage object (S7) is read for.
 *  G6. Type checks follow a fixed order: top level error, text, meta_info;
 *      in meta_info finish_reason, finish_reason.type, prompt_tokens,
 *      completion_tokens.  The first failing check sets shape_path ("text",
 *      "meta_info", "meta_info.finish_reason", "meta_info.finish_reason.type",
 *      "meta_info.prompt_tokens" or "meta_info.completion_tokens") and the
 *      result is MLPE_E_CHUNK_SHAPE.
 *  G7. All other members -- "output_ids" (deltas or the whole list,
 *      depending on SGLang's version), "cached_tokens", logprobs, and
 *      "choices" or "usage" too -- are validated as JSON and otherwise
 *      ignored.  There is no reasoning and no tool call: the route returns
 *      the model's raw text (gpt-oss's Harmony channels are in it).
 * J1-J6 hold as for OpenAI chunks.  The template of mlpe_oai.c is OpenAI's
 * only: an SGLang chunk's text grows with every event and its counters
 * change, so a decoder in this dialect always takes the full pass.
 */
#ifndef MLPE_OAI_H
#define MLPE_OAI_H

#include "mlpe_common.h"

/* 64: an OpenAI chunk nests 5 deep (object, choices, choice, delta,
 * tool_calls, call, function = 7 at most with usage details); 64 leaves room
 * for any extension field while keeping the recursive scanner's C stack use
 * small and bounded. */
#define MLPE_JSON_MAX_DEPTH 64

/* One tool-call fragment.  Strings point into the decoder's scratch buffer
 * (its copy of the payload, unescaped in place); valid until the next
 * mlpe_oai_decode or mlpe_oai_free call. */
typedef struct mlpe_oai_tool {
    int32_t index;
    uint8_t has_id, has_type, has_name, has_arguments; /* present and not null */
    mlpe_span id, type, name, arguments;               /* unescaped UTF-8 */
} mlpe_oai_tool;

typedef struct mlpe_oai_chunk {
    uint8_t has_content, has_reasoning, has_finish_reason, has_usage;
    mlpe_span content;       /* delta.content + choice.text (SGLang: text), unescaped UTF-8 */
    mlpe_span reasoning;     /* reasoning_content or reasoning, unescaped */
    mlpe_span finish_reason; /* unescaped */
    mlpe_span usage;         /* raw JSON text of the usage object (in scratch;
                              * SGLang: made by G5, in the decoder) */
    mlpe_span error_message; /* for MLPE_E_ENDPOINT_ERROR, unescaped */
    const mlpe_oai_tool *tools;
    size_t n_tools;
    const char *shape_path;  /* for MLPE_E_CHUNK_SHAPE: NUL-terminated path */
} mlpe_oai_chunk;

/* The template of the fast path (mlpe_oai.c) is at most this many bytes: a
 * payload whose bytes around its hole are more is decoded in full every
 * time.  Chunks of a token stream are a few hundred bytes. */
#define MLPE_OAI_TEMPLATE_MAX (64u << 10)

/* At most this many integer holes (values of ignored top-level members,
 * mlpe_oai.c) in a template; further such values are fixed bytes. */
#define MLPE_OAI_TEMPLATE_INTS 4

/* The chunk schema a decoder reads (mlpe_oai_set_dialect). */
typedef enum mlpe_dialect {
    MLPE_DIALECT_OPENAI = 0, /* rules S1-S10: chat and completions chunks */
    MLPE_DIALECT_SGLANG = 1  /* rules G1-G7: SGLang's native /generate */
} mlpe_dialect;

typedef struct mlpe_oai_decoder {
    /* private */
    int dialect;             /* mlpe_dialect */
    mlpe_buf usage_text;     /* G5: the usage text an SGLang chunk reports */
    mlpe_buf scratch;        /* the payload's copy + zero padding, unescaped in place */
    mlpe_oai_tool *tools;
    size_t cap_tools;
    char path[128];          /* shape_path storage */
    /* The template (see mlpe_oai.c): a cache of the last fitting payload,
     * which never changes a result, only how fast it is found. */
    mlpe_buf tmpl;           /* the prefix (up to the hole's opening quote
                              * included), then the suffix (from its closing
                              * quote on) */
    size_t tmpl_prefix;      /* length of the prefix */
    uint32_t tmpl_int_at[MLPE_OAI_TEMPLATE_INTS];  /* the integer holes: offsets */
    uint32_t tmpl_int_len[MLPE_OAI_TEMPLATE_INTS]; /* in tmpl (ascending), lengths */
    uint8_t tmpl_n_ints;     /* integer holes in all */
    uint8_t tmpl_n_pre;      /* of which in the prefix (the first ones) */
    int32_t tmpl_tool_index; /* the tool call's index, for a tool-call hole */
    uint32_t tmpl_misses;    /* template misses in a row */
    uint32_t tmpl_skip;      /* payloads left that bypass the template */
    uint8_t tmpl_field;      /* the fragment the hole is; 0: no template */
} mlpe_oai_decoder;

/* A decoder of OpenAI chunks (MLPE_DIALECT_OPENAI). */
int mlpe_oai_init(mlpe_oai_decoder *d);
void mlpe_oai_free(mlpe_oai_decoder *d);

/* Makes d read the chunks of `dialect` (an mlpe_dialect; any other value
 * is MLPE_DIALECT_OPENAI) from its next decode on; the template is dropped.
 * Returns the dialect set. */
int mlpe_oai_set_dialect(mlpe_oai_decoder *d, int dialect);

/* Decodes json[0..len) into *out, by the rules of the decoder's dialect.
 * Returns MLPE_OK, MLPE_E_NOMEM, or one of the chunk codes 401-405
 * (out->shape_path / out->error_message set as described above; on any
 * non-OK code the fragment fields are all absent).  Tool-call fragments are
 * listed in array order.  An SGLang chunk's usage (G5) is in the decoder's
 * own storage, valid as long as the other spans.
 *
 * The result is a function of json[0..len) alone: a decoder remembers the
 * shape of an earlier payload to decode the next one faster (the template
 * of mlpe_oai.c), never to decode it differently.  Reusing one decoder for
 * the events of a stream is what makes that pay. */
int mlpe_oai_decode(mlpe_oai_decoder *d, const uint8_t *json, size_t len, mlpe_oai_chunk *out);

#endif /* MLPE_OAI_H */
