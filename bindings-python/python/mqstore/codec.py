"""The state store's wire format, from mqstore's Rust core, for tooling and tests.

Requests, responses and notifications are dicts shaped like the shared wire vectors'
``command`` and ``decoded`` objects; keys and values are ``bytes``::

    >>> from mqstore import codec
    >>> codec.encode_request({"op": "SET", "key": b"k", "value": b"v", "condition": "NX"})
    b'*4\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nk\\r\\n$1\\r\\nv\\r\\n$2\\r\\nNX\\r\\n'

``decode_request`` raises the :class:`~mqstore.errors.ServiceError` subclass the state store
would answer with; the other decoders raise ``ValueError`` for malformed bytes.
"""

from ._native import (
    INVOKE_TOPIC,
    Hlc,
    decode_notification,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    notify_topic,
)

__all__ = [
    "INVOKE_TOPIC",
    "Hlc",
    "decode_notification",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "notify_topic",
]
