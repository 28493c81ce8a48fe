"""A tiny sentence-transformers model built from scratch, so tests need no download and run in seconds.

The weights are random (seeded): the model is useless for similarity but exercises exactly the code paths a
real BERT does (WordPiece tokenizer, token type ids, padding mask, truncation, mean pooling, Normalize).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

SEED = 1234
MAX_SEQ_LENGTH = 64  # well under max_position_embeddings, so tests can exceed it with modest texts
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # [PAD] first: id 0, as BERT expects

CORPUS = [
    "Wireless noise-cancelling headphones with 30 hours of battery life",
    "Stainless steel electric kettle, 1.7 litres, auto shut-off",
    "Men's waterproof hiking boots in brown leather, size 44",
    "Organic green tea, 100 bags, from Japanese Sencha leaves",
    "Ergonomic office chair with lumbar support and adjustable armrests",
    "USB-C fast charger 65W for laptops, tablets and phones",
    "Cotton crew-neck T-shirt, slim fit, navy blue",
    "Cast iron skillet, pre-seasoned, 26 cm diameter",
    "Mechanical keyboard with hot-swappable switches and RGB lighting",
    "Children's picture book about a bear who learns to swim",
    "Yoga mat, non-slip, 6 mm thick, with carrying strap",
    "Smart LED bulb, dimmable, works with voice assistants",
    "Espresso machine with milk frother and 15 bar pump",
    "Running shoes for women, lightweight mesh upper, cushioned sole",
    "Portable Bluetooth speaker, waterproof IPX7, deep bass",
    "Hardcover notebook, dotted pages, 240 pages, A5",
    "Acrylic paint set of 24 colours for canvas and wood",
    "Stainless steel water bottle keeps drinks cold for 24 hours",
    "Gaming mouse with 16000 DPI sensor and programmable buttons",
    "Wool winter scarf, hand-knitted, charcoal grey",
    "Air fryer, 5.5 litres, digital touch screen, 8 presets",
    "Camping tent for four people, double layer, easy setup",
    "Noise-free desk fan with three speeds and oscillation",
    "Leather wallet with RFID blocking and coin pocket",
    "Vitamin C serum for the face with hyaluronic acid",
    "Electric toothbrush with two heads and travel case",
    "Board game for the whole family, ages 8 and up",
    "4K monitor, 27 inch, IPS panel, HDMI and DisplayPort",
    "Dog bed, orthopaedic memory foam, washable cover",
    "Garden hose, 20 metres, expandable, with spray nozzle",
    "Sci-fi novel: a crew of explorers wakes on a silent ship",
    "Baby stroller, foldable, with rain cover and cup holder",
]


def _train_tokenizer(vocab_size: int):
    """WordPiece trained with `tokenizers`, wired like BERT's so the export sees a realistic tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=1)
    )
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def build_tiny_model(folder: Path, *, vocab_size: int = 400, max_seq_length: int = MAX_SEQ_LENGTH) -> Path:
    """Write a 2-layer, 32-dim BERT sentence-transformers folder (mean pooling + Normalize) and return it."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(vocab_size),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_seq_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # what BERT tokenizers return
    )
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    bert = BertModel(config).eval()

    folder = Path(folder)
    # sentence-transformers builds its Transformer module from a saved Hugging Face folder; stage it apart so
    # `folder` ends up holding only the sentence-transformers layout.
    with tempfile.TemporaryDirectory(prefix="tiny-bert-") as staging:
        bert.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        transformer = Transformer(staging, max_seq_length=max_seq_length)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        model = SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu")
        model.save(str(folder))
    return folder
