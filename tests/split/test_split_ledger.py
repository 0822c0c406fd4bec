"""split ledger (split.ledger): no doc ever moves split across runs, bridges are dropped and counted, an
incremental sequence equals a from-scratch run over the union except for the counted bridges, and a run killed
before its shards are written leaves the ledger as it was (its rerun equals an uninterrupted run)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

import tasks.__main__ as stage_main
from tasks import split
from tasks.config import Paths, read_yaml
from tasks.config.corpus.split import SplitParams
from tasks.split import ledger
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
#: the ``split:`` params these tests change: ledger mode (hash)
LEDGER_MODE = {"assignment": "hash", "ledger": True, "stratify_by_label": False, "task_sizing": "fractions"}
LEDGER = "data/split_ledger/ledger.parquet"


def params(**changes) -> SplitParams:
    """The repo's ``split:`` params in ledger mode (hash), with ``changes`` applied."""
    return SplitParams(**{**read_yaml("params.yaml")["split"], **LEDGER_MODE, **changes})


def frame(docs: list[dict]) -> pd.DataFrame:
    """A dedup-contract frame of one source from ``{doc_id, source, role, group, cluster_id}`` dicts."""
    return pd.DataFrame(
        {
            "doc_id": [d["doc_id"] for d in docs],
            "source": [d["source"] for d in docs],
            "role": [d["role"] for d in docs],
            "text": [f"text of {d['doc_id']}" for d in docs],
            "label": [None] * len(docs),
            "group": [d["group"] for d in docs],
            "tokens": [None] * len(docs),
            "tags": [None] * len(docs),
            "meta": ["{}"] * len(docs),
            "cluster_id": [d["cluster_id"] for d in docs],
            "is_duplicate": [False] * len(docs),
        }
    )


def run_night(root, docs: list[dict], cfg: SplitParams):
    """One scheduled run in ``root`` (data/dedup and data/split rewritten, data/split_ledger kept, as DVC does).

    Returns (metrics, ``{doc_id: split}`` of the output, dropped.jsonl records)."""
    paths = Paths(data=root / "data", models=root / "m", metrics=root / "x", reports=root / "r")
    write_dedup(paths.data, docs)
    metrics = split.run(cfg, paths, NullLog())
    out = pd.concat([pd.read_parquet(p) for p in sorted(paths.stage_data("split").glob("*.parquet"))])
    lines = (paths.stage_data("split") / "dropped.jsonl").read_text().splitlines()
    return metrics, dict(zip(out["doc_id"], out["split"])), [json.loads(line) for line in lines]


def write_dedup(data: Path, docs: list[dict]) -> None:
    """``<data>/dedup/<source>.parquet`` of ``docs``, ``<data>/dedup`` and ``<data>/split`` emptied first."""
    for stage in ("dedup", "split"):
        shutil.rmtree(data / stage, ignore_errors=True)
    (data / "dedup").mkdir(parents=True)
    for source in sorted({d["source"] for d in docs}):
        frame([d for d in docs if d["source"] == source]).to_parquet(data / "dedup" / f"{source}.parquet")


class Corpus:
    """A growing corpus: task source ``t`` (grouped docs) and pretrain source ``p`` (groupless, clusters).

    Doc ids are random hex, so a new doc often sorts before the old ones (the case that renames clusters)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.docs: dict[str, dict] = {}
        self.hidden: dict[str, dict] = {}
        self.joined: set[str] = set()  # groups a later doc linked to another group through a cluster
        for g in range(60):
            for _ in range(self.rng.randint(2, 4)):
                self.add("t", "task", f"g{g:03d}")
        for _ in range(150):
            self.add("p", "pretrain", None)

    def add(self, source: str, role: str, group: str | None, cluster: str | None = None) -> str:
        doc_id = f"{source}{self.rng.getrandbits(40):010x}"
        self.docs[doc_id] = {
            "doc_id": doc_id,
            "source": source,
            "role": role,
            "group": group,
            "cluster_id": cluster or doc_id,
        }
        return doc_id

    def groups(self) -> list[str]:
        return sorted({d["group"] for d in self.docs.values() if d["group"]})

    def of_group(self, group: str) -> list[str]:
        return sorted(k for k, d in self.docs.items() if d["group"] == group)

    def grow(self, night: int, avoid: set[str]) -> None:
        """Docs added to 5 existing groups, 4 new groups, 2 near duplicates of old docs in new groups, and 10
        pretraining docs; ``avoid``: groups whose component a bridge doc keeps bridged (their new docs would be
        dropped too, which the bridge tests count on their own)."""
        free = [g for g in self.groups() if g not in avoid]
        for group in self.rng.sample(free, 5):
            for _ in range(self.rng.randint(1, 2)):
                self.add("t", "task", group)
        for k in range(4):
            for _ in range(self.rng.randint(1, 3)):
                self.add("t", "task", f"n{night}-{k}")
        for k, old in enumerate(self.rng.sample([i for g in free for i in self.of_group(g)], 2)):
            self.add("t", "task", f"dup{night}-{k}", cluster=self.docs[old]["cluster_id"])
            self.joined |= {f"dup{night}-{k}", self.docs[old]["group"]}
        for _ in range(10):
            self.add("p", "pretrain", None)

    def rename_a_cluster(self) -> None:
        """A new pretraining near duplicate joins an old cluster, which dedup renames after its first doc."""
        old = self.rng.choice(sorted(k for k, d in self.docs.items() if d["role"] == "pretrain"))
        new = self.add("p", "pretrain", None, cluster=self.docs[old]["cluster_id"])
        members = [k for k, d in self.docs.items() if d["cluster_id"] == self.docs[old]["cluster_id"]]
        for k in members:
            self.docs[k]["cluster_id"] = min(members + [new])

    def link(self, a: str, b: str) -> str:
        """A new doc in ``a``'s group and ``b``'s cluster (joins the two components)."""
        self.joined |= {self.docs[a]["group"], self.docs[b]["group"]}
        return self.add("t", "task", self.docs[a]["group"], cluster=self.docs[b]["cluster_id"])

    def rows(self) -> list[dict]:
        return [dict(d) for d in self.docs.values()]


def pick_pair(corpus: Corpus, first: dict[str, str], same: bool, avoid: set[str]) -> tuple[str, str]:
    """Docs of two untouched groups in the same (``same``) or different splits of the ledger the test keeps."""
    groups = [g for g in corpus.groups() if g.startswith("g") and g not in avoid]
    for ga in groups:
        for gb in groups:
            a, b = corpus.of_group(ga)[0], corpus.of_group(gb)[0]
            if ga != gb and (first[a] == first[b]) == same:
                return a, b
    raise AssertionError("no such pair")


def nights(tmp_path, rename: bool):
    """Five nights over a growing corpus in ledger mode. Night 2 adds a bridge between groups the test's own
    record puts in different splits, night 3 a link between groups in the same split, night 2 hides 3 docs
    that come back on night 4. Yields (night, corpus, metrics, output, dropped, first, expected bridges)."""
    corpus, first, bridges, avoid = Corpus(seed=11), {}, set(), set()
    for night in range(5):
        if night:
            corpus.grow(night, avoid)
        if night == 2:
            for doc_id in sorted(k for k in corpus.docs if k in first)[:3]:
                corpus.hidden[doc_id] = corpus.docs.pop(doc_id)
        if night == 4:
            corpus.docs.update(corpus.hidden)
        if night in (2, 3):
            a, b = pick_pair(corpus, first, same=night == 3, avoid=avoid)
            new = corpus.link(a, b)
            avoid |= {corpus.docs[a]["group"], corpus.docs[b]["group"]}
            if night == 2:
                bridges.add(new)
        if rename and night >= 1:
            corpus.rename_a_cluster()
        metrics, out, dropped = run_night(tmp_path / "incremental", corpus.rows(), params())
        yield night, corpus, metrics, out, dropped, first, bridges
        for doc_id, got in out.items():
            first.setdefault(doc_id, got)


def test_no_document_moves_over_five_nights_and_the_ledger_is_what_holds_them(tmp_path):
    moved_without_ledger = 0
    for night, corpus, metrics, out, dropped, first, bridges in nights(tmp_path, rename=True):
        assert {k: v for k, v in out.items() if k in first} == {k: first[k] for k in out if k in first}
        assert metrics["moved_since_previous"] == (None if night == 0 else 0)
        assert metrics["new_docs"] == sum(doc_id not in first for doc_id in corpus.docs)
        assert sorted(d["doc_id"] for d in dropped) == sorted(bridges)
        # hidden on night 2, back on night 4: the ledger kept them (history) and they got their old split back
        assert metrics["ledger_docs_absent"] == (3 if night in (2, 3) else 0)
        _, scratch, _ = run_night(tmp_path / f"scratch{night}", corpus.rows(), params(ledger=False))
        moved_without_ledger += sum(scratch[k] != first[k] for k in scratch if k in first)
    # the data would catch a ledger that does nothing: plain hash over the union moves docs of the bridged
    # groups and of the renamed pretraining clusters
    assert moved_without_ledger > 0


def test_incremental_equals_from_scratch_on_the_union_except_the_counted_bridges(tmp_path):
    *_, last_night = nights(tmp_path, rename=False)  # every night runs; what follows reads the last one
    _, corpus, metrics, out, _, _, bridges = last_night
    assert len(bridges) == 1 and metrics["bridges_splits"] == 1 and metrics["bridged_components"] == 1
    scratch_metrics, scratch, _ = run_night(tmp_path / "scratch", corpus.rows(), params())
    assert scratch_metrics["ledger"] == {"enabled": True, "found": False, "history_left_unchanged": False}
    assert scratch_metrics["bridges_splits"] == 0
    assert set(scratch) - set(out) == bridges
    differ = {k for k in out if out[k] != scratch[k]}
    assert len(differ) == metrics["ledger_overrides"] > 0
    # only where a later doc joined two groups through a cluster: the bridge, and near duplicates whose new
    # group has a smaller name than the old one (from scratch the merged component takes the smaller name's key)
    assert {corpus.docs[k]["group"] for k in differ} <= corpus.joined
    bridge = corpus.docs[next(iter(bridges))]
    bridged = {bridge["group"]} | {d["group"] for d in corpus.docs.values() if d["cluster_id"] == bridge["cluster_id"]}
    renamed = {g for g in corpus.joined - bridged if g.startswith("dup")}
    assert {corpus.docs[k]["group"] for k in differ} & bridged and renamed


def first_night_with_a_bridge(tmp_path) -> tuple[list[dict], dict[str, str], str, str]:
    """300 docs in 100 groups split once; then a new doc t900 in the group of a train doc ``a`` and the cluster
    of a test doc ``b`` (appended to the docs, not yet run). Returns the docs, the first night's splits, a, b."""
    docs = [
        {"doc_id": f"t{i:03d}", "source": "t", "role": "task", "group": f"g{i % 100:02d}", "cluster_id": f"t{i:03d}"}
        for i in range(300)
    ]
    _, before, _ = run_night(tmp_path, docs, params())
    a = next(k for k, s in sorted(before.items()) if s == "train")
    b = next(k for k, s in sorted(before.items()) if s == "test")
    docs.append({"doc_id": "t900", "source": "t", "role": "task", "group": docs[int(a[1:])]["group"], "cluster_id": b})
    return docs, before, a, b


def test_a_bridge_doc_is_dropped_and_counted_and_a_cluster_chain_is_exempt_from_the_straddle_check(tmp_path):
    docs, before, a, b = first_night_with_a_bridge(tmp_path)
    # N = t900 shares a's group and b's cluster; M = t901 is a plain new doc of a fresh group
    docs.append({"doc_id": "t901", "source": "t", "role": "task", "group": "fresh", "cluster_id": "t901"})
    metrics, after, dropped = run_night(tmp_path, docs, params())
    assert (
        dropped == [{"source": "t", "doc_id": "t900", "reason": "bridges_splits", "detail": dropped[0]["detail"]}]
        and "test and train" in dropped[0]["detail"]
    )
    assert "t900" not in after and {k: after[k] for k in before} == before and "t901" in after
    src = metrics["sources"]["t"]
    assert src["docs_in"] == 302 == sum(src["docs"].values()) + sum(src["dropped"].values())
    assert src["dropped"] == {"bridges_splits": 1} and metrics["bridges_splits"] == 1
    assert metrics["bridged_components"] == 1 and metrics["moved_since_previous"] == 0
    assert metrics["straddling_exempt"] == 0  # without N, a's group and b's cluster no longer touch
    # N stays in the corpus (dropped again), but only N bridges: a plain new doc of b's group joins test, one of a's
    # group joins train; two new docs that reach train and test together through a cluster only they carry (one
    # in a's group, one in b's) are both dropped
    group_of = {d["doc_id"]: d["group"] for d in docs}
    docs += [
        {"doc_id": "t902", "source": "t", "role": "task", "group": group_of[b], "cluster_id": "t902"},
        {"doc_id": "t903", "source": "t", "role": "task", "group": group_of[a], "cluster_id": "t903"},
        {"doc_id": "t904", "source": "t", "role": "task", "group": group_of[a], "cluster_id": "c-new"},
        {"doc_id": "t905", "source": "t", "role": "task", "group": group_of[b], "cluster_id": "c-new"},
    ]
    metrics, after, dropped = run_night(tmp_path, docs, params())
    assert [d["doc_id"] for d in dropped] == ["t900", "t904", "t905"]
    assert "test and train" in dropped[1]["detail"] and "test and train" in dropped[2]["detail"]
    assert after["t902"] == "test" and after["t903"] == "train" and metrics["bridges_splits"] == 3
    docs = [d for d in docs if d["doc_id"] not in ("t904", "t905")]
    _, after, dropped = run_night(tmp_path, [d for d in docs if d["doc_id"] != "t900"], params())
    assert dropped == [] and after["t902"] == "test" and after["t903"] == "train"
    # a new dedup cluster chain a ~ N ~ b: dedup gives all three one cluster_id, so a (train) and b (test) share
    # it after N is dropped; that cluster is exempt and named, not a SplitLeakError
    for d in docs:
        if d["doc_id"] in (a, b, "t900"):
            d["cluster_id"] = "chain"
    next(d for d in docs if d["doc_id"] == "t900")["group"] = "lonely"
    metrics, after, dropped = run_night(tmp_path, docs, params())
    assert [d["doc_id"] for d in dropped] == ["t900"] and after[a] == "train" and after[b] == "test"
    assert metrics["straddling_exempt"] == 1 and metrics["straddling_exempt_examples"] == ["cluster:task:chain"]
    assert metrics["groups_in_multiple_splits"] == 0
    # the same chain without a ledger is one component in one split (the straddle check still guards it)
    shutil.rmtree(tmp_path / "data" / "split_ledger")
    _, scratch, _ = run_night(tmp_path, docs, params())
    assert scratch[a] == scratch[b] == scratch["t900"]


def test_ledger_off_rewrites_its_own_ledger_but_never_one_that_ledger_runs_wrote(tmp_path):
    docs = Corpus(seed=3).rows()
    for root in ("a", "b"):
        metrics, _, _ = run_night(tmp_path / root, docs[:-5], params(ledger=False))
    ledger = "data/split_ledger/ledger.parquet"
    assert (tmp_path / "a" / ledger).read_bytes() == (tmp_path / "b" / ledger).read_bytes()
    assert metrics["ledger"] == {"enabled": False, "found": False, "history_left_unchanged": False}
    assert metrics["moved_since_previous"] is None and metrics["ledger_docs"] == len(docs) - 5
    written = pd.read_parquet(tmp_path / "a" / ledger)
    assert len(written) == len(docs) - 5 and list(written["doc_id"]) == sorted(written["doc_id"])
    assert list(written.columns) == ["doc_id", "role", "split"]
    fill, _, _ = run_night(tmp_path / "a", docs[5:], params(ledger=False, assignment="fill"))
    manifest = pd.read_csv(tmp_path / "a" / "data" / "split" / "manifest.tsv", sep="\t").set_index("doc_id")
    rewritten = pd.read_parquet(tmp_path / "a" / ledger).set_index("doc_id")["split"]
    assert rewritten.equals(manifest["split"].loc[rewritten.index])  # the last ledger-off run's splits, frozen
    on, _, _ = run_night(tmp_path / "a", docs, params())  # a scheduled night keeps them: nothing moved
    assert on["moved_since_previous"] == 0 and on["new_docs"] == 5
    history = (tmp_path / "a" / ledger).read_bytes()
    off, _, _ = run_night(tmp_path / "a", docs[5:], params(ledger=False, assignment="fill"))  # a one-off run
    assert (tmp_path / "a" / ledger).read_bytes() == history
    assert off["ledger"]["history_left_unchanged"] and off["ledger_docs"] is None
    again, _, _ = run_night(tmp_path / "a", docs, params())  # the next scheduled night: nothing moved
    assert again["moved_since_previous"] == 0 and again["new_docs"] == 0


def test_ledger_needs_hash_assignment_and_a_bad_ledger_file_is_named(tmp_path):
    with pytest.raises(ValidationError, match=r"split\.ledger: true needs split\.assignment: hash"):
        params(assignment="fill")
    with pytest.raises(ValidationError, match=r"split\.ledger"):
        params(mode="temporal", date_meta_key="date")
    docs = Corpus(seed=5).rows()
    run_night(tmp_path, docs, params())
    path = tmp_path / "data" / "split_ledger" / "ledger.parquet"
    pd.read_parquet(path).assign(split="heldout").to_parquet(path, index=False)
    with pytest.raises(ValueError, match=r"ledger\.parquet: doc '\w+' has split 'heldout', not a split of role 'task'"):
        run_night(tmp_path, docs, params())


def test_a_damaged_ledger_is_an_error_naming_it_never_an_empty_history(tmp_path):
    docs = Corpus(seed=5).rows()
    run_night(tmp_path, docs, params())
    path = tmp_path / "data" / "split_ledger" / "ledger.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01  # in the doc_id column's page: the ledger's page CRC catches it
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"ledger\.parquet: the split ledger cannot be read \(.*\); restore it"):
        run_night(tmp_path, docs, params())
    path.write_bytes(bytes(data[: len(data) // 2]))  # truncated: Arrow raises ArrowInvalid, a ValueError
    with pytest.raises(ValueError, match=r"ledger\.parquet: the split ledger cannot be read \(.*\); restore it"):
        ledger.read_ledger(path)


def test_moved_since_reads_the_written_files_back(tmp_path):
    previous = pd.DataFrame({"doc_id": ["a", "b", "c"], "role": "task", "split": ["train", "test", "dev"]})
    (tmp_path / "manifest.tsv").write_text("doc_id\tsplit\na\ttrain\nb\ttrain\n")  # b moved test -> train
    previous.iloc[[0, 1]].to_parquet(tmp_path / "ledger.parquet", index=False)  # c lost from the ledger
    assert ledger.moved_since(previous, tmp_path / "manifest.tsv", tmp_path / "ledger.parquet") == 2
    previous.to_parquet(tmp_path / "ledger.parquet", index=False)
    (tmp_path / "manifest.tsv").write_text("doc_id\tsplit\na\ttrain\nb\ttest\nz\tdev\n")
    assert ledger.moved_since(previous, tmp_path / "manifest.tsv", tmp_path / "ledger.parquet") == 0


def test_a_ledger_that_would_move_a_doc_fails_and_the_old_ledger_is_left_as_it_was(tmp_path, monkeypatch):
    docs, _, _, _ = first_night_with_a_bridge(tmp_path)
    path = tmp_path / "data" / "split_ledger" / "ledger.parquet"
    old = path.read_bytes()

    def from_scratch(rows, previous, where, names):  # an overlay that ignores the ledger: a and b now share a split
        return rows.assign(scratch=rows["split"]), pd.DataFrame(columns=["source", "doc_id", "reason", "detail"]), []

    monkeypatch.setattr(split, "apply_ledger", from_scratch)
    with pytest.raises(split.SplitLeakError, match=r"^\d+ doc\(s\) of .*ledger\.parquet changed split"):
        run_night(tmp_path, docs, params())
    assert path.read_bytes() == old and sorted(p.name for p in path.parent.iterdir()) == ["ledger.parquet"]


class Killed(Exception):
    """What an interrupted run dies of while its shards are written (in place of a crash or SIGKILL)."""


def run_stage(root: Path, docs: list[dict], monkeypatch, killed: bool = False) -> dict:
    """``python -m tasks split`` as DVC calls it (``tasks.__main__.main``) in ``root``: the repo's dvc.yaml and
    params.yaml, ``split:`` in ledger mode (``LEDGER_MODE``), over ``docs`` as ``data/dedup``. ``killed``: the run
    dies in ``write_shards`` (``Killed`` raised). Returns ``metrics/split.json``."""
    raw = read_yaml(ROOT / "params.yaml")
    raw["split"].update(LEDGER_MODE)
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    shutil.copyfile(ROOT / "dvc.yaml", root / "dvc.yaml")
    write_dedup(root / "data", docs)

    def killed_writing(*_args, **_kwargs):
        raise Killed("killed while the shards are written")

    with monkeypatch.context() as patch:
        patch.chdir(root)
        if killed:
            patch.setattr(split, "write_shards", killed_writing)
        assert stage_main.main(["split"]) == 0
    return json.loads((root / "metrics" / "split.json").read_text(encoding="utf-8"))


def test_a_first_run_killed_before_its_shards_leaves_no_ledger_and_its_rerun_equals_an_uninterrupted_run(
    tmp_path, monkeypatch
):
    docs = Corpus(seed=3).rows()
    (tmp_path / "killed").mkdir()
    with pytest.raises(Killed):
        run_stage(tmp_path / "killed", docs, monkeypatch, killed=True)
    folder = tmp_path / "killed" / "data" / "split_ledger"
    assert not (folder / "ledger.parquet").exists()
    assert [p.name for p in folder.iterdir()] == ["ledger.parquet.new"]  # staged and checked, never read as a ledger
    rerun = run_stage(tmp_path / "killed", docs, monkeypatch)
    (tmp_path / "fresh").mkdir()
    fresh = run_stage(tmp_path / "fresh", docs, monkeypatch)
    assert rerun == fresh
    assert rerun["ledger"] == {"enabled": True, "found": False, "history_left_unchanged": False}
    assert rerun["moved_since_previous"] is None and rerun["new_docs"] == len(docs) == rerun["ledger_docs"]
    assert [p.name for p in folder.iterdir()] == ["ledger.parquet"]  # the stale staged file overwritten, renamed
    assert (folder / "ledger.parquet").read_bytes() == (tmp_path / "fresh" / LEDGER).read_bytes()


def test_a_run_killed_before_its_shards_leaves_the_previous_ledger_as_it_was(tmp_path, monkeypatch):
    docs = Corpus(seed=3).rows()
    for root in ("killed", "fresh"):
        (tmp_path / root).mkdir()
        run_stage(tmp_path / root, docs[:-5], monkeypatch)
    path = tmp_path / "killed" / LEDGER
    before = path.read_bytes()
    with pytest.raises(Killed):
        run_stage(tmp_path / "killed", docs, monkeypatch, killed=True)
    assert path.read_bytes() == before
    rerun, night = run_stage(tmp_path / "killed", docs, monkeypatch), run_stage(tmp_path / "fresh", docs, monkeypatch)
    assert rerun == night and rerun["ledger"]["found"] and rerun["moved_since_previous"] == 0
    assert rerun["new_docs"] == 5 and rerun["ledger_docs"] == len(docs)


def reached_by_search(rows: pd.DataFrame, ledger_split: pd.Series) -> list[tuple]:
    """The reached splits of each row by a breadth-first search over a doc/label graph: from a new doc, a label
    some ledger doc carries adds those docs' splits and stops the walk; any other label leads to every new doc
    carrying it, and on to their labels."""
    labels = [
        [f"{r}|cluster|{c}"] + ([f"{r}|group|{s}|{g}"] if not (g is None or isinstance(g, float) and g != g) else [])
        for r, s, g, c in zip(rows["role"], rows["source"], rows["group"], rows["cluster_id"])
    ]
    new = [not isinstance(split, str) for split in ledger_split]
    out = []
    for start in range(len(rows)):
        if not new[start]:
            out.append(())
            continue
        seen_docs, seen_labels, reached, queue = {start}, set(), set(), [start]
        while queue:
            for label in labels[queue.pop()]:
                if label in seen_labels:
                    continue
                seen_labels.add(label)
                carriers = [i for i in range(len(rows)) if label in labels[i]]
                anchor_splits = {ledger_split.iloc[i] for i in carriers if not new[i]}
                if anchor_splits:
                    reached |= anchor_splits
                    continue
                fresh = [i for i in carriers if i not in seen_docs]
                seen_docs.update(fresh)
                queue += fresh
        out.append(tuple(sorted(reached)))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_reached_splits_equals_a_breadth_first_search_over_random_rows(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    rows = pd.DataFrame(
        {
            "role": [rng.choice(["task", "pretrain"]) for _ in range(n)],
            "source": [rng.choice(["a", "b"]) for _ in range(n)],
            "group": [rng.choice([None, float("nan"), pd.NA, "g1", "g2", "g3", "g4"]) for _ in range(n)],
            "cluster_id": [rng.choice([None, *(f"c{k}" for k in range(8))]) for _ in range(n)],
        },
        index=range(100, 100 + n),
        dtype=object,
    )
    splits = {"task": ["train", "dev", "test"], "pretrain": ["train", "eval"]}
    ledger_split = pd.Series(
        [rng.choice(splits[r]) if rng.random() < 0.6 else float("nan") for r in rows["role"]],
        index=rows.index,
        dtype=object,
    )
    got = ledger.reached_splits(rows, ledger_split)
    assert list(got.index) == list(rows.index)
    assert list(got) == reached_by_search(rows, ledger_split)
