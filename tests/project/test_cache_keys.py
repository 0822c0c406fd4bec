"""Cache keys computed, never listed (issue 62 item 1): every cache keys its stored results by the import closure
of the code that computes them (``tasks.common.imports.closure_fingerprint``), so no edit can leave a cache
serving the results of code that has changed.

In a temporary copy of the package (``tasks/`` and ``clozeline/``), a subprocess with ``PYTHONPATH`` at the copy
computes each cache's key through the cache's own function, then appends a comment line to one file at a time:

- every file of the cache's closure changes the key (and every project file that computing the key imports is
  in that closure: no import the closure misses);
- every other file of the package (``tasks/report/render/pages.py``, another stage's code, the params' models,
  whose values the caches key by value) leaves it alone.

Each cache's params key is its params section (sub-model) less the params declared to change no stored result
(``NOT_IN_KEY``, as tokenize's ``NOT_ENCODING``): a param added later keys the cache by default.

And the replay of the issue: a bug put into ``tasks/leakage/lexical/shingles.py`` (``shingles.py`` on 1e1da4d,
outside the lexical cache's hand-written list) after a run that cached it is not served once the bug is reverted:
the next run audits in full (the code key changed) and its outputs equal a from-scratch run's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Per cache: the modules whose import closure keys it, the files that closure must hold (those the issue found
#: missing from hand-written lists, and the functions each cache stores), and the expression computing its key.
CACHES = {
    "ingest": (
        ["tasks.ingest"],
        [
            "tasks/ingest/text.py",
            "tasks/ingest/tabular.py",
            "tasks/ingest/builtin.py",
            "tasks/ingest/records.py",
            "tasks/ingest/cache.py",
        ],
        "UnitCache(Path(scratch), True, pa.schema([('text', pa.string())])).code",
    ),
    "dedup_index": (
        ["tasks.dedup.incremental"],
        [
            "tasks/dedup/signatures.py",
            "tasks/common/matching/minhash.py",
            "tasks/common/matching/textnorm.py",
            "tasks/common/matching/pairjaccard.py",
        ],
        "dedup_incremental.fingerprint(P.dedup)",
    ),
    "leakage_lexical": (
        ["tasks.leakage.scan.incremental"],
        [
            "tasks/leakage/lexical/shingles.py",
            "tasks/common/matching/pairjaccard.py",
            "tasks/leakage/lexical/detectors.py",
            "tasks/leakage/lexical/substitution.py",
            "tasks/leakage/lexical/residual.py",
            "tasks/common/matching/confusables.py",
        ],
        "leakage_incremental.fingerprint(P.leakage)",
    ),
    "leakage_planted": (
        ["tasks.leakage.planted.cache"],
        [
            "tasks/leakage/planted/recall.py",
            "tasks/leakage/lexical/shingles.py",
            "tasks/common/matching/pairjaccard.py",
        ],
        "plant_cache.fingerprint(P.leakage)",
    ),
    "leakage_embeddings": (
        ["tasks.leakage.semantic.store", "tasks.leakage.semantic.encoder"],
        [
            "tasks/leakage/semantic/windows.py",
            "tasks/leakage/semantic/encoder.py",
            "tasks/common/models/encoders.py",
            "tasks/common/runtime/device.py",
        ],
        "embedding_store.layouts_key(embedding_store.fingerprint(fake_encoder), P.leakage.semantic)",
    ),
    "tokenize_ids": (
        ["tasks.tokenize.cache"],
        ["tasks/tokenize/mlm_blocks.py"],
        "tokenize_cache.fingerprint(word_level, P.tokenize)",
    ),
    "tokenize_tasks": (
        ["tasks.tokenize.task_cache", "tasks.tokenize.cls", "tasks.tokenize.ner"],
        ["tasks/tokenize/cls.py", "tasks/tokenize/ner.py", "clozeline/alignment.py"],
        "task_cache.fingerprint(wrapped, P.tokenize)",
    ),
}

#: Run in the copy: prints ``{"inside": [...], "outside": [...], "loaded": [...], "changed": {file: bool}}``.
PROBE = textwrap.dedent(
    """
    import json, sys, types
    from pathlib import Path

    root, repo, cache, scratch = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    modules, _, expression = json.loads(sys.argv[5])
    import tasks
    assert Path(tasks.__file__).resolve().is_relative_to(root), tasks.__file__  # the copy, not the checkout

    import pyarrow as pa
    from tasks.common.imports import closure_files
    from tasks.config.root import load_params
    P = load_params(repo / "params.yaml")
    if cache == "ingest":
        from tasks.ingest.cache import UnitCache
    elif cache == "dedup_index":
        from tasks.dedup import incremental as dedup_incremental
    elif cache == "leakage_lexical":
        from tasks.leakage.scan import incremental as leakage_incremental
    elif cache == "leakage_planted":
        from tasks.leakage.planted import cache as plant_cache
    elif cache == "leakage_embeddings":
        import torch
        from tasks.leakage.semantic import store as embedding_store
        (Path(scratch) / "weights.bin").write_bytes(b"an encoder's files")
        fake_encoder = types.SimpleNamespace(folder=scratch, precision="fp32", device=torch.device("cpu"),
                                             deterministic=True, cfg=P.leakage.semantic)
    else:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        word_level = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
        if cache == "tokenize_ids":
            from tasks.tokenize import cache as tokenize_cache
        else:
            from transformers import PreTrainedTokenizerFast
            from tasks.tokenize import task_cache
            wrapped = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]")

    def key():
        return json.dumps(eval(expression), sort_keys=True)

    before = key()
    inside = closure_files(modules)
    package = {p for folder in ("tasks", "clozeline") for p in (root / folder).rglob("*.py")}
    loaded = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    loaded = {p for p in loaded if p in package and (root / "tasks" / "config") not in p.parents}
    changed = {}
    for path in sorted(package):
        data = path.read_bytes()
        try:
            path.write_bytes(data + b"\\n# an edit\\n")
            changed[str(path.relative_to(root))] = key() != before
        finally:
            path.write_bytes(data)
    assert key() == before
    rel = lambda files: sorted(str(p.relative_to(root)) for p in files)
    print(json.dumps({"inside": rel(inside), "outside": rel(package - inside), "loaded": rel(loaded),
                      "changed": changed}))
    """
)


def copy_package(dest: Path) -> Path:
    for folder in ("tasks", "clozeline"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "params.yaml", dest / "params.yaml")  # the replay's runs read it from the working folder
    return dest


def run_in(root: Path, script: str, *args: str, extra_path: tuple[str, ...] = ()) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), *extra_path]),
        "HF_HUB_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return copy_package(tmp_path_factory.mktemp("package"))


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_every_file_of_a_cache_closure_changes_its_key_and_no_other_file_does(cache, package, tmp_path):
    modules, required, _ = CACHES[cache]
    out = json.loads(
        run_in(package, PROBE, str(package), str(REPO), cache, str(tmp_path), json.dumps(CACHES[cache])).splitlines()[
            -1
        ]
    )
    inside, changed = set(out["inside"]), out["changed"]
    assert set(required) <= inside, f"{cache}: its closure misses {sorted(set(required) - inside)}"
    assert set(out["loaded"]) <= inside, f"{cache}: imported but not keyed: {sorted(set(out['loaded']) - inside)}"
    assert not any(f.startswith("tasks/config/") for f in inside)  # params are keyed by value
    assert sorted(f for f in inside if not changed[f]) == [], f"{cache}: files of its closure that leave the key"
    assert sorted(f for f in out["outside"] if changed[f]) == [], f"{cache}: files outside that change the key"
    assert "tasks/report/render/pages.py" in out["outside"]


def test_replay_a_reverted_bug_in_shingles_is_not_served_from_the_leakage_cache(package, tmp_path):
    """Issue 62's replay: a run with a bug in ``lexical/shingles.py`` fills the cache; after the revert, the next run
    (a new process, as ``dvc repro`` is) finds the code key changed, audits in full, and writes what a run from an
    empty cache writes, byte for byte."""
    tests = str(REPO / "tests")  # leakage_fixtures
    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        import tasks
        root, scratch, step = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
        assert Path(tasks.__file__).resolve().is_relative_to(root), tasks.__file__
        from leakage_fixtures import night, outputs, run
        metrics, logged = run(scratch / step, night(), **({"incremental": False} if step == "full" else {}))
        (scratch / f"{step}.json").write_text(json.dumps({
            "mode": logged["leakage.mode"], "reason": logged["leakage.reason"],
            "outputs": {k: v.hex() if isinstance(v, bytes) else v for k, v in outputs(scratch / step, metrics).items()},
        }))
        """
    )
    shingles = package / "tasks" / "leakage" / "lexical" / "shingles.py"
    good = shingles.read_text(encoding="utf-8")
    line = "    near = np.union1d(np.flatnonzero(lengths < cfg.min_match_words), np.asarray(sharing, dtype=np.int64))\n"
    assert good.count(line) == 1
    try:  # the bug: the screen lets no document through, so the n-gram, exact and MinHash detectors find nothing
        shingles.write_text(good.replace(line, line + "    near = near[:0]\n"), encoding="utf-8")
        run_in(package, script, str(package), str(tmp_path), "inc", extra_path=(tests,))
    finally:
        shingles.write_text(good, encoding="utf-8")
    buggy = json.loads((tmp_path / "inc.json").read_text())
    run_in(package, script, str(package), str(tmp_path), "inc", extra_path=(tests,))
    fixed = json.loads((tmp_path / "inc.json").read_text())
    run_in(package, script, str(package), str(tmp_path), "full", extra_path=(tests,))
    scratch = json.loads((tmp_path / "full.json").read_text())
    assert buggy["outputs"] != scratch["outputs"]  # the bug shows in the outputs
    assert (fixed["mode"], fixed["reason"]) == ("full", "the cache fingerprint changed (code)")
    assert fixed["outputs"] == scratch["outputs"]


def test_a_param_added_later_keys_each_cache_and_a_declared_neutral_one_does_not(tmp_path):
    """The params part of the keys: the section less ``NOT_IN_KEY``. A new field (a subclass of the section's
    model) changes the key when its value changes; a param declared to change no stored result does not."""
    import types

    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from tasks.config.corpus.dedup import DedupParams
    from tasks.config.corpus.leakage import LexicalParams, SemanticParams
    from tasks.config.corpus.tokenize import TokenizeParams
    from tasks.config.root import load_params
    from tasks.dedup import incremental as dedup_incremental
    from tasks.leakage.lexical.cache_key import params_md5
    from tasks.leakage.planted import cache as plant_cache
    from tasks.leakage.scan import incremental as leakage_incremental
    from tasks.leakage.semantic import store as embedding_store
    from tasks.tokenize import cache as tokenize_cache

    params = load_params(REPO / "params.yaml")
    (tmp_path / "weights.bin").write_bytes(b"an encoder's files")
    word_level = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))

    def store_key(semantic):
        encoder = types.SimpleNamespace(
            folder=tmp_path, precision="fp32", device=torch.device("cpu"), deterministic=True, cfg=semantic
        )
        return embedding_store.fingerprint(encoder)

    # the leakage keys read the lexical sub-model (and residual.ngram_words): the rest of the section leaves them
    leakage_keys = lambda c: (leakage_incremental.fingerprint(c), plant_cache.fingerprint(c))  # noqa: E731
    neutral = {
        "pretrain_action": "flag",
        "num_proc": 3,
        "worker_memory_mib": 64,
        "residual": params.leakage.residual.model_copy(update={"min_coverage": 0.123}),
    }
    assert leakage_keys(params.leakage.model_copy(update=neutral)) == leakage_keys(params.leakage)
    keys = {  # section, its key, a change declared neutral
        "leakage": (
            params.leakage.lexical,
            lambda c: params_md5(c, params.leakage.residual),
            {"worker_memory_mib": 64},
        ),
        "dedup": (params.dedup, dedup_incremental.fingerprint, {"threshold": 0.123, "conflict_policy": "drop_all"}),
        "semantic": (params.leakage.semantic, store_key, {"min_words": 9, "stride_tokens": 7}),
        "tokenize": (params.tokenize, lambda c: tokenize_cache.fingerprint(word_level, c), {"num_proc": 3}),
    }
    models = {"leakage": LexicalParams, "dedup": DedupParams, "semantic": SemanticParams, "tokenize": TokenizeParams}
    for name, (section, key, neutral) in keys.items():
        grown_model = type(
            f"Grown{models[name].__name__}", (models[name],), {"__annotations__": {"knob": int}, "knob": 0}
        )
        grown = grown_model(**section.model_dump())
        assert key(grown.model_copy(update={"knob": 1})) != key(grown), f"{name}: a new param does not key it"
        assert key(section.model_copy(update=neutral)) == key(section), f"{name}: {sorted(neutral)} key it"


def test_the_leakage_keys_follow_the_confusables_table_and_the_unicode_data(tmp_path, monkeypatch):
    """Review finding A: every lexical detector reads ``fold_words(words(text))``, which follows
    ``confusables.txt`` and Python's Unicode data. A table with three rows cut (the reviewer's: Cyrillic а, о, р
    then stay Cyrillic) or another ``unicodedata.unidata_version`` changes both leakage keys; the dedup index
    (which does not fold) follows the Unicode data only, the tokenize ids neither; the embedding store's layouts
    key keeps its value."""
    import hashlib
    import types
    import unicodedata

    import tokenizers
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from tasks.common.imports import closure_fingerprint
    from tasks.common.matching import confusables, textnorm
    from tasks.config.root import load_params
    from tasks.dedup import incremental as dedup_incremental
    from tasks.leakage.planted import cache as plant_cache
    from tasks.leakage.scan import incremental as leakage_incremental
    from tasks.leakage.semantic import store as embedding_store
    from tasks.tokenize import cache as tokenize_cache

    params = load_params(REPO / "params.yaml")
    (tmp_path / "weights.bin").write_bytes(b"an encoder's files")
    encoder = types.SimpleNamespace(
        folder=tmp_path, precision="fp32", device=torch.device("cpu"), deterministic=True, cfg=params.leakage.semantic
    )
    word_level = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))

    def keys():
        return {
            "lexical": leakage_incremental.fingerprint(params.leakage),
            "planted": plant_cache.fingerprint(params.leakage),
            "dedup": dedup_incremental.fingerprint(params.dedup),
            "tokenize": tokenize_cache.fingerprint(word_level, params.tokenize),
            "layouts": embedding_store.layouts_key(embedding_store.fingerprint(encoder), params.leakage.semantic),
        }

    before = keys()
    table = confusables.table_path()
    assert before["layouts"]["text"] == (  # the store's key as it was written before the shared helper: unchanged
        closure_fingerprint([textnorm.__name__, confusables.__name__])
        + f", confusables.txt {hashlib.sha256(table.read_bytes()).hexdigest()}"
        + f", unicode {unicodedata.unidata_version}, tokenizers {tokenizers.__version__}"
    )
    assert keys() == before  # nothing changed: the same keys
    cut = tmp_path / "confusables.txt"
    rows = table.read_text(encoding="utf-8").splitlines(keepends=True)
    gone = ("0430 ;", "043E ;", "0440 ;")  # Cyrillic а, о, р
    kept = [r for r in rows if not r.startswith(gone)]
    assert len(rows) - len(kept) == 3
    cut.write_text("".join(kept), encoding="utf-8")
    monkeypatch.setattr(confusables, "table_path", lambda: cut)
    after_table = keys()
    for name in ("lexical", "planted", "layouts"):
        assert after_table[name] != before[name], f"{name}: a cut confusables.txt leaves its key"
    for name in ("dedup", "tokenize"):
        assert after_table[name] == before[name], f"{name}: keyed by confusables.txt, which it does not read"
    monkeypatch.undo()
    monkeypatch.setattr(unicodedata, "unidata_version", "99.0.0")
    after_unicode = keys()
    for name in ("lexical", "planted", "dedup", "layouts"):
        assert after_unicode[name] != before[name], f"{name}: other Unicode data leaves its key"
    assert after_unicode["tokenize"] == before["tokenize"]


def test_the_tokenize_keys_follow_the_tokenizers_version(monkeypatch):
    """Review finding B: the normalizers and pre-tokenizers (their Unicode tables) are built into ``tokenizers``,
    which ``to_str()`` does not name: another version changes the id cache's and the task cache's keys."""
    import tokenizers
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from tasks.config.root import load_params
    from tasks.tokenize import cache as tokenize_cache
    from tasks.tokenize import task_cache

    params = load_params(REPO / "params.yaml")
    word_level = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]")

    def keys():
        return tokenize_cache.fingerprint(word_level, params.tokenize), task_cache.fingerprint(wrapped, params.tokenize)

    before = keys()
    assert keys() == before
    monkeypatch.setattr(tokenizers, "__version__", "99.0.0")
    after = keys()
    assert after[0] != before[0], "tokenize ids: another tokenizers version leaves the key"
    assert after[1] != before[1], "tokenize tasks: another tokenizers version leaves the key"


def test_the_ingest_unit_key_of_parquet_and_hf_disk_follows_their_parser(tmp_path, monkeypatch):
    """Review finding C: a Parquet unit is parsed by ``pyarrow``, an ``hf_disk`` source by ``datasets`` (on
    ``pyarrow``): another version of either changes their unit keys; a JSON Lines or CSV unit keeps its key."""
    from tasks.config.corpus.ingest import CsvSource, HfDiskSource, JsonlSource, ParquetSource
    from tasks.ingest import cache as ingest_cache

    specs = {
        "parquet": ParquetSource(kind="parquet", name="pq", role="pretrain", path="x", text_field="text"),
        "hf_disk": HfDiskSource(kind="hf_disk", name="hf", role="pretrain", path="x", text_field="text"),
        "jsonl": JsonlSource(kind="jsonl", name="js", role="pretrain", path="x", text_field="text"),
        "csv": CsvSource(kind="csv", name="cs", role="pretrain", path="x", text_field="text"),
    }
    real = ingest_cache.version

    def keys():
        schema = ingest_cache.pa.schema([("text", ingest_cache.pa.string())])
        unit_cache = ingest_cache.UnitCache(tmp_path / "cache", False, schema)
        return {
            kind: unit_cache.through(spec.name, ingest_cache.spec_facts(spec), lambda: ([], {}))[2]
            for kind, spec in specs.items()
        }

    before = keys()
    assert keys() == before
    for package, changed in (("pyarrow", {"parquet", "hf_disk"}), ("datasets", {"hf_disk"})):
        monkeypatch.setattr(ingest_cache, "version", lambda name, p=package: "99.0.0" if name == p else real(name))
        monkeypatch.setattr(ingest_cache.pa, "__version__", "99.0.0" if package == "pyarrow" else real("pyarrow"))
        after = keys()
        assert {kind for kind in specs if after[kind] != before[kind]} == changed, package
        monkeypatch.undo()
