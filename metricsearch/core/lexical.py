"""Lexical evidence: the analyzer and the TF-IDF cosine that every item's title, description and whole text get
beside their dense vectors.

A text's sparse vector holds, per term, its sublinear term frequency 1 + ln tf, L2-normalised over the text's terms;
a query's vector is made the same way. Their dot product with each term weighted by its inverse document frequency,
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), is the lexical score: sum_t idf_t q_t d_t, between 0 and the largest idf.
Qdrant applies that same idf to stored sparse vectors (the `idf` modifier), so the embedded store, a Qdrant server and
`lexical_scores` below rank alike by construction, and a document's vector never changes when others arrive.

Beside one score per field, `lexical_codes` scores the query's model and part numbers alone (a term with letters and
digits, or a number of five digits or more) against each item's whole text: product catalogs match on those, and a
short number ("3 killed", "2012") or a shared common word is no evidence of the same product. It is read from the
stored whole-text vector (the query's vector with its other terms dropped, its weights as they were), so it costs no
storage. Measured on both catalog pairs and STS-benchmark (EVALUATION.md, "Catalog matching").

Analyzer v2 (`CODE_STEMS`, what `metricsearch export` writes) also gives each code its stems, its leading runs of
letters and digits ("kdl40v" of "kdl40v5100b"): shops append colour, region and pack suffixes to one model number.
On the packaged model it lifted the lexical score alone from 0.871 to 0.920 MRR on Abt-Buy, where it was chosen, and
from 0.911 to 0.929 on Walmart-Amazon (EVALUATION.md, "Choices behind the defaults"). A v1 bundle keeps v1, so the
stores built with it stay valid.

A manifest that names an n-gram analyzer (`lexical.ngrams`) also stores each field's character 3-grams beside its
words (`ngrams_<field>`, weighted and scored the same way, ids hashed the same way): they match a word spelt or split
differently, where words need the exact term.

Why not BM25 (Robertson and Zaragoza, 2009): it scores a short query against documents; here an item is compared with
items, and BM25's unnormalised sums let long descriptions win. Measured with this analyzer on both catalog pairs
(EVALUATION.md, "Catalog matching"), the normalised score over the whole text beat BM25 per field and over the
whole text.

Written by hand: Qdrant's built-in analyzers lowercase and split words but do not join a part number's pieces
("PS-LX350H" vs "PSLX350H"), which is most of what a product catalog's lexical match is about; and term ids are a
stable hash, so no vocabulary is stored or shared between processes.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from metricsearch.core.bundle import CODE_STEMS, Manifest

_PIECES = re.compile(r"[^\W_]+")
CACHED_TERMS = 1 << 16
"""Term ids kept, of terms up to CACHED_TERM_CHARS long: a catalog's vocabulary repeats from item to item, and a
cached id costs a seventh of its hash (0.26 vs 1.9 us). The length bound keeps the cache under 13 MB (measured, full
of 32-character terms) whatever texts clients send."""
CACHED_TERM_CHARS = 32
STEM_MAX_CHARS = 32
"""The longest code that gets stems: model numbers are far shorter (Abt-Buy and Walmart-Amazon hold one longer code,
"480i480p576i576p720p1080i1080p60hz"), and a 20,000-character word of letters and digits would otherwise give 10,000
stems of up to 20,000 characters each (0.7 s to analyse)."""


@dataclass(frozen=True)
class SparseVector:
    """Term ids (uint32, ascending) and their weights."""

    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def empty(cls) -> SparseVector:
        return cls(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.float32))

    def __len__(self) -> int:
        return len(self.indices)


def analyze(text: str, stems: bool = True) -> list[str]:
    """Lower-cased alphanumeric pieces of each whitespace-separated word, plus, for a word of several pieces with a
    digit in it (a model or part number: "PS-LX350H", "EOS-5D"), the pieces joined ("pslx350h"), so that both
    spellings of a part number share a term; with `stems` (analyzer v2), also each code's stems (`_stems`)."""
    terms: list[str] = []
    for word in _words(text):
        terms += _word_terms(word, stems)
    return terms


def code_terms(text: str, stems: bool = True) -> set[str]:
    """The text's distinct terms that are codes (`is_code`), from its words with a digit alone: a code has a digit,
    and each term comes from one word, so the rest cannot hold one (a stored item's query: 12 us instead of 17 for
    analysing every word, warm, on the 100k synthetic items of BENCHMARKS.md, "Choices behind the defaults")."""
    return {term for word in _words(text) if _has_digit(word) for term in _word_terms(word, stems) if is_code(term)}


def _words(text: str) -> list[str]:
    return unicodedata.normalize("NFKC", text).lower().split()


def _word_terms(word: str, stems: bool) -> list[str]:
    pieces = _PIECES.findall(word)
    if not _has_digit(word):
        return pieces
    terms = [*pieces, "".join(pieces)] if len(pieces) > 1 else pieces
    return [*terms, *_stems(terms)] if stems else terms


def _stems(terms: list[str]) -> list[str]:
    """A code's leading runs of letters and digits, where they make a code (`is_code`) that is not already one of
    the word's terms: "kdl40v5100b" gives "kdl40", "kdl40v" and "kdl40v5100". Shops append
    colour, region and pack suffixes to one model number ("lw1002w" for "lw1002", "id9svc" for "id9s"); the stem is
    the term both spellings share, and its idf weighs a series stem shared by many models as little as it is worth.
    Only codes of STEM_MAX_CHARS or fewer have stems, so a text's stems grow with its length, not with its square."""
    seen, found = set(terms), []
    for term in terms:
        if len(term) > STEM_MAX_CHARS or not is_code(term):
            continue
        runs = [sum(1 for _ in run) for _, run in itertools.groupby(term, str.isdigit)]
        for end in itertools.accumulate(runs[:-1]):
            stem = term[:end]
            if stem not in seen and is_code(stem):
                seen.add(stem)
                found.append(stem)
    return found


def _has_digit(word: str) -> bool:
    return not word.isalpha() and any(c.isdigit() for c in word)  # most words: decided without a look at each letter


def is_code(term: str) -> bool:
    """A model or part number: letters and digits together ("kdl40v5100", "5d"), or five digits or more."""
    if term.isdigit():
        return len(term) >= 5
    if term.isalpha():  # most terms: decided without a look at each character
        return False
    return any(c.isdigit() for c in term) and any(c.isalpha() for c in term)


def term_id(term: str) -> int:
    """A stable 32-bit id: the same in every process and store, with no vocabulary to keep."""
    return _cached_term_id(term) if len(term) <= CACHED_TERM_CHARS else _hashed_term_id(term)


def _hashed_term_id(term: str) -> int:
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "little")


_cached_term_id = lru_cache(maxsize=CACHED_TERMS)(_hashed_term_id)


def term_vector(text: str, stems: bool = True) -> SparseVector:
    """The text's terms weighted 1 + ln tf, L2-normalised: what a document stores and a query sends."""
    return _weighted(_ids(analyze(text, stems)))


def code_vector(text: str, stems: bool = True) -> SparseVector:
    """The text's term vector with only its code terms kept, their weights unchanged (normalised over all terms)."""
    terms = analyze(text, stems)
    return _codes(terms, _weighted(_ids(terms)))


NGRAM = 3
"""Characters an n-gram holds: scikit-learn's `TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3))`, which
outranked words on the shared catalog pairs (titles and descriptions alike) and which the Sparkly blocker (VLDB 2023)
builds on."""


def char_ngrams(text: str, n: int = NGRAM) -> list[str]:
    """Each word's n-grams of characters, the word padded with a space on either side (scikit-learn's `char_wb`): a
    misspelt or differently split word still shares most of its n-grams ("lx350h" and "lx-350h"); a word shorter than
    n - 1 gives itself, padded, once."""
    grams: list[str] = []
    for word in _words(text):
        padded = f" {word} "
        grams += [padded[i : i + n] for i in range(max(len(padded) - n + 1, 1))]
    return grams


def ngram_vector(text: str) -> SparseVector:
    """The text's character n-grams weighted 1 + ln tf, L2-normalised, ids hashed as terms' are: what a document
    stores and a query sends, with no vocabulary."""
    return _weighted(_ids(char_ngrams(text)))


def _ids(terms: list[str]) -> list[int]:
    return list(map(term_id, terms))


def _weighted(ids: list[int]) -> SparseVector:
    """The vector of a text whose terms have these ids."""
    counts = Counter(ids)
    indices = sorted(counts)
    weights = [1.0 + math.log(counts[i]) for i in indices]
    norm = math.sqrt(math.fsum(w * w for w in weights))
    return SparseVector(np.array(indices, dtype=np.uint32), np.array([w / norm for w in weights], dtype=np.float32))


def _codes(terms: list[str], vector: SparseVector) -> SparseVector:
    """`vector` (the term vector of `terms`) with only the code terms kept; each distinct term is looked at once."""
    return _kept(vector, {term_id(t) for t in set(terms) if is_code(t)})


def _kept(vector: SparseVector, ids: set[int]) -> SparseVector:
    """`vector` with only the terms whose ids are in `ids`."""
    if not ids:
        return SparseVector.empty()
    kept = np.fromiter((i in ids for i in vector.indices.tolist()), dtype=bool, count=len(vector))
    return SparseVector(vector.indices[kept], vector.values[kept])


def idf(document_frequency: np.ndarray, documents: int) -> np.ndarray:
    """ln(1 + (N - df + 0.5) / (df + 0.5)): Qdrant's idf modifier, always positive."""
    df = np.asarray(document_frequency, dtype=np.float64)
    return np.log1p((documents - df + 0.5) / (df + 0.5))


def document_frequencies(documents: Iterable[SparseVector]) -> tuple[Counter[int], int]:
    """How many of the documents hold each term id, and how many documents hold any term (Qdrant counts a point
    without the sparse vector as absent)."""
    frequencies: Counter[int] = Counter()
    count = 0
    for document in documents:
        if len(document):
            frequencies.update(document.indices.tolist())
            count += 1
    return frequencies, count


def lexical_scores(
    query: SparseVector, documents: Sequence[SparseVector], frequencies: Counter[int], n_documents: int
) -> np.ndarray:
    """sum_t idf_t q_t d_t of the query against each document, with the given catalog-wide document frequencies: the
    brute-force reference the stores' sparse search is checked against."""
    if not len(query) or not documents:
        return np.zeros(len(documents))
    weights = idf(np.array([frequencies.get(int(i), 0) for i in query.indices]), n_documents) * query.values
    position = dict(zip(query.indices.tolist(), weights.tolist(), strict=True))
    scores = np.zeros(len(documents))
    for n, doc in enumerate(documents):
        pairs = zip(doc.indices.tolist(), doc.values.tolist(), strict=True)
        scores[n] = math.fsum(position.get(t, 0.0) * v for t, v in pairs)
    return scores


WHOLE_TEXT = "text"
"""The lexical field of title and description together: a part number matches wherever each shop wrote it."""
CODES = "lexical_codes"
"""The component of a query's codes against the stored whole-text vectors."""


class LexicalFields:
    """A bundle's lexical vectors, named `lexical_<field>` as the stores and `scores` name them: one per embedded
    field and one for the whole text; with `ngrams`, the same fields' character n-grams beside them, named
    `ngrams_<field>`; an item's documents and a query's terms (a free text stands for every field)."""

    def __init__(self, fields: Sequence[str], stems: bool = True, ngrams: bool = False) -> None:
        self.stems = stems
        """Whether the analyzer adds code stems (analyzer v2; a v1 bundle's stores hold none)."""
        self.names = {field: f"lexical_{field}" for field in (*fields, WHOLE_TEXT)}
        """The stored sparse vectors of words, by field."""
        self.ngram_names = {field: f"ngrams_{field}" for field in (*fields, WHOLE_TEXT)} if ngrams else {}
        """The stored sparse vectors of character n-grams, by field; none without `ngrams`."""
        self.stored = (*self.names.values(), *self.ngram_names.values())
        """Every sparse vector a store keeps for an item."""
        self.using = {CODES: self.names[WHOLE_TEXT]}
        """The stored vector each query scores against, where it is not the query's own name."""
        self.components = [*self.names.values(), CODES, *self.ngram_names.values()]
        """Every lexical component a rerank shows, in order."""

    def _terms(self, title: str | None, description: str | None) -> tuple[dict[str, list[int]], list[str]]:
        """Each field's term ids, and the whole text's terms; the whole text's are the title's then the
        description's, what analysing the two joined by a newline gives (a newline composes, changes case and splits
        with nothing), for a third of the work."""
        title_terms, description_terms = analyze(title or "", self.stems), analyze(description or "", self.stems)
        title_ids, description_ids = _ids(title_terms), _ids(description_terms)
        ids = {"title": title_ids, "description": description_ids, WHOLE_TEXT: title_ids + description_ids}
        return ids, title_terms + description_terms

    def present(
        self, fields: Sequence[str], present: np.ndarray, names: Collection[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Per lexical component (those in `names`, else all), which items hold its field, from `present` (items x
        `fields`, the embedded fields): the whole text, never missing, is held by all."""
        everyone = np.ones(len(present), dtype=bool)
        held = {
            name: present[:, fields.index(field)] if field in fields else everyone
            for name, field in self._by_name().items()
            if names is None or name in names
        }
        return held if names is not None and CODES not in names else {**held, CODES: everyone}

    def _by_name(self) -> dict[str, str]:
        """The field of each stored vector."""
        return {name: field for names in (self.names, self.ngram_names) for field, name in names.items()}

    def _ngrams(self, title: str | None, description: str | None) -> dict[str, SparseVector]:
        """Each field's n-gram vector; the whole text's are the title's words then the description's."""
        texts = {"title": title or "", "description": description or ""}
        texts[WHOLE_TEXT] = f"{texts['title']}\n{texts['description']}"
        return {name: ngram_vector(texts[field]) for field, name in self.ngram_names.items()}

    def documents(self, title: str, description: str) -> dict[str, SparseVector]:
        """A field without a term gets an empty vector (a store keeps none)."""
        ids, _ = self._terms(title, description)
        words = {name: _weighted(ids[field]) for field, name in self.names.items()}
        return {**words, **self._ngrams(title, description)}

    def queries(
        self, title: str | None, description: str | None, free_text: str | None = None
    ) -> dict[str, SparseVector]:
        """A field the query has no term in gets no vector: its component is then unknown, not 0. Keyed by component
        (`using` names the stored vector a component is scored against)."""
        if free_text is not None:
            terms = analyze(free_text, self.stems)
            ids = {WHOLE_TEXT: _ids(terms)}
            whole_ngrams = ngram_vector(free_text)
            ngrams = dict.fromkeys(self.ngram_names.values(), whole_ngrams)
        else:
            ids, terms = self._terms(title, description)
            ngrams = self._ngrams(title, description)
        whole = _weighted(ids[WHOLE_TEXT])
        vectors = {  # a free text stands for every field
            name: _weighted(ids[field]) if field != WHOLE_TEXT and field in ids else whole
            for field, name in self.names.items()
        }
        vectors[CODES] = _codes(terms, whole)
        vectors.update(ngrams)
        return {name: vector for name, vector in vectors.items() if len(vector)}

    def item_queries(
        self, title: str, description: str, documents: Mapping[str, SparseVector]
    ) -> dict[str, SparseVector]:
        """`queries` of a stored item from its `documents` as stored: a field's document is its query, so only the
        codes are looked for in the texts (making the rest anew cost a fused by-id request 0.15 ms of 5 at 100k
        items)."""
        whole = documents.get(self.names[WHOLE_TEXT], SparseVector.empty())
        vectors = {name: documents[name] for name in self.stored if name in documents}
        codes = {term_id(term) for term in code_terms(title, self.stems) | code_terms(description, self.stems)}
        vectors[CODES] = _kept(whole, codes)
        return {name: vector for name, vector in vectors.items() if len(vector)}


def lexical_fields(manifest: Manifest) -> LexicalFields | None:
    """The bundle's lexical fields (the fields it embeds, and the whole text), with their character n-grams where
    the manifest names an n-gram analyzer; None without lexical vectors."""
    lexical = manifest.lexical
    if lexical is None:
        return None
    fields = [f.name for f in manifest.fields if f.weight > 0]
    return LexicalFields(fields, lexical.analyzer == CODE_STEMS, ngrams=lexical.ngrams is not None)
