"""Nothing is silently left out at ingest: a source that yields no document stops ``python -m tasks ingest`` with
one line naming it and its drop counts, for every file kind (a JSONL ``text_field`` its records lack was a silent
0 with exit 0)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def workspace(root: Path, sources: list[dict]) -> Path:
    """A copy of the project's params.yaml (with ``sources``) and dvc.yaml at ``root``; the sources' files go
    under ``root/data/raw`` (a dep of the ingest stage)."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["ingest"]["sources"] = sources
    params["tasks"] = {"cls": {**params["tasks"]["cls"], "source": "good"}}
    params["tokenizer"]["unk_eval_sources"] = ["good"]
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    shutil.copyfile(ROOT / "dvc.yaml", root / "dvc.yaml")
    return root


def ingest(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tasks", "ingest"], cwd=root, capture_output=True, text=True, timeout=300
    )


def made_sources(raw: Path) -> tuple[list[dict], dict[str, str]]:
    """One good source and a source of each file kind whose every document is dropped; returns the sources and,
    per bad source, the drop counts its message must carry (counted here from what was written)."""
    from datasets import Dataset

    raw.mkdir(parents=True)
    (raw / "good.jsonl").write_text("".join(json.dumps({"body": f"text {i}", "y": "a"}) + "\n" for i in range(3)))
    (raw / "typo.jsonl").write_text("".join(json.dumps({"body": f"text {i}"}) + "\n" for i in range(8)))
    (raw / "blank.csv").write_text("text,label\n  ,a\n\t,b\n,c\n")
    pq.write_table(pa.table({"body": ["x", "y"], "label": ["a", "b"]}), raw / "cols.parquet")
    (raw / "empty").mkdir()
    for k in range(4):
        (raw / "empty" / f"{k}.txt").write_text(" \n\n \t\n")
    Dataset.from_dict({"body": ["p", "q", "r"]}).save_to_disk(str(raw / "hf"))
    (raw / "notes.conll").write_text("# newdoc id = d1\n\n# text = nothing\n")
    sources = [
        {
            "name": "good",
            "kind": "jsonl",
            "role": "task",
            "path": str(raw / "good.jsonl"),
            "text_field": "body",
            "label_field": "y",
        },
        {"name": "typo", "kind": "jsonl", "role": "pretrain", "path": str(raw / "typo.jsonl"), "text_field": "text"},
        {"name": "blank", "kind": "csv", "role": "pretrain", "path": str(raw / "blank.csv"), "text_field": "text"},
        {
            "name": "cols",
            "kind": "parquet",
            "role": "pretrain",
            "path": str(raw / "cols.parquet"),
            "text_field": "text",
        },
        {"name": "empty", "kind": "text", "role": "pretrain", "path": str(raw / "empty")},
        {"name": "hf", "kind": "hf_disk", "role": "pretrain", "path": str(raw / "hf"), "text_field": "text"},
        {"name": "notes", "kind": "conll", "role": "pretrain", "path": str(raw / "notes.conll"), "tag_column": 1},
    ]
    counts = {
        "typo": "8 in, dropped {'missing_text': 8}",
        "blank": "3 in, dropped {'empty': 3}",
        "cols": "2 in, dropped {'missing_text': 2}",
        "empty": "4 in, dropped {'empty': 4}",
        "hf": "3 in, dropped {'missing_text': 3}",
        "notes": "0 in, dropped {}",
    }
    return sources, counts


def test_sources_of_no_document_stop_ingest_naming_each_in_one_line(tmp_path):
    root = tmp_path / "ws"
    sources, counts = made_sources(root / "data" / "raw")
    done = ingest(workspace(root, sources))
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert line.startswith("clozeline: ingest: ingest.sources: 6 source(s) yield 0 documents: "), line
    for spec in sources[1:]:
        assert f"{spec['name']!r} ({spec['kind']} {spec['path']}): {counts[spec['name']]}" in line, spec["name"]
    assert f"first: {sources[1]['path']}:1 (missing_text: no value in field 'text')" in line
    assert "'good'" not in line
    assert not (root / "data" / "ingest").exists()  # nothing written: a half corpus is not left for dedup


def test_the_same_sources_fixed_ingest_and_count_in_equals_out(tmp_path):
    root = tmp_path / "ws"
    sources, _ = made_sources(root / "data" / "raw")
    fixed = [sources[0], {**sources[1], "text_field": "body"}, {**sources[3], "text_field": "body"}]
    done = ingest(workspace(root, fixed))
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = json.loads((root / "metrics" / "ingest.json").read_text())
    assert {name: m["docs_out"] for name, m in metrics["sources"].items()} == {"good": 3, "typo": 8, "cols": 2}
    assert metrics["totals"] == {"docs_in": 13, "docs_out": 13, "dropped_total": 0}


#: Words no other made text holds: a document of the new source is found in the blocks by its word.
NEW_WORDS = [f"quokka{chr(97 + k)}zed" for k in range(12)]


def corpus(raw: Path) -> list[dict]:
    """A labelled task source (news.csv) and a folder pretraining source (base/); ``raw/new/`` is written too: one
    file per document of the source a user adds, each holding one of ``NEW_WORDS``."""
    import random

    rng = random.Random(59)
    filler = [f"w{k}" for k in range(300)]
    text = lambda n: " ".join(rng.choice(filler) for _ in range(n))  # noqa: E731
    (raw / "base").mkdir(parents=True)
    (raw / "new").mkdir()
    for k in range(30):
        (raw / "base" / f"{k:02d}.txt").write_text(text(40))
    for k, word in enumerate(NEW_WORDS):
        (raw / "new" / f"{k:02d}.txt").write_text(f"{word} {text(40)}")  # first: a split's tail (< a block) is cut
    rows = "".join(f"{text(12)},{'ab'[k % 2]}\n" for k in range(40))
    (raw / "news.csv").write_text("text,label\n" + rows)
    return [
        {
            "name": "news",
            "kind": "csv",
            "role": "task",
            "path": str(raw / "news.csv"),
            "text_field": "text",
            "label_field": "label",
        },
        {"name": "base", "kind": "text", "role": "pretrain", "path": str(raw / "base")},
    ]


def stage_params(root: Path, sources: list[dict], **changes):
    """The repo's params.yaml as a user would keep it, with ``sources`` and a tiny run's sizes."""
    from tasks.config import load_params

    task = {"kind": "classification", "source": "news", "metric": "macro_f1", "recipe": "cls"}
    return load_params(
        ROOT / "params.yaml",
        overrides={
            "paths": {name: str(root / name) for name in ("data", "models", "metrics", "reports")},
            "ingest.sources": sources,
            "tasks": {"cls": task},
            "tokenizer.unk_eval_sources": ["news"],
            "tokenizer.vocab_size_tokens": 300,
            "tokenize.max_seq_len_tokens": 32,
            "dedup.num_proc": 1,
            "leakage.num_proc": 1,
            "leakage.semantic.enabled": False,
            "leakage.planted.max_docs": 2,
            **changes,
        },
    )


def block_texts(root: Path) -> dict[str, str]:
    """``{split: the decoded text of the clozeline blocks, one stream}`` of ``data/tokenize/pretrain``."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root / "models" / "tokenizer")
    out = {}
    for split in ("train", "heldout"):
        blocks = datasets.load_from_disk(str(root / "data" / "tokenize" / "pretrain" / "clozeline" / split))
        stream = [token for block in blocks.to_dict()["input_ids"] for token in block]  # a word may span two blocks
        out[split] = tokenizer.decode(stream, skip_special_tokens=True)
    return out


def test_a_pretraining_source_added_in_a_folder_reaches_the_vocabulary_and_the_blocks(tmp_path):
    from tasks.__main__ import run_stage
    from tasks.tracking import NullLog

    root = tmp_path / "ws"
    sources = corpus(root / "raw")
    new = {"name": "new", "kind": "text", "role": "pretrain", "path": str(root / "raw" / "new")}
    params = stage_params(root, [*sources, new])  # the one edit a user makes: the source
    assert params.tokenize.pretrain_sources == params.tokenizer.pretrain_sources == ["base", "new"]
    for stage in ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize"):
        run_stage(stage, params, NullLog())
    import pandas as pd

    rows = pd.read_parquet(root / "data" / "leakage" / "new.parquet")
    split_of = {word: rows.loc[rows["text"].str.contains(word), "split"].item() for word in NEW_WORDS}
    assert set(split_of.values()) <= {"train", "heldout"} and "train" in split_of.values()
    texts = block_texts(root)
    for word, split in split_of.items():
        assert word in texts[split], (word, split)  # decoded whole: the vocabulary learnt it or its pieces
        assert word not in texts[{"train": "heldout", "heldout": "train"}[split]], word


def test_the_default_params_name_the_same_sources_as_the_lists_they_replace():
    from tasks.config import load_params

    params = load_params(ROOT / "params.yaml")
    # the lists params.yaml wrote before `all`: the blocks and a kept vocabulary's params stay as they were
    assert (
        params.tokenizer.pretrain_sources
        == params.tokenize.pretrain_sources
        == ["bbc_news_pretrain", "wikipedia_sample"]
    )
    assert params.source_warnings() == []


def test_exclusion_is_by_name_and_a_source_no_stage_uses_is_an_error_naming_the_key(tmp_path):
    from tasks.config import ParamsError

    sources = corpus(tmp_path / "raw") + [
        {"name": "new", "kind": "text", "role": "pretrain", "path": str(tmp_path / "raw" / "new")}
    ]
    kept = stage_params(tmp_path, sources, **{"tokenize.exclude_sources": ["new"]})
    assert (kept.tokenize.pretrain_sources, kept.tokenizer.pretrain_sources) == (["base"], ["base", "new"])
    both = "in both tokenizer.exclude_sources and tokenize.exclude_sources"
    bad = {
        f"ingest.sources: role: pretrain source(s) ['new'] {both}": {
            "tokenize.exclude_sources": ["new"],
            "tokenizer.exclude_sources": ["new"],
        },
        "tokenize.pretrain_sources: role: pretrain source(s) ['new'] neither listed nor in tokenize.exclude_sources": {
            "tokenize.pretrain_sources": ["base"]
        },
        "tokenizer.pretrain_sources: ['bbc_news_pretrain'] not in ingest.sources": {
            "tokenizer.pretrain_sources": ["bbc_news_pretrain", "base", "new"]
        },
        "tokenize.exclude_sources: 'news' is not an ingest source with role: pretrain": {
            "tokenize.exclude_sources": ["news"]
        },
        "tokenizer.unk_eval_sources: ['wnut16'] not ingest sources with role: task": {
            "tokenizer.unk_eval_sources": ["news", "wnut16"]
        },
        # a name twice would read its rows twice (read_pretraining_rows): doubled text in the vocab and blocks
        "tokenize.pretrain_sources must be unique; repeated: ['base']": {
            "tokenize.pretrain_sources": ["base", "new", "base"]
        },
        "tokenizer.exclude_sources must be unique; repeated: ['new']": {"tokenizer.exclude_sources": ["new", "new"]},
        # was "no source left (tokenizer.exclude_sources takes every one)", with nothing excluded
        "tokenizer.pretrain_sources: all, but ingest.sources has no role: pretrain source: add one, or list the task "
        "sources whose train split to use": {"ingest.sources": sources[:1]},
    }
    for message, changes in bad.items():
        with pytest.raises(ParamsError, match=re.escape(message)):
            stage_params(tmp_path, sources, **changes)
    extra = {**sources[0], "name": "unused"}  # a task source no task names: read by the leakage audit alone
    assert stage_params(tmp_path, [*sources, extra]).source_warnings() == [
        "ingest.sources: 'unused' (role: task) is named by no task (params.yaml tasks), tokenizer.unk_eval_sources or "
        "pretrain_sources: only the leakage audit reads it"
    ]
