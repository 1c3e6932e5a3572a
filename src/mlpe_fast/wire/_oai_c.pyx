# cython: language_level=3
"""Binding of the OpenAI chunk decoder (``csrc/mlpe_oai.h``; its code is
carried and exported by ``_response_c``, see ``_response_c.pxd``).

One call into C per payload; the records are built here directly.
Behaviour is specified by the twin, ``_oai_py.py``; both are tested against
each other.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t

from ._coai cimport *
# The functions of csrc/mlpe_oai.c, linked into _response_c only (setup.py).
from mlpe_fast.wire._response_c cimport oai_decode, oai_free, oai_init, oai_set_dialect

from ._oai_py import check_dialect, decode_usage
from .events import ChunkError, Delta, ToolCallDelta

__all__ = ("ChunkDecoder",)

cdef object _Delta = Delta
cdef object _ToolCallDelta = ToolCallDelta
cdef object _ChunkError = ChunkError
cdef object _decode_usage = decode_usage
cdef tuple _NO_TOOLS = ()


cdef inline str _text(mlpe_span s):
    # The decoder validated every byte as UTF-8 (rule J1).
    return PyUnicode_DecodeUTF8(<const char *>s.ptr, <Py_ssize_t>s.len, NULL)


cdef inline object _opt_text(bint present, mlpe_span s):
    return _text(s) if present else None


cdef tuple _tools(const mlpe_oai_chunk *c):
    cdef size_t i
    cdef const mlpe_oai_tool *t
    if c.n_tools == 0:
        return _NO_TOOLS
    calls = []
    for i in range(c.n_tools):
        t = &c.tools[i]
        calls.append(_ToolCallDelta(
            t.index,
            _opt_text(t.has_id, t.id),
            _opt_text(t.has_type, t.type),
            _opt_text(t.has_name, t.name),
            _opt_text(t.has_arguments, t.arguments),
        ))
    return tuple(calls)


@cython.final
cdef class ChunkDecoder:
    """Decodes the data of one OpenAI SSE event, or one completion body (or,
    with ``dialect="sglang"``, one event or body of SGLang's ``/generate``).

    See :class:`mlpe_fast.wire._oai_py.ChunkDecoder`; this class is its
    compiled equal.  Its scratch memory is reused from call to call.
    """

    cdef mlpe_oai_decoder _d

    def __cinit__(self, dialect="openai"):
        cdef bint sglang = check_dialect(dialect)
        if oai_init(&self._d) != MLPE_OK:
            raise MemoryError("mlpe-fast: out of memory in the native core")
        oai_set_dialect(&self._d, MLPE_DIALECT_SGLANG if sglang else MLPE_DIALECT_OPENAI)

    def __dealloc__(self):
        oai_free(&self._d)

    def decode(self, object data, object t_ns):
        """decode(data, t_ns) -> Delta | ChunkError

        The fragments of one chunk, or why there are none (see the twin).
        """
        cdef Py_buffer view
        cdef mlpe_oai_chunk c
        cdef int rc
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            rc = oai_decode(&self._d, <const uint8_t *>view.buf, <size_t>view.len, &c)
            if rc == MLPE_OK:
                return _Delta(
                    _opt_text(c.has_content, c.content),
                    _opt_text(c.has_reasoning, c.reasoning),
                    _tools(&c),
                    _opt_text(c.has_finish_reason, c.finish_reason),
                    _decode_usage(PyBytes_FromStringAndSize(<const char *>c.usage.ptr,
                                                            <Py_ssize_t>c.usage.len))
                    if c.has_usage else None,
                    t_ns,
                )
            if rc == MLPE_E_NOMEM:
                raise MemoryError("mlpe-fast: out of memory in the native core")
            if rc == MLPE_E_CHUNK_SHAPE:
                detail = c.shape_path.decode("ascii")
            elif rc == MLPE_E_ENDPOINT_ERROR:
                detail = _text(c.error_message)
            else:
                detail = ""
            raw = data if type(data) is bytes else PyBytes_FromStringAndSize(
                <const char *>view.buf, view.len)
            return _ChunkError(rc, detail, raw, t_ns)
        finally:
            PyBuffer_Release(&view)
