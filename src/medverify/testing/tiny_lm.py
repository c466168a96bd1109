"""Tiny random-weight causal language models, built offline, for tests and benchmarks.

>>> build_tiny_lm(tmp / "gpt2", "gpt2")                  # byte-level BPE, GPT-2 blocks
>>> build_tiny_lm(tmp / "llama", "llama")                # SentencePiece-like Unigram, Llama
>>> build_tiny_lm(tmp / "m10", "llama", **SIZE_PRESETS["10m"])

The directory holds ``config.json``, the weights and a ``tokenizer.json`` (a
``PreTrainedTokenizerFast``, so offsets mappings work) and loads with
``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` and
``AutoTokenizer.from_pretrained(path, local_files_only=True)``. Nothing is downloaded: the
tokenizer is trained with the ``tokenizers`` library on :data:`MEDICAL_CORPUS` and the
weights are drawn from ``torch.manual_seed(seed)``. The two default tokenizers differ on
purpose (byte-level BPE without special tokens in the text vs. Unigram pieces with a
``▁`` word prefix and a ``<s>`` BOS), so scorers must align models by character offsets.
The models are random: their log-probabilities mean nothing medically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

Arch = Literal["gpt2", "llama", "qwen2", "gemma3"]
TokenizerKind = Literal["bpe", "unigram", "wordpiece"]

DEFAULT_TOKENIZER: dict[str, TokenizerKind] = {"gpt2": "bpe", "llama": "unigram",
                                                "qwen2": "bpe", "gemma3": "unigram"}

SIZE_PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 32, "layers": 2, "heads": 2},
    "1m": {"hidden": 128, "layers": 4, "heads": 4},
    "10m": {"hidden": 256, "layers": 12, "heads": 4},
    "50m": {"hidden": 512, "layers": 16, "heads": 8},
}
"""Keyword sets for :func:`build_tiny_lm` giving roughly 1M / 10M / 50M parameters."""

MEDICAL_CORPUS: tuple[str, ...] = (
    "Metformin is a first-line treatment for type 2 diabetes mellitus.",
    "Insulin lowers blood glucose by promoting uptake into muscle and fat.",
    "Hypertension is defined as a blood pressure of 130/80 mmHg or higher.",
    "ACE inhibitors such as lisinopril can cause a dry cough.",
    "Amoxicillin is a penicillin antibiotic used for otitis media.",
    "Patients allergic to penicillin may react to other beta-lactams.",
    "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation.",
    "Warfarin requires regular monitoring of the INR.",
    "Vitamin K reverses the effect of warfarin.",
    "Asthma is a chronic inflammatory disease of the airways.",
    "Inhaled corticosteroids reduce airway inflammation in asthma.",
    "Salbutamol is a short-acting beta-2 agonist for acute bronchospasm.",
    "Chronic kidney disease is staged by the glomerular filtration rate.",
    "Myocardial infarction presents with chest pain radiating to the left arm.",
    "Troponin is the preferred biomarker for myocardial injury.",
    "Statins lower LDL cholesterol and reduce cardiovascular events.",
    "Atrial fibrillation increases the risk of ischemic stroke.",
    "Anticoagulation is recommended when the CHA2DS2-VASc score is high.",
    "Pneumonia often causes fever, cough and shortness of breath.",
    "A chest X-ray can confirm consolidation in pneumonia.",
    "Sepsis is a life-threatening organ dysfunction caused by infection.",
    "Early antibiotics and fluids improve survival in septic shock.",
    "Hypothyroidism is treated with oral levothyroxine.",
    "Graves disease is an autoimmune cause of hyperthyroidism.",
    "Iron deficiency anemia causes fatigue and pale skin.",
    "Folic acid supplements reduce neural tube defects in pregnancy.",
    "Paracetamol overdose can cause acute liver failure.",
    "N-acetylcysteine is the antidote for paracetamol poisoning.",
    "Migraine headaches may be preceded by a visual aura.",
    "Multiple sclerosis damages the myelin of the central nervous system.",
    "Parkinson disease is associated with loss of dopaminergic neurons.",
    "Levodopa improves the motor symptoms of Parkinson disease.",
    "Major depression is often treated with SSRIs such as sertraline.",
    "Lithium has a narrow therapeutic index and needs level checks.",
    "Tuberculosis is caused by Mycobacterium tuberculosis.",
    "HIV infection is managed with combination antiretroviral therapy.",
    "Vaccination prevents measles, mumps and rubella.",
    "Osteoporosis increases the risk of hip fractures in older adults.",
    "Bisphosphonates such as alendronate reduce fracture risk.",
    "Gout is caused by deposition of uric acid crystals in joints.",
    "Allopurinol lowers serum uric acid levels.",
    "Appendicitis typically starts with pain around the umbilicus.",
    "Celiac disease is an immune reaction to gluten.",
    "Question: What is the first-line drug for type 2 diabetes?\nAnswer:\nMetformin.",
    "Context: Warfarin is an anticoagulant.\n\nQuestion: How is warfarin monitored?\n"
    "Answer:\nWith the INR (international normalized ratio), 2-3 in most cases.",
    "Doses: 500 mg twice daily; 10% of patients; 37.5 °C; pH 7.4; K+ 4.0 mmol/L!",
)
"""A few dozen medical sentences (and the scorers' prompt layout) to train tokenizers on."""

_SPECIALS: dict[TokenizerKind, dict[str, str]] = {
    "bpe": {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>"},
    "unigram": {"unk": "<unk>", "bos": "<s>", "eos": "</s>"},
    "wordpiece": {"unk": "[UNK]", "bos": "[CLS]", "eos": "[SEP]"},
}


def build_tiny_lm(path: Path, arch: Arch, *, vocab_size: int = 300, hidden: int = 32,
                  layers: int = 2, heads: int = 2, seed: int = 0,
                  tokenizer: TokenizerKind | None = None, max_positions: int = 1024,
                  init_std: float = 0.2) -> Path:
    """Write a random-weight causal LM with its own trained tokenizer to ``path``.

    ``vocab_size`` is the tokenizer's target (the model's vocabulary is the size actually
    reached; byte-level BPE never goes below 257); ``tokenizer`` defaults to ``bpe`` for
    ``gpt2`` and ``unigram`` for ``llama``. ``init_std`` (larger than the usual 0.02) gives
    peaked, non-uniform next-token distributions. Returns ``path``.
    """
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    kind = tokenizer or DEFAULT_TOKENIZER[arch]
    tok = train_tokenizer(kind, vocab_size)
    specials = _SPECIALS[kind]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=specials["bos"], eos_token=specials["eos"],
        unk_token=specials["unk"], pad_token=specials["eos"],
        add_bos_token=kind != "bpe", model_max_length=max_positions)
    config = _config(arch, fast, hidden=hidden, layers=layers, heads=heads,
                     max_positions=max_positions, init_std=init_std)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    _write_card(path, arch, kind, seed, sum(p.numel() for p in model.parameters()))
    return path


def train_tokenizer(kind: TokenizerKind, vocab_size: int = 300) -> Tokenizer:
    """A ``tokenizers`` tokenizer of the given kind trained on :data:`MEDICAL_CORPUS`."""
    builders = {"bpe": _byte_bpe, "unigram": _unigram, "wordpiece": _wordpiece}
    try:
        return builders[kind](vocab_size)
    except KeyError:
        raise ValueError(f"unknown tokenizer kind {kind!r}; "
                         f"known: {', '.join(builders)}") from None


def _byte_bpe(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(MEDICAL_CORPUS, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _unigram(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, unk_token="<unk>",
                                      special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(MEDICAL_CORPUS, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)])
    return tok


def _wordpiece(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(MEDICAL_CORPUS, trainer)
    cls = tok.token_to_id("[CLS]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A", pair="[CLS] $A $B", special_tokens=[("[CLS]", cls)])
    return tok


def _config(arch: Arch, fast: Any, *, hidden: int, layers: int, heads: int,
            max_positions: int, init_std: float) -> Any:
    """The architectures of the packaged scorers: ``llama`` (SmolLM2), ``qwen2`` (Qwen2.5),
    ``gemma3`` (Gemma 3, text-only, alternating sliding-window and full attention), and
    ``gpt2``."""
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig, Qwen2Config

    ids = {"vocab_size": len(fast), "bos_token_id": fast.bos_token_id,
           "eos_token_id": fast.eos_token_id, "pad_token_id": fast.pad_token_id,
           "initializer_range": init_std}
    common = {"hidden_size": hidden, "intermediate_size": hidden * 3,
              "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": heads, "max_position_embeddings": max_positions, **ids}
    if arch == "gpt2":
        return GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads,
                          n_positions=max_positions, **ids)
    if arch == "llama":
        return LlamaConfig(tie_word_embeddings=False, **common)
    if arch == "qwen2":
        return Qwen2Config(tie_word_embeddings=True, **common)
    if arch == "gemma3":
        return Gemma3TextConfig(head_dim=hidden // heads, query_pre_attn_scalar=hidden // heads,
                                sliding_window=8, layer_types=[
                                    "sliding_attention" if i % 2 == 0 else "full_attention"
                                    for i in range(layers)], **common)
    raise ValueError(f"unknown architecture {arch!r}; known: gpt2, llama, qwen2, gemma3")


def _write_card(path: Path, arch: str, kind: str, seed: int, parameters: int) -> None:
    card = {"generator": "medverify.testing.tiny_lm", "arch": arch, "tokenizer": kind,
            "seed": seed, "parameters": parameters,
            "note": "random weights for tests and benchmarks; not a real language model"}
    (path / "medverify_tiny_lm.json").write_text(json.dumps(card, indent=2), "utf-8")


CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The ChatML layout Qwen2.5 instruct models use (system / user / assistant turns)."""


def build_tiny_chat_lm(path: Path, *, hidden: int = 32, layers: int = 2, heads: int = 2,
                       seed: int = 0, vocab_size: int = 400, init_std: float = 0.2) -> Path:
    """A random-weight ``Qwen2ForCausalLM`` with a ChatML chat template: the architecture
    and prompt layout of the packaged Qwen2.5 instruct models, for testing the local chat
    provider (``local:PATH``) and the LLM judges without a download. Returns ``path``."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    tok = _byte_bpe(vocab_size)
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
        unk_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=4096)
    fast.chat_template = CHATML_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=init_std,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    _write_card(path, "qwen2", "bpe", seed, sum(p.numel() for p in model.parameters()))
    return path


def write_tiny_gguf(path: Path) -> Path:
    """A small but complete GGUF file (one f32 tensor, llama architecture), written with
    the ``gguf`` package: enough for the header and tensor checks, not a loadable model."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((64, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
