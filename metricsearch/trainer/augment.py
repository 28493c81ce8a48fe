"""Title variants: a perturbed copy of an item's own title, used as its positive in self-supervised training.

Two shops name the same product differently: words added, dropped or reordered, and part numbers written with or
without hyphens ("PS-LX350H" / "PSLX350H"), which a WordPiece tokenizer splits into unrelated pieces. A title and a
variant of it teach the encoder that the words it may lose are the generic ones and that a part number is the
same whatever its punctuation. No labels are read. Written by hand: the text-augmentation libraries on PyPI
(nlpaug and the like) perturb prose (synonyms, back-translation), not part numbers.
"""

from __future__ import annotations

import torch

DROP_WORD = 0.25  # a word without digits is left out
SHUFFLE = 0.3  # the kept words are reordered
REMOVE_HYPHENS = 0.5  # a part number that has hyphens loses them
INSERT_HYPHEN = 0.3  # a part number without hyphens gains one at a random inner position


def is_part_number(word: str) -> bool:
    """A word of more than 3 characters with a digit in it: a model or part number, kept in every variant."""
    return len(word) > 3 and any(c.isdigit() for c in word)


def title_variant(title: str, generator: torch.Generator) -> str:
    """A perturbed copy of `title`: words without digits dropped at random, part numbers kept but their hyphens
    removed or one inserted, the order sometimes shuffled. Never empty: a title every word of which is dropped comes
    back unchanged. Draws from `generator` only, so a seeded run (and its resume) makes the same variants."""
    words = title.split()
    draws = torch.rand(2 * len(words) + 1, generator=generator).tolist()
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
        kept = [kept[i] for i in torch.randperm(len(kept), generator=generator).tolist()]
    return " ".join(kept)


def positive_texts(titles: list[str], descriptions: list[str], share: float, generator: torch.Generator) -> list[str]:
    """Each item's positive: a variant of its title with probability `share` (always when it has no description),
    else its description. `share` 0 draws nothing, so the paper's runs keep their random streams."""
    if share == 0:
        return descriptions
    draws = torch.rand(len(titles), generator=generator).tolist()
    return [
        title_variant(title, generator) if draw < share or not description.strip() else description
        for title, description, draw in zip(titles, descriptions, draws, strict=True)
    ]
