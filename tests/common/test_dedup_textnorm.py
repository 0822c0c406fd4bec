"""The shared normalization removes every Unicode format character (Cf), so copies that differ only by them
are exact duplicates in dedup; wordless texts are never near duplicates."""

from __future__ import annotations

import random
import sys
import unicodedata

from dedup_fixtures import make_cfg, text, write_rows
from tasks.common.matching import textnorm

# from different blocks: Latin-1 (soft hyphen), Arabic (letter mark), Mongolian (vowel separator), General
# Punctuation (LRM, RLM, isolates LRI/RLI/PDI, word joiner), Arabic Presentation Forms-B (BOM), Kaithi
# (number sign), Musical Symbols (begin beam), Tags (language tag, tag letter a)
FORMAT = [
    "\u00ad",
    "\u061c",
    "\u180e",
    "\u200e",
    "\u200f",
    "\u2066",
    "\u2067",
    "\u2069",
    "\u2060",
    "\ufeff",
    "\U000110bd",
    "\U0001d173",
    "\U000e0001",
    "\U000e0061",
]


def sprinkle(plain: str) -> str:
    """``plain`` with one format character inside every word, in turn."""
    return " ".join(w[:2] + FORMAT[k % len(FORMAT)] + w[2:] for k, w in enumerate(plain.split()))


def test_every_cf_code_point_and_no_other_is_removed():
    every = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]  # no surrogate in UTF-8
    cf = "".join(c for c in every if unicodedata.category(c) == "Cf")
    other = "".join(c for c in every if unicodedata.category(c) != "Cf")
    assert len(cf) > 150 and all(unicodedata.category(c) == "Cf" for c in FORMAT)
    assert textnorm.remove_format_characters(cf) == ""
    assert textnorm.remove_format_characters(other) == other
    # the Arrow (RE2) class of normalize_many removes the same code points
    assert textnorm.normalize_many([cf, other]) == ["", textnorm.normalize(other)]
    # NFKC and casefold never produce a Cf character, so removing them first is enough
    cf_set = set(cf)
    assert not [c for c in other if not cf_set.isdisjoint(unicodedata.normalize("NFKC", c).casefold())]


def test_many_texts_normalize_as_one_at_a_time():
    # ASCII and not; Cf inside words; NBSP, ligature, U+2000 and U+2028 (NFKC or str.split spaces), the file
    # separator U+001C (a str.split space that NFKC keeps), ß and dotted I (casefold), a non-BMP letter, a
    # combining mark, empty and all-space texts
    texts = [
        "",
        "   ",
        "\t\nA  B\r\n",
        "\u00a0x\u00a0y",
        "\ufb01ne \u2000 a\u2028b\x1cc",
        "Stra\u00dfe \u0130stanbul",
        "\U0001d400 \u0301a",
        "\u3000x\u3000",
        sprinkle("Soft-hyphenated Wörter and isolates"),
    ]
    assert textnorm.normalize_many(texts) == [textnorm.normalize(t) for t in texts]
    assert textnorm.normalize_many(texts)[4] == "fine a b c" and textnorm.normalize_many(texts)[5] == "strasse i̇stanbul"


def test_texts_differing_only_by_format_characters_normalize_alike():
    plain = "Soft-hyphenated Wörter and bidirectional isolates hide nothing"
    assert textnorm.normalize(sprinkle(plain)) == textnorm.normalize(plain) == plain.casefold()
    assert textnorm.words(sprinkle(plain)) == textnorm.words(plain)
    assert textnorm.normalize("\u200e\u2066\ufeff") == "" and textnorm.words("\u00ad\U000e0001") == []


def test_copies_differing_only_by_format_characters_are_exact_duplicates(tmp_path, run_dedup):
    plain = text("w", 30)
    ids = write_rows(tmp_path, "src", [{"text": plain}, {"text": sprinkle(plain)}])
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    assert [duplicate[d] for d in ids] == [False, True]
    counts = metrics["sources"]["src"]
    assert (counts["exact_duplicates"], counts["near_duplicates"]) == (1, 0)
    assert [m["kind"] for m in records[ids[0]]["members"]] == ["kept", "exact"]


def test_wordless_texts_are_not_near_duplicates_and_empty_ones_never_merge(tmp_path, run_dedup):
    # "!!!" twice: the same characters, an exact copy; "???" has no words either but other characters;
    # two texts of format characters only normalize to "" and stay apart (empty_docs)
    ids = write_rows(
        tmp_path,
        "src",
        [{"text": "!!!"}, {"text": "!!!"}, {"text": "???"}, {"text": "\u200e\u2066"}, {"text": "\ufeff"}],
    )
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    assert [duplicate[d] for d in ids] == [False, True, False, False, False]
    counts = metrics["sources"]["src"]
    assert (counts["exact_duplicates"], counts["near_duplicates"], counts["empty_docs"]) == (1, 0, 2)
    assert list(records) == [ids[0]] and records[ids[0]]["pairs"] == []
    assert metrics["lsh"]["candidate_pairs"] == 0


def test_ascii_words_fast_path_equals_the_regex():
    every_ascii = "".join(map(chr, range(128)))
    rng = random.Random(0)
    texts = [every_ascii, every_ascii[::-1], "Snake_Case x-y 3.14 @User_1 -_- ", ""]
    texts += ["".join(rng.choice(every_ascii) for _ in range(200)) for _ in range(200)]
    for sample in texts:
        assert textnorm.words(sample) == textnorm.words_of_normalized(textnorm.normalize(sample))


def test_written_out_format_ranges_equal_the_scan():
    # the table kept for the running Unicode version (import speed) is the scan of Python's own unicodedata
    assert textnorm.format_ranges() == textnorm.code_point_ranges(textnorm.format_characters())
    for version, ranges in textnorm._KNOWN_FORMAT_RANGES.items():
        if version == unicodedata.unidata_version:
            assert ranges == textnorm.code_point_ranges(textnorm.format_characters())


def test_arrow_strings_equal_pa_array():
    import pyarrow as pa

    texts = ["", "a b", "déjà \U0001d400", "x" * 1000]
    assert textnorm.arrow_strings(texts).equals(pa.array(texts, pa.large_string()))
    assert textnorm.normalize_many(pa.chunked_array([pa.array(texts)])) == textnorm.normalize_many(texts)
