"""Title variants: a perturbed copy of an item's own title, standing for how another shop would name the same
product. The trainer uses them as self-supervised positives; `metricsearch tune` as pseudo-queries whose one
relevant item is known without labels.

Two shops name the same product differently: words added, dropped or reordered, and part numbers written with or
without hyphens ("PS-LX350H" / "PSLX350H"), which a WordPiece tokenizer splits into unrelated pieces. No labels are
read. Written by hand: the text-augmentation libraries on PyPI (nlpaug and the like) perturb prose (synonyms,
back-translation), not part numbers.
"""

from __future__ import annotations

from collections.abc import Callable

DROP_WORD = 0.25  # a word without digits is left out
SHUFFLE = 0.3  # the kept words are reordered
REMOVE_HYPHENS = 0.5  # a part number that has hyphens loses them
INSERT_HYPHEN = 0.3  # a part number without hyphens gains one at a random inner position

Uniform = Callable[[int], list[float]]
"""n draws from U[0, 1): the caller's random stream (a seeded torch generator in training, numpy in tuning)."""


def is_part_number(word: str) -> bool:
    """A word of more than 3 characters with a digit in it: a model or part number, kept in every variant."""
    return len(word) > 3 and any(c.isdigit() for c in word)


def title_variant(title: str, uniform: Uniform) -> str:
    """A perturbed copy of `title`: words without digits dropped at random, part numbers kept but their hyphens
    removed or one inserted, the order sometimes shuffled. Never empty: a title every word of which is dropped comes
    back unchanged. Draws from `uniform` only, so a seeded stream makes the same variants."""
    words = title.split()
    draws = uniform(2 * len(words) + 1)
    kept = []
    for i, word in enumerate(words):
        draw, position = draws[2 * i], draws[2 * i + 1]
        if is_part_number(word):
            if "-" in word and draw < REMOVE_HYPHENS:
                word = word.replace("-", "")
            elif "-" not in word and draw < INSERT_HYPHEN:
                cut = 1 + int(position * (len(word) - 1))
                word = f"{word[:cut]}-{word[cut:]}"
            kept.append(word)
        elif draw >= DROP_WORD:
            kept.append(word)
    if not kept:
        return title
    if draws[-1] < SHUFFLE:
        keys = uniform(len(kept))
        kept = [kept[i] for i in sorted(range(len(kept)), key=keys.__getitem__)]
    return " ".join(kept)
