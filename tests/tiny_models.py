"""Tiny Hugging Face models built locally for tests (no hub access).

Each builder trains a small tokenizer on a multilingual corpus (Latin,
Cyrillic, CJK, Devanagari and Perso-Arabic scripts), builds a 2-layer model
with fixed seeds, and saves both with ``save_pretrained`` so tests load them
with ``from_pretrained`` exactly as they would a real model.
"""

from __future__ import annotations

from pathlib import Path

import torch

SUBJECTS = ["people", "women", "men", "doctors", "teachers", "farmers", "engineers", "nurses", "students", "artists"]
TRAITS = ["kind", "smart", "lazy", "rich", "poor", "honest", "strong", "warm", "cold", "friendly", "boring", "brave"]
EXTRA = [
    "He couldn't figure out the issue with the rope.",
    "The poor are really ignorant about how to handle money.",
    "She was always on time for her appointments at the hospital.",
    "Unbelievably, everything worked out perfectly in the end.",
    "Люди из этой деревни очень добрые и трудолюбивые.",
    "Врачи в этой больнице работают очень много.",
    "这些人非常聪明，也很勤奋。",
    "医生们每天都工作很长时间。",
    "ये लोग बहुत मेहनती और ईमानदार हैं।",
    "डॉक्टर हर दिन बहुत काम करते हैं।",
    "یہ لوگ بہت محنتی اور ایماندار ہیں۔",
    "ڈاکٹر ہر روز بہت کام کرتے ہیں۔",
    "Die Menschen in diesem Dorf sind sehr freundlich.",
    "Konkani: हे लोक खूब बरे आसात.",
]


def corpus() -> list[str]:
    sents = [f"{s.capitalize()} are {t}." for s in SUBJECTS for t in TRAITS]
    sents += [f"The {s} were {t} and {u}." for s in SUBJECTS for t, u in zip(TRAITS, TRAITS[1:])]
    sents += EXTRA * 5
    return sents


def build_masked_lm(out: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # keep case and accents so every script survives untouched
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=fast.pad_token_id,
    )
    model = BertForMaskedLM(config).eval()
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def _byte_bpe(vocab_size: int, specials: list[str], extra: list[str] | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus() + list(extra or []),
        trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    return tok


def _bos_tokenizer(extra: list[str] | None = None):
    """A byte-level BPE tokenizer that prepends BOS, like Gemma's (trained on the corpus plus ``extra``)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = _byte_bpe(600, ["<pad>", "<s>", "</s>", "<unk>"], extra)
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


def _llama(fast, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    return model


def build_causal_lm(out: Path, *, chat_template: bool = True) -> Path:
    """Llama-style causal LM whose tokenizer prepends BOS, like Gemma's; with a chat template (an
    instruct model's shape) or, ``chat_template=False``, without one (a base model's shape)."""
    fast = _bos_tokenizer()
    if chat_template:
        fast.chat_template = (
            "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
        )
    model = _llama(fast)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def build_trained_causal_lm(out: Path, sentences: list[str], *, steps: int = 300, hidden: int = 64,
                            batch: int = 32, lr: float = 3e-3, seed: int = 0) -> Path:
    """The Llama-style causal LM of :func:`build_causal_lm` (no chat template), trained from its seeded start
    for ``steps`` AdamW steps on ``sentences`` (BOS + sentence + EOS, batches drawn with ``seed``): a model
    with associations planted by its corpus.  A few hundred steps take seconds on a CPU."""
    fast = _bos_tokenizer(sentences)
    model = _llama(fast, hidden)
    encoded = [fast(s)["input_ids"] + [fast.eos_token_id] for s in sentences]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), fast.pad_token_id)
    for i, e in enumerate(encoded):
        ids[i, : len(e)] = torch.tensor(e)
    labels = ids.masked_fill(ids == fast.pad_token_id, -100)
    attention = (ids != fast.pad_token_id).long()
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(encoded), (batch,), generator=generator)
        loss = model(input_ids=ids[rows], attention_mask=attention[rows], labels=labels[rows]).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def build_seq2seq_lm(out: Path) -> Path:
    """T5-style model with sentinel tokens <extra_id_0..9> for span-corruption templates."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    sentinels = [f"<extra_id_{i}>" for i in range(10)]
    tok = _byte_bpe(600, ["<pad>", "</s>", "<unk>", *sentinels])
    eos_id = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos_id)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>", additional_special_tokens=sentinels
    )
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(fast), d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id, decoder_start_token_id=fast.pad_token_id,
    )
    model = T5ForConditionalGeneration(config).eval()
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out
