"""A tiny byte-level BPE tokenizer in Hugging Face format: one token per byte, no merges."""

from __future__ import annotations

# GLM-style special tokens; the first is EOS (id 256, as config.json says).
SPECIAL_TOKENS = ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>")


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode table: every byte gets a printable character (ByteLevel BPE)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json() -> dict:
    """tokenizer.json: ByteLevel pre-tokenizer and decoder, a BPE model of the 256 byte
    characters plus the special tokens, and no merges (so any text tokenizes, byte by byte)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    vocab = {ch: i for i, ch in enumerate(_byte_alphabet())}
    added = [{"id": 256 + i, "content": tok, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, tok in enumerate(SPECIAL_TOKENS)]
    vocab.update({tok: 256 + i for i, tok in enumerate(SPECIAL_TOKENS)})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def tokenizer_config(max_context: int) -> dict:
    chat = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    return {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>", "model_max_length": max_context,
            "clean_up_tokenization_spaces": False, "chat_template": chat}


