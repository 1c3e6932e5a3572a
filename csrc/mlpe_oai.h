/*
 * mlpe_oai.h -- decoding of one OpenAI streaming chunk (or one non-streaming
 * completion body) from its JSON text, sans-IO.
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
    mlpe_span content;       /* delta.content + choice.text, unescaped UTF-8 */
    mlpe_span reasoning;     /* reasoning_content or reasoning, unescaped */
    mlpe_span finish_reason; /* unescaped */
    mlpe_span usage;         /* raw JSON text of the usage object (in scratch) */
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

typedef struct mlpe_oai_decoder {
    /* private */
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

int mlpe_oai_init(mlpe_oai_decoder *d);
void mlpe_oai_free(mlpe_oai_decoder *d);

/* Decodes json[0..len) into *out.  Returns MLPE_OK, MLPE_E_NOMEM, or one of
 * the chunk codes 401-405 (out->shape_path / out->error_message set as
 * described above; on any non-OK code the fragment fields are all absent).
 * Tool-call fragments are listed in array order.
 *
 * The result is a function of json[0..len) alone: a decoder remembers the
 * shape of an earlier payload to decode the next one faster (the template
 * of mlpe_oai.c), never to decode it differently.  Reusing one decoder for
 * the events of a stream is what makes that pay. */
int mlpe_oai_decode(mlpe_oai_decoder *d, const uint8_t *json, size_t len, mlpe_oai_chunk *out);

#endif /* MLPE_OAI_H */
