"""The in-memory copy of every item's vectors (VectorRows): rows are reused after removal, growth keeps contents,
vectors come back unit-norm."""

from __future__ import annotations

import numpy as np

from metricsearch.service.store.edge.vector_rows import VectorRows


def test_put_take_replace_remove_and_reuse():
    vector_rows = VectorRows({"v": 3})
    vector_rows.put(["a", "b"], ["A", "B"], {"v": np.array([[3.0, 0, 0], [0, 2.0, 0]])})
    ids, vectors = vector_rows.take(vector_rows.row_of(["b", "a"]))
    assert ids == ["B", "A"]
    np.testing.assert_allclose(vectors["v"], [[0, 1, 0], [1, 0, 0]])
    vector_rows.put(["a"], ["A"], {"v": np.array([[0, 0, 5.0]])})
    np.testing.assert_allclose(vector_rows.take(vector_rows.row_of(["a"]))[1]["v"], [[0, 0, 1]])
    row_of_a = vector_rows.row_of(["a"])
    vector_rows.remove(["a", "never-put"])
    assert len(vector_rows) == 1 and vector_rows.row_of(["a", "never-put", "b"]).tolist() == [-1, -1, 1]
    vector_rows.put(["c"], ["C"], {"v": np.zeros((1, 3))})  # reuses a's row; a zero vector stays zero
    assert len(vector_rows) == 2 and vector_rows.nbytes == 2 * 3 * 4 and vector_rows.row_of(["c"]) == row_of_a
    ids, vectors = vector_rows.take(vector_rows.row_of(["c", "b"]))
    assert ids == ["C", "B"]
    np.testing.assert_allclose(vectors["v"], [[0, 0, 0], [0, 1, 0]])


def test_growth_keeps_every_row():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(5000, 4)).astype(np.float32)
    vector_rows = VectorRows({"v": 4})
    for start in range(0, 5000, 700):
        ids = [str(i) for i in range(start, min(start + 700, 5000))]
        vector_rows.put(ids, [f"x{i}" for i in ids], {"v": vectors[start : start + 700]})
    expected = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    ids, taken = vector_rows.take(vector_rows.row_of([str(i) for i in range(5000)]))
    assert ids == [f"x{i}" for i in range(5000)]
    np.testing.assert_allclose(taken["v"], expected, atol=1e-6)


def test_growth_never_copies_what_it_holds():
    """Growing adds a block: the rows already written stay where they are (no second copy is ever made)."""
    vector_rows = VectorRows({"v": 2})
    vector_rows.put(["first"], ["F"], {"v": np.array([[1.0, 0.0]])})
    first_block = vector_rows._blocks["v"][0]
    vector_rows.put([str(i) for i in range(10_000)], [None] * 10_000, {"v": np.ones((10_000, 2))})
    assert vector_rows._blocks["v"][0] is first_block
    assert [len(b) for b in vector_rows._blocks["v"]] == [1024, 1024, 2048, 4096, 8192]
    np.testing.assert_allclose(vector_rows.take(vector_rows.row_of(["first"]))[1]["v"], [[1.0, 0.0]])
