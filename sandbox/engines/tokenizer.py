"""The sandbox tokenizer: one token per whitespace-separated word, so lengths are exact.

- A prompt of N tokens is any text of N words: ``make_prompt(N)`` builds one.
- A prompt given as a list of token ids counts one token per id (as vLLM accepts).
- Chat messages are counted through a fixed template: each message adds 3 tokens
  (role and delimiters) to its content's words, and the reply prefix adds 3 more.
- Token ids are ``crc32(word) % VOCAB_SIZE``: stable across processes and runs.
- Generated text is a deterministic sequence of words, each emitted as ``" " + word`` so the
  output re-tokenizes to exactly the number of tokens generated.
- End of sequence: without ``ignore_eos`` a reply stops after its "natural" length,
  ``24 + crc32(prompt) % 72`` tokens (at least ``min_tokens``), like a real model stopping at EOS.
  Set ``ignore_eos`` for fixed output lengths.
"""

from __future__ import annotations

import zlib

VOCAB_SIZE = 151_552  # GLM-5.1's vocabulary size
CHAT_TOKENS_PER_MESSAGE = 3
CHAT_REPLY_PREFIX_TOKENS = 3

_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which "
    "model token cache prefill decode transfer fabric node expert layer batch stream"
).split()


def make_prompt(n: int, seed: int = 0) -> str:
    """A prompt of exactly ``n`` tokens; ``seed`` varies the words (e.g. to defeat prefix caches)."""
    return " ".join(_WORDS[(seed + i * 7) % len(_WORDS)] for i in range(n))


def count_prompt(prompt: object) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise ValueError("prompt must be a string or a list of token ids")


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def count_messages(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    total = CHAT_REPLY_PREFIX_TOKENS
    for message in messages:
        if not isinstance(message, dict):
            raise ValueError("each message must be an object")
        total += CHAT_TOKENS_PER_MESSAGE + len(_content_text(message.get("content")).split())
    return total


def messages_text(messages: list) -> str:
    return " ".join(_content_text(m.get("content")) for m in messages if isinstance(m, dict))


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % VOCAB_SIZE for w in text.split()]


def natural_length(prompt_key: str) -> int:
    return 24 + zlib.crc32(prompt_key.encode()) % 72


def output_word(index: int) -> str:
    return " " + _WORDS[(index * 11 + 3) % len(_WORDS)]
