# cython: language_level=3
# Declarations of csrc/mlpe_oai.h (and the parts of mlpe_common.h it uses).
# Only what the binding touches is declared: Cython takes the struct layouts
# from the C headers.

from libc.stdint cimport int32_t, uint8_t


cdef extern from "mlpe_oai.h" nogil:
    ctypedef struct mlpe_span:
        const uint8_t *ptr
        size_t len

    enum:
        MLPE_OK
        MLPE_DIALECT_OPENAI
        MLPE_DIALECT_SGLANG
        MLPE_E_CHUNK_SHAPE
        MLPE_E_ENDPOINT_ERROR
        MLPE_E_NOMEM

    ctypedef struct mlpe_oai_tool:
        int32_t index
        uint8_t has_id, has_type, has_name, has_arguments
        mlpe_span id, type, name, arguments

    ctypedef struct mlpe_oai_chunk:
        uint8_t has_content, has_reasoning, has_finish_reason, has_usage
        mlpe_span content
        mlpe_span reasoning
        mlpe_span finish_reason
        mlpe_span usage
        mlpe_span error_message
        const mlpe_oai_tool *tools
        size_t n_tools
        const char *shape_path

    ctypedef struct mlpe_oai_decoder:
        pass

    int mlpe_oai_init(mlpe_oai_decoder *d)
    void mlpe_oai_free(mlpe_oai_decoder *d)
    int mlpe_oai_set_dialect(mlpe_oai_decoder *d, int dialect)
    int mlpe_oai_decode(mlpe_oai_decoder *d, const uint8_t *json, size_t len, mlpe_oai_chunk *out)
