"""dedup's compiled shard scan (tasks/dedup/kernels/scan.py) against the numpy path it replaces on a large corpus:
``textnorm.normalize_many``, md5, ``minhash.word_hash_stream`` (blake2b word hashes from hashlib) and
``signing.shingle_sets``; the word-character table against Python's ``re``; BLAKE2b against hashlib."""

import hashlib
import re

import numpy as np
import pyarrow as pa
import pytest

from tasks.common.matching import minhash, textnorm
from tasks.dedup import signatures, signing
from tasks.dedup.kernels import fold, scan

TEXTS = [
    "Hello,  World! \t foo_bar x\r\nNEXT\x0bline\x0cform\x1cfile\x1dgroup\x1erec\x1funit  end ",
    "",
    "   \t ",
    "...!!! ---",
    "Ünïcödé wörds ﬁne\u200b ok 𝐀𝐁 é\u00a0nbsp Straße ΣΊΣΥΦΟΣ",
    "日本語のテキスト です 12 ３４ ½ x²",
    "e\u0301 combining, ﬀ ligature, \u2028 line sep, \u3000ideographic space, 🙂emoji🙂 end",
    "one two three four five one two three four five one two three four five six",
]
WORDS = ["a", "x" * 127, "y" * 128, "z" * 129, "w" * 256, "v" * 257, "é" * 150, "q" * 400]
TEXTS += [" ".join([w, "q", w, "r", "s", "t", w.upper()]) for w in WORDS]


def _numpy_path(texts: list[str], n: int):
    normalized = textnorm.normalize_many(texts)
    values, doc = minhash.word_hash_stream(normalized, minhash.WordHashes())
    hashes = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in normalized]
    n_words = np.bincount(doc, minlength=len(texts))
    sets = [minhash.sorted_unique(w) for w in minhash.shingle_windows(values, doc, len(texts), n)]
    return hashes, n_words, [len(text) for text in normalized], sets


@pytest.mark.parametrize("small_table", [False, True])
def test_the_scan_equals_the_numpy_path(monkeypatch, small_table):
    if small_table:  # a table that fills every few words: emptied and refilled mid-shard, same values
        monkeypatch.setattr(scan, "TABLE_SLOTS", 8)
        monkeypatch.setattr(scan, "KEY_BYTES", 300)
        monkeypatch.setattr(scan, "_TABLE", [])
    for n in (1, 5):
        hashes, n_words, n_chars, flat, sizes = scan.shard_values(textnorm.arrow_strings(TEXTS), n)
        want_hashes, want_words, want_chars, want_sets = _numpy_path(TEXTS, n)
        assert hashes == want_hashes and n_words.tolist() == want_words.tolist() and n_chars.tolist() == want_chars
        assert sizes.tolist() == [len(s) for s in want_sets] and sizes[1] == sizes[3] == 0
        assert flat.dtype == np.uint64 and np.array_equal(flat, np.concatenate(want_sets))


def test_a_worker_signs_the_same_compiled_or_not(monkeypatch):
    texts = pa.array(TEXTS * 3, pa.large_string()).slice(2)  # an offset array, as a shard of the corpus is
    a, b = minhash.permutations(16, 3)
    monkeypatch.setattr(signing, "compiled_now", lambda: False)
    plain = signatures._sign_packed(texts, 5, a, b)
    monkeypatch.setattr(signing, "compiled_now", lambda: True)
    fast = signatures._sign_packed(texts, 5, a, b)
    assert fast[0] == plain[0]
    for got, want in zip(fast[1:], plain[1:]):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_blake2b_equals_hashlib_across_block_boundaries():
    scan.prepare()
    data = np.frombuffer(bytes(range(256)) * 2, np.uint8)
    for size in (0, 1, 7, 8, 127, 128, 129, 255, 256, 257, 300):
        want = int.from_bytes(hashlib.blake2b(data[:size].tobytes(), digest_size=8).digest(), "little")
        assert int(scan._blake2b(data, 0, size)) == want, size


def test_word_characters_are_the_word_class_of_re():
    table = scan.word_characters()
    every = "".join(map(chr, range(0x110000)))
    want = np.zeros(len(every), np.uint8)
    want[[m.start() for m in re.finditer(r"\w", every)]] = 1
    assert np.array_equal(table, want)


def test_every_fold_table_entry_normalizes_as_textnorm_does_in_context():
    start, length, pool = fold.fold_table()
    entries = np.flatnonzero(length)
    assert len(entries) > 40_000 and not length[:128].any() and not length[0xD800:0xE000].any()
    for cp in entries.tolist():
        char, folded = chr(cp), pool[start[cp] : start[cp] + length[cp]].tobytes().decode("utf-8")
        text = f"Ab{char}x {char}{char}\u00e9{char}Z"
        want = " ".join(f"ab{folded}x {folded}{folded}\u00e9{folded}z".split())
        assert textnorm.normalize(text) == want, hex(cp)


def test_random_texts_fold_as_textnorm_normalizes():
    rng = np.random.default_rng(11)
    alphabet = list("aZ_9 .\t\n\x1c") + ["\u00e9", "\u00df", "\u00a0", "\u2026", "\u00bd", "\uff21", "\u3000"]
    alphabet += [
        "\u0301",
        "\u200b",
        "\u1161",
        "\u11a8",
        "\uac00",
        "\u0b3e",
        "\u0b47",
        "\ufb01",
        "\U0001f642",
        "\U0001d400",
    ]
    alphabet += ["\u03a3", "\u0130", "\u2028", "\x85", "\u1e9e", "\u3099", "\u304b", "\u212b", "\u0041\u030a"]
    texts = ["".join(rng.choice(alphabet, int(rng.integers(0, 30)))) for _ in range(3000)]
    tabled = alphabet[:9] + ["\u00e9", "\u00df", "\u00a0", "\u2026", "\u00bd", "\uff21", "\u3000", "\uac00", "\ufb01"]
    tabled += ["\U0001f642", "\u03a3", "\u0130", "\u1e9e", "\u304b", "\u212b"]  # texts folded in the kernel
    texts += ["".join(rng.choice(tabled, int(rng.integers(0, 30)))) for _ in range(3000)]
    _, length, _ = fold.fold_table()
    assert all(ord(c) < 128 or length[ord(c)] for c in tabled)
    data, offsets = fold.normalized_bytes(textnorm.arrow_strings(texts))
    got = [data[a:b].tobytes().decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    assert got == textnorm.normalize_many(texts)
