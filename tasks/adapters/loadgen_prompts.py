"""Prompts of an exact token length, unique per request, sized with the server's ``/tokenize``.

Why this shape (docs/sources.md#exact-length-prompts):

- Every prompt starts with a header that is unique to the run and the request
  (``Request 123456-0000042:``), then a shared filler of common English words. A prefix cache
  hashes blocks from the first token on, so a prompt whose first block differs shares nothing
  with any other: no prefix-cache flattery, while building 2000 prompts of 120K tokens costs
  one filler string and an offset table, not gigabytes.
- The length is fitted with the server's own tokenizer: ``/tokenize`` counts the first prompt,
  the filler is lengthened or shortened (by the difference, then by bisection, and padded
  with one-token words if no word count hits the target), then a sample of other prompts is
  counted (headers of fixed width tokenize alike; a mismatch makes
  every prompt be fitted on its own). The server's ``usage.prompt_tokens`` of every request is
  checked again after the run (``LoadResult.input_lengths_exact``).
- Without ``/tokenize`` (404, 405, 501, or a body without ``count``) the length is an
  approximation, one token per filler word, and ``PromptSet.exact`` is False so the report says so.

Chat prompts are counted with their chat template (``/tokenize`` with ``messages``), so the
target is the templated length the engine prefills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

# Common words that are single tokens in the usual BPE vocabularies (with a leading space).
_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which have "
    "one had not but what all were when we there can your more said if do will each about how "
    "up out them then she many some so these would other into has her two like him see time "
    "could no make than first been its who now people my made over did down only way find use"
).split()

MAX_FIT_CALLS = 24      # /tokenize calls to fit one prompt (a bisection over 135K words needs 17)
VERIFY_SAMPLES = 8      # prompts counted after the first one fitted
MAX_SEPARATE_FITS = 4096  # prompts fitted one by one when headers tokenize differently
PAD = " a"              # a one-token word in the usual vocabularies, for the last token or two

Tokenize = Callable[[str], Awaitable["int | None"]]   # prompt text -> server token count (None: no /tokenize)
Fit = tuple[int, int]                                 # (filler words, pad words)


def header(salt: int, index: int) -> str:
    return f"Request {salt:06d}-{index:07d}:\n"


def filler_text(words: int) -> tuple[str, list[int]]:
    """``words`` filler words and the character offset after each prefix of k words."""
    parts, offsets, pos = [], [0], 0
    for k in range(words):
        word = _WORDS[(k * 7 + k // len(_WORDS)) % len(_WORDS)]
        piece = word if k == 0 else " " + word
        parts.append(piece)
        pos += len(piece)
        offsets.append(pos)
    return "".join(parts), offsets


@dataclass(frozen=True)
class PromptSet:
    """``count`` prompts of ``target_tokens`` tokens each; ``prompt(i)`` builds one on demand."""

    target_tokens: int
    count: int
    salt: int
    filler: str
    offsets: tuple[int, ...]
    fit: Fit                                      # filler and pad words of a prompt fitted in common
    exceptions: tuple[tuple[int, Fit], ...] = ()  # prompts fitted on their own
    exact: bool = True
    note: str = ""

    def prompt(self, index: int) -> str:
        words, pads = dict(self.exceptions).get(index, self.fit)
        return header(self.salt, index) + self.filler[: self.offsets[words]] + PAD * pads


async def _fit(tokenize: Tokenize, text: Callable[[int, int], str], target: int, start: int,
               limit: int) -> tuple[Fit, int | None]:
    """The (words, pads) whose prompt has ``target`` tokens, and the count it got (None: no /tokenize).

    The count grows with the words: step by the difference (a common word is about one token)
    until the target is bracketed, then bisect. If no word count hits the target exactly (a
    word of several tokens straddles it), the shorter prompt is padded with one-token words.
    """
    below: tuple[int, int] | None = None
    above: tuple[int, int] | None = None
    words = max(0, min(start, limit))
    for _ in range(MAX_FIT_CALLS):
        count = await tokenize(text(words, 0))
        if count is None or count == target:
            return (words, 0), count
        if count < target:
            below = (words, count) if below is None or words > below[0] else below
        else:
            above = (words, count) if above is None or words < above[0] else above
        if below and above:
            if above[0] - below[0] <= 1:
                break
            words = (below[0] + above[0]) // 2
        else:
            step = max(-words, min(limit - words, target - count))
            if step == 0:
                break  # the filler's end (or its start) is reached
            words += step
    if below is None:
        return (words, 0), count
    pads = target - below[1]
    count = await tokenize(text(below[0], pads))
    return (below[0], pads), count


async def build_prompts(tokenize: Tokenize, target_tokens: int, count: int, salt: int,
                        verify_concurrency: int = 4) -> PromptSet:
    """Fit ``count`` prompts to ``target_tokens`` (see the module docstring)."""
    if target_tokens < 1 or count < 1:
        raise ValueError("target_tokens and count must be positive")
    slack = 64 + target_tokens // 8          # room for tokenizers that merge words
    filler, offsets = filler_text(target_tokens + slack)
    limit = len(offsets) - 1

    def text(index: int) -> Callable[[int, int], str]:
        return lambda words, pads: header(salt, index) + filler[: offsets[words]] + PAD * pads

    guess = max(0, target_tokens - len(header(salt, 0).split()))
    fit, got = await _fit(tokenize, text(0), target_tokens, guess, limit)
    base = dict(target_tokens=target_tokens, count=count, salt=salt, filler=filler, offsets=tuple(offsets))
    if got is None:
        return PromptSet(**base, fit=fit, exact=False,
                         note="approximate input length: the server has no /tokenize, so one token per "
                              "word was assumed; usage.prompt_tokens shows what the server counted")
    if got != target_tokens:
        return PromptSet(**base, fit=fit, exact=False,
                         note=f"the server's tokenizer gave {got} tokens, not {target_tokens}; "
                              "lengths are approximate")
    sample = sorted({round(i * (count - 1) / VERIFY_SAMPLES) for i in range(1, VERIFY_SAMPLES + 1)} - {0})
    sem = asyncio.Semaphore(verify_concurrency)

    async def count_of(index: int) -> int | None:
        async with sem:
            return await tokenize(text(index)(*fit))

    counts = await asyncio.gather(*(count_of(i) for i in sample))
    if all(c == target_tokens for c in counts):
        return PromptSet(**base, fit=fit,
                         note=f"input length {target_tokens} tokens, fitted with the server's /tokenize "
                              f"and verified on {len(sample) + 1} prompts")
    if count > MAX_SEPARATE_FITS:
        return PromptSet(**base, fit=fit, exact=False,
                         note=f"prompt headers tokenize to different lengths and {count} prompts are too many "
                              "to fit one by one; lengths are approximate (see usage.prompt_tokens)")

    # Headers did not tokenize alike: fit every prompt on its own (bounded concurrency).
    async def fit_one(index: int) -> tuple[int, Fit, int | None]:
        async with sem:
            one, got_one = await _fit(tokenize, text(index), target_tokens, fit[0], limit)
            return index, one, got_one

    fitted = await asyncio.gather(*(fit_one(i) for i in range(1, count)))
    exceptions = tuple((i, f) for i, f, _ in fitted if f != fit)
    exact = all(c == target_tokens for _, _, c in fitted)
    note = ("input lengths fitted per prompt with the server's /tokenize" if exact else
            "some prompts could not be fitted exactly with the server's /tokenize; lengths are approximate")
    return PromptSet(**base, fit=fit, exceptions=exceptions, exact=exact, note=note)
