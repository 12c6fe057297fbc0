"""Text of a growing token sequence, piece by piece, for streaming generation.

One token need not be one character: a byte-level token can hold the first byte of a
three-byte UTF-8 character, and a BPE token a part of one. Decoding each token alone would
print replacement characters (U+FFFD) for such parts. :class:`StreamDecoder` works for any
tokenizer with a ``decode(ids) -> str``: it decodes a short window of recent tokens and gives
out only text that is complete, that is, text that does not end in U+FFFD; a character split
across tokens comes out once, whole, when its last part arrives. The window starts where the
previous piece ended, so the work per token stays small however long the text grows.

The concatenation of the pieces (with :meth:`StreamDecoder.finish`) is the decoding of all
the new tokens for tokenizers whose decoding is a concatenation of bytes, as for the
byte-level and byte-level BPE tokenizers of :mod:`posenc.data.tokenizer`; the context tokens
(a prompt) let a tokenizer whose decoding of a token depends on the one before it decode the
first new tokens right.
"""

from __future__ import annotations

from collections.abc import Iterable

from .tokenizer import Tokenizer

#: what a decoder writes for bytes that are not (yet) a whole UTF-8 character
REPLACEMENT = "\ufffd"
#: context tokens decoded with the first new ones
CONTEXT_TOKENS = 4


class StreamDecoder:
    """``push(token) -> str``: the text that token completes ('' while a character is
    still partial); ``finish() -> str``: whatever is left, partial characters as U+FFFD."""

    def __init__(self, tokenizer: Tokenizer, context: Iterable[int] = ()) -> None:
        self._decode = tokenizer.decode
        self._ids = [int(i) for i in context]
        self._start = max(0, len(self._ids) - CONTEXT_TOKENS)     # window start
        self._done = len(self._ids)                              # tokens already given out

    def push(self, token: int) -> str:
        """Add one token; the text it completes."""
        self._ids.append(int(token))
        return self._piece(final=False)

    def finish(self) -> str:
        """The rest of the text (a character left partial decodes as U+FFFD)."""
        return self._piece(final=True)

    def _piece(self, final: bool) -> str:
        head = self._decode(self._ids[self._start:self._done])
        text = self._decode(self._ids[self._start:])
        if len(text) <= len(head) or (text.endswith(REPLACEMENT) and not final):
            return ""                       # nothing new, or a character still incomplete
        self._start, self._done = self._done, len(self._ids)
        return text[len(head):]
