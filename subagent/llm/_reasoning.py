"""Reasoning kept apart from the answer: ``<think>...</think>`` blocks in a reply's text.

Reasoning models (Qwen3, the DeepSeek-R1 distills) write their reasoning into the reply's
text between ``<think>`` and ``</think>``. :func:`split_reasoning` takes a whole reply apart;
:class:`ReasoningSplitter` does the same for streamed text, piece by piece, so reasoning
deltas and answer deltas can be told apart as they arrive.

The rules, shared by both:

- Tags are exactly ``<think>`` and ``</think>``, in any letter case (``<THINK>``). Whitespace
  inside a tag (``< think >``) is *not* a tag: models emit these tags as single special
  tokens, so they arrive verbatim, and accepting spaces would let prose such as
  ``a < think > b`` lose text, and make a stream hold back any run of spaces after a ``<``.
- A block's content is reasoning; the text outside blocks is the answer. Tags themselves
  are never part of either.
- A ``<think>`` that is never closed (a reply cut off by the token limit) makes everything
  after it reasoning.
- A ``</think>`` before any ``<think>`` closes a block the prompt opened (chat templates
  that end the prompt with ``<think>``): everything before it is reasoning. Any other
  ``</think>`` with no open block, and a ``<think>`` inside a block, are dropped.
- The reasoning is the blocks' contents, each stripped, empty ones left out, joined by a
  blank line; the answer is the outside text, stripped.

Streaming cannot take back what it has sent: text before a ``</think>`` that had no
``<think>`` has been emitted as answer by the time the tag arrives. Pass
``starts_inside=True`` (to both) when the prompt opens the block, and both agree exactly.
"""

from __future__ import annotations

import re

__all__ = ["ReasoningSplitter", "split_reasoning"]

# The two tags, any case. A literal with no quantifier: linear search.
_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_OPEN = "<think>"
_CLOSE = "</think>"
# The longest text that can begin a tag without being one: "</think" (7 characters).
_LONGEST_PARTIAL = len(_CLOSE) - 1
_BLOCK_SEPARATOR = "\n\n"


def split_reasoning(text: str, *, starts_inside: bool = False) -> tuple[str, str]:
    """Split a reply into its reasoning and its answer.

    Args:
        text: The reply's text.
        starts_inside: The prompt opened a think block, so the reply starts inside one
            (the same as reading ``"<think>" + text``).

    Returns:
        ``(reasoning, answer)``: the think blocks' contents, each stripped and joined by a
        blank line (``""`` when there are none), and the text outside them, stripped. A
        text without tags comes back as ``("", text)``, with ``text`` itself, unstripped
        and uncopied.
    """
    if not starts_inside and not _may_hold_tag(text):
        return "", text
    blocks: list[str] = []
    answer: list[str] = []
    block: list[str] = []
    inside = starts_inside
    seen_tag = starts_inside
    pos = 0
    for match in _TAG.finditer(text):
        between = text[pos : match.start()]
        closing = bool(match.group(1))
        if inside:
            block.append(between)
            if closing:
                blocks.append("".join(block))
                block = []
                inside = False
        elif closing and not seen_tag:
            blocks.append(between)  # the prompt opened this block
        else:
            answer.append(between)
            inside = not closing
        seen_tag = True
        pos = match.end()
    if inside:
        block.append(text[pos:])
        blocks.append("".join(block))
    else:
        answer.append(text[pos:])
    reasoning = _BLOCK_SEPARATOR.join(part for part in map(str.strip, blocks) if part)
    return reasoning, "".join(answer).strip()


class ReasoningSplitter:
    """:func:`split_reasoning` for streamed text: feed pieces, get runs to emit now.

    Each run is ``(is_reasoning, text)``. Over a whole stream, the answer runs concatenate
    to ``split_reasoning(whole)[1].strip()`` and the reasoning runs to
    ``split_reasoning(whole)[0]``, however the text was cut into pieces, with one
    exception explained in the module docstring (a ``</think>`` with no ``<think>`` when
    ``starts_inside`` is false).

    What is held back: a suffix that could still become a tag (``"<thi"``, at most 7
    characters), and whitespace at the edge of the answer or of a reasoning block, until
    text follows it (then it is emitted) or the edge is reached (then it is dropped, as
    ``strip`` would). Nothing else waits.

    Example:
        ``splitter = ReasoningSplitter()``, then for each streamed piece
        ``for is_reasoning, text in splitter.feed(piece): ...``, and at the end the same
        loop over ``splitter.flush()``.
    """

    __slots__ = (
        "_answer_started",
        "_answer_ws",
        "_block_started",
        "_block_ws",
        "_carry",
        "_inside",
        "_reasoned",
    )

    def __init__(self, *, starts_inside: bool = False, answer_started: bool = False) -> None:
        """Start a stream.

        Args:
            starts_inside: The prompt opened a think block, so the stream starts inside one.
            answer_started: Answer text was already emitted before this splitter took over
                the stream: its whitespace is kept rather than stripped as a leading edge.
        """
        self._inside = starts_inside
        self._carry = ""  # a suffix that may begin a tag
        self._answer_started = answer_started  # answer text other than whitespace was emitted
        self._answer_ws = ""  # whitespace after the last emitted answer text
        self._block_started = False  # this block emitted text other than whitespace
        self._block_ws = ""  # whitespace after the block's last emitted text
        self._reasoned = False  # some block emitted text (the next needs a separator)

    def feed(self, piece: str) -> list[tuple[bool, str]]:
        """Take the next piece of the stream.

        Args:
            piece: The text that just arrived.

        Returns:
            The runs that can be emitted now, in order, as ``(is_reasoning, text)``;
            adjacent runs of one kind are merged.
        """
        text = self._carry + piece if self._carry else piece
        self._carry = ""
        runs: list[tuple[bool, str]] = []
        pos = 0
        if "<" in text:
            for match in _TAG.finditer(text):
                self._route(text[pos : match.start()], runs)
                self._tag(closing=bool(match.group(1)))
                pos = match.end()
            partial = text.rfind("<", max(pos, len(text) - _LONGEST_PARTIAL))
            if partial >= 0 and _could_begin_tag(text[partial:]):
                self._carry = text[partial:]
                self._route(text[pos:partial], runs)
                return runs
        self._route(text[pos:] if pos else text, runs)
        return runs

    def flush(self) -> list[tuple[bool, str]]:
        """End the stream: emit what was held back and could not become a tag.

        Returns:
            The last runs, as :meth:`feed` does. Trailing whitespace is dropped.
        """
        runs: list[tuple[bool, str]] = []
        carry, self._carry = self._carry, ""
        self._route(carry, runs)
        self._answer_ws = self._block_ws = ""
        return runs

    def _tag(self, *, closing: bool) -> None:
        if closing and self._inside:
            self._inside = False  # the block's trailing whitespace is never emitted
        elif not closing and not self._inside:
            self._inside = True
            self._block_started = False
        # Otherwise a stray tag: dropped (see the module docstring).

    def _route(self, text: str, runs: list[tuple[bool, str]]) -> None:
        if not text:
            return
        if self._inside:
            if not self._block_started:
                text = text.lstrip()
                if not text:
                    return
                self._block_started = True
                if self._reasoned:
                    self._block_ws = _BLOCK_SEPARATOR
                self._reasoned = True
            self._block_ws = _emit(True, self._block_ws, text, runs)
        else:
            if not self._answer_started:
                text = text.lstrip()
                if not text:
                    return
                self._answer_started = True
            self._answer_ws = _emit(False, self._answer_ws, text, runs)


def _emit(reasoning: bool, pending: str, text: str, runs: list[tuple[bool, str]]) -> str:
    """Emit ``pending + text`` up to its trailing whitespace; return that whitespace."""
    body = text.rstrip()
    if not body:
        return pending + text
    emitted = pending + body if pending else body
    if runs and runs[-1][0] is reasoning:
        runs[-1] = (reasoning, runs[-1][1] + emitted)
    else:
        runs.append((reasoning, emitted))
    return text[len(body) :]


def _may_hold_tag(text: str) -> bool:
    # The hot path: most replies have no tag, and many no ">" at all (a memchr).
    return ">" in text and _TAG.search(text) is not None


def _could_begin_tag(suffix: str) -> bool:
    lowered = suffix.lower()
    return _OPEN.startswith(lowered) or _CLOSE.startswith(lowered)
