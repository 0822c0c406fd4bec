"""The shared MinHash kit (tasks/common/matching/minhash.py) against datasketch and against hand-computed values."""

import re
import sys

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from tasks.common.matching import minhash, textnorm


def test_rolling_hash_is_the_polynomial_mod_2_64():
    values = np.array([3, 1, 4, 1, 5], dtype=np.uint64)
    m = int(minhash.MULTIPLIER)
    want = [(a * m * m + b * m + c) % 2**64 for a, b, c in zip([3, 1, 4], [1, 4, 1], [4, 1, 5])]
    assert minhash.rolling_hashes(values, 3).tolist() == want
    assert minhash.rolling_hashes(values, 6).size == 0


def test_equal_shingles_hash_equal_across_documents_and_caches():
    a = minhash.shingle_hashes("the cat sat on the mat".split(), 3)
    b = minhash.shingle_hashes("a dog sat on the mat".split(), 3, minhash.WordHashes())
    assert a[2:].tolist() == b[2:].tolist() and a[0] != b[0]


def test_signatures_equal_datasketch_update_batch():
    rng = np.random.default_rng(0)
    a, b = minhash.permutations(64, 7)
    shingles = [rng.integers(0, 2**63, size=n, dtype=np.uint64) for n in (1, 5, 300, 9000)]
    ours = minhash.signatures(shingles + [np.zeros(0, np.uint64)], a, b)
    for row, h in zip(ours, shingles):
        reference = MinHash(num_perm=64, seed=7, hashfunc=int)
        reference.update_batch(minhash.fold_to_32_bits(h).tolist())
        np.testing.assert_array_equal(row, reference.hashvalues)
    assert (ours[-1] == 2**32 - 1).all()


@pytest.mark.parametrize(("num_perm", "seed"), [(2, 0), (128, 1), (256, 20240611)])
def test_permutations_are_datasketchs(num_perm, seed):
    a, b = minhash.permutations(num_perm, seed)
    want_a, want_b = MinHash(num_perm=num_perm, seed=seed).permutations
    assert a.dtype == want_a.dtype == np.uint32 and (a == want_a).all() and (b == want_b).all()


def test_word_hash_stream_and_windows_equal_one_document_at_a_time():
    # pieces holding 0, 1 and 2 words ("--", "it's"), a word with "_", digits, non-ASCII, empty documents
    texts = [
        "the cat sat on the mat , it's here -- 42 times",
        "",
        "x",
        "snake_case déjà vu a-b-c",
        "",
        "the cat sat on",
    ]
    cache = minhash.WordHashes()
    values, doc = minhash.word_hash_stream(texts, cache)
    words = [textnorm.words_of_normalized(t) for t in texts]
    assert doc.tolist() == [i for i, w in enumerate(words) for _ in w]
    assert values.tolist() == [cache[x] for w in words for x in w]
    windows = minhash.shingle_windows(values, doc, len(texts), 3)
    assert [w.tolist() for w in windows] == [minhash.shingle_hashes(w, 3, cache).tolist() for w in words]


def test_word_hash_stream_equals_the_regex_on_mixed_text():
    # every ASCII character next to ASCII and non-ASCII word characters (accents, a combining mark, CJK, a
    # superscript digit) and non-ASCII non-word ones (dash, curly quote, NBSP-free punctuation)
    rng = np.random.default_rng(0)
    alphabet = [chr(c) for c in range(32, 127)] + list("éßЖ中²\u0301—’«")
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 60)))) for _ in range(400)]
    texts += ["".join(chr(c) for c in range(32, 127)), "_", "a_b", "__init__", "£600m", "x—y", "—", " a ", ""]
    cache = minhash.WordHashes()
    values, doc = minhash.word_hash_stream(texts, cache)
    words = [textnorm.words_of_normalized(t) for t in texts]
    assert doc.tolist() == [i for i, w in enumerate(words) for _ in w]
    assert values.tolist() == [cache[x] for w in words for x in w]


def test_alphanumeric_strings_are_one_regex_word():
    # word_hash_stream skips the regex for str.isalnum() pieces: every such character must be a \w character
    every = np.arange(0, sys.maxunicode + 1, dtype="<u4")
    every = every[(every < 0xD800) | (every > 0xDFFF)].tobytes().decode("utf-32-le")
    alphanumeric = "".join(c for c in every if c.isalnum())
    assert textnorm.words_of_normalized(alphanumeric) == [alphanumeric]


def test_window_signatures_equal_signatures_of_the_cut_windows():
    words = np.random.default_rng(1).integers(0, 2**63, size=200, dtype=np.uint64)
    a, b = minhash.permutations(32, 0)
    windows = [(0, 200), (10, 60), (150, 200)]
    got = minhash.window_signatures(words, windows, 5, a, b)
    want = minhash.signatures([minhash.rolling_hashes(words[s:e], 5) for s, e in windows], a, b)
    np.testing.assert_array_equal(got, want)


def test_signature_agreement_estimates_jaccard():
    base = [f"w{i}" for i in range(300)]
    edit = base[:230] + [f"x{i}" for i in range(70)]  # 5-grams: I = 226, S = 296, J = 226 / 366
    a, b = minhash.permutations(256, 1)
    sig = minhash.signatures([np.unique(minhash.shingle_hashes(t, 5)) for t in (base, edit)], a, b)
    # 256 permutations: standard error sqrt(J(1-J)/256) = 0.03; allow 4 sigma
    assert float(np.mean(sig[0] == sig[1])) == pytest.approx(226 / 366, abs=0.12)


@pytest.mark.parametrize(
    ("threshold", "num_perm", "weights"),
    [
        (0.3, 64, (0.5, 0.5)),
        (0.5, 64, (0.5, 0.5)),
        (0.8, 64, (0.05, 0.95)),
        (0.8, 128, (0.05, 0.95)),
        (0.9, 256, (0.5, 0.5)),
        (0.15, 32, (0.9, 0.1)),
        (0.0, 16, (0.5, 0.5)),
        (0.95, 256, (0.3, 0.7)),
    ],
)
def test_bands_and_rows_are_datasketchs(threshold, num_perm, weights):
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights)
    assert minhash.lsh_bands_rows(threshold, num_perm, weights) == (lsh.b, lsh.r)
    assert minhash.p_candidate(threshold, lsh.b, lsh.r) == pytest.approx(1 - (1 - threshold**lsh.r) ** lsh.b)


@pytest.mark.parametrize(
    ("threshold", "num_perm", "weights"),
    [(0.99, 128, (0.5, 0.5)), (1.5, 64, (0.5, 0.5)), (0.5, 1, (0.5, 0.5)), (0.5, 64, (0.6, 0.6))],
)
def test_band_rule_raises_where_datasketch_raises(threshold, num_perm, weights):
    with pytest.raises(ValueError) as theirs:
        MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights)
    with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
        minhash.lsh_bands_rows(threshold, num_perm, weights)


def test_candidate_pairs_equal_datasketch_lsh_queries():
    rng = np.random.default_rng(2)
    base = rng.integers(0, 2**63, size=80, dtype=np.uint64)
    docs = [
        np.unique(np.where(rng.random(80) < p, rng.integers(0, 2**63, size=80, dtype=np.uint64), base))
        for p in np.linspace(0.0, 0.9, 40)
    ]  # from near copies to unrelated sets
    a, b = minhash.permutations(64, 3)
    sigs = minhash.signatures(docs, a, b)
    bands, rows = minhash.lsh_bands_rows(0.5, 64)
    query, index = minhash.candidate_pair_arrays(*(minhash.band_keys(sigs, bands, rows),) * 2)
    got = list(zip(query.tolist(), index.tolist()))
    lsh = MinHashLSH(num_perm=64, params=(bands, rows))
    sketches = [MinHash(hashvalues=s, permutations=(a, b), scheme="affine32") for s in sigs]
    for i, sketch in enumerate(sketches):
        lsh.insert(i, sketch)
    want = sorted((i, j) for i, sketch in enumerate(sketches) for j in lsh.query(sketch))
    assert got == want and len(want) > len(docs)  # more than the self-pairs


def test_jaccard_of_hash_sets():
    assert minhash.jaccard(np.array([1, 2, 3], np.uint64), np.array([2, 3, 4, 5], np.uint64)) == pytest.approx(2 / 5)
    # two empty shingle sets share nothing: 0.0, so wordless texts are never near duplicates or leak matches
    assert minhash.jaccard(np.zeros(0, np.uint64), np.zeros(0, np.uint64)) == 0.0
    assert minhash.jaccard(np.zeros(0, np.uint64), np.array([7], np.uint64)) == 0.0


def test_jaccards_with_equals_the_one_pair_jaccard_bit_for_bit():
    rng = np.random.default_rng(3)
    for _ in range(200):
        x = np.unique(rng.integers(0, 40, rng.integers(0, 25)).astype(np.uint64))
        ys = [np.unique(rng.integers(0, 40, rng.integers(0, 25)).astype(np.uint64)) for _ in range(rng.integers(1, 6))]
        assert minhash.jaccards_with(x, ys).tolist() == [minhash.jaccard(x, y) for y in ys]
    # by hand: {1,2,3} with {2,3,4} (2 shared of 4), {} (0 of 3), itself (1.0); two empty sets: 0.0 by convention
    three = np.array([1, 2, 3], np.uint64)
    got = minhash.jaccards_with(three, [np.array([2, 3, 4], np.uint64), np.array([], np.uint64), three])
    assert got.tolist() == [0.5, 0.0, 1.0]
    assert minhash.jaccards_with(np.array([], np.uint64), [np.array([], np.uint64)]).tolist() == [0.0]
