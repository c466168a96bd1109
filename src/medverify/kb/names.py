"""Document ids made from file names: unsafe characters percent-encoded, reversibly.

A file name can hold any byte but ``/`` and NUL: newlines, carriage returns, ESC, bidi
overrides, and (when it is not UTF-8) bytes that Python decodes to lone surrogates. Kept
in a document id, such a name forges lines in ``kb search`` output, reports and logs, and
a lone surrogate cannot even be stored in SQLite. So an id derived from a path is encoded:

- every :data:`medverify.text.UNSAFE` character (C0/C1 controls and DEL, U+2028/U+2029,
  bidi formatting characters, lone surrogates) becomes ``%HH`` per byte of its UTF-8 form
  (``"\\n"`` -> ``%0A``, ``"\\x1b"`` -> ``%1B``, U+202E -> ``%E2%80%AE``); a surrogate
  that stands for an undecodable byte of the name (U+DC80-U+DCFF) becomes that byte;
- a ``%`` that would read as an escape (followed by two hex digits) becomes ``%25``;
- everything else, including a ``%`` not followed by two hex digits, stays as it is.

So an id without unsafe characters or ``%HH`` look-alikes is the name itself (ids of
existing KBs do not change), and :func:`decode_id` (percent-decoding, UTF-8 with
surrogateescape: :func:`urllib.parse.unquote`) gives back the exact name Python read from
the file system: ``decode_id(encode_id(name)) == name``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from medverify.text import UNSAFE

_ENCODED = re.compile(f"{UNSAFE.pattern}|%(?=[0-9A-Fa-f]{{2}})")


def _percent(match: re.Match[str]) -> str:
    char = match.group(0)
    if "\udc80" <= char <= "\udcff":  # an undecodable byte of the name (surrogateescape)
        return f"%{ord(char) - 0xDC00:02X}"
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def encode_id(name: str) -> str:
    """``name`` (a path or part of one) as a document id: unsafe characters and ``%`` that
    would read as an escape percent-encoded (see the module docstring)."""
    return _ENCODED.sub(_percent, name) if _ENCODED.search(name) else name


def decode_id(doc_id: str) -> str:
    """The name an :func:`encode_id` id was made from."""
    return unquote(doc_id, errors="surrogateescape")


def needs_encoding(doc_id: str) -> bool:
    """Whether ``doc_id`` holds characters no printed id may hold."""
    return UNSAFE.search(doc_id) is not None
