"""``UnionTimes``: whether two nodes were connected before a point of a sequence of unions; ``joining_pairs``:
which pairs of a sequence join two sets, in Python and compiled."""

import numpy as np
import pytest

from tasks.common.matching.unionfind import UnionFind, UnionTimes


def test_connection_times_by_hand():
    # t=0: 0-1, t=1: 2-3, t=2: 1-3 (joins {0,1} and {2,3}), t=3: 4-5; node 6 stays alone
    times = UnionTimes(7)
    for t, (a, b) in enumerate([(0, 1), (2, 3), (1, 3), (4, 5)]):
        times.union(a, b, t)
    u = np.array([0, 0, 0, 2, 0, 4, 4, 6, 3])
    v = np.array([1, 1, 2, 3, 3, 5, 0, 6, 0])
    when = np.array([0, 1, 2, 5, 3, 4, 9, 0, 9])
    #               t=0 is the union's own turn: not before it; 0-2 joined at t=2; a node is always with itself
    expected = [False, True, False, True, True, True, False, True, True]
    assert times.connected_before(u, v, when).tolist() == expected


def test_connection_times_equal_a_replay_of_the_unions():
    rng = np.random.default_rng(7)
    n, unions = 60, [tuple(rng.integers(0, 60, 2)) for _ in range(80)]
    times = UnionTimes(n)
    for t, (a, b) in enumerate(unions):
        times.union(int(a), int(b), t)
    u, v, when = rng.integers(0, n, 500), rng.integers(0, n, 500), rng.integers(0, 90, 500)
    got = times.connected_before(u, v, when)
    for k in range(500):  # the reference: replay the unions made before when[k] and ask a UnionFind
        replay = UnionFind()
        for a, b in unions[: when[k]]:
            replay.union(int(a), int(b))
        assert got[k] == (replay.find(int(u[k])) == replay.find(int(v[k]))), k
    assert 0 < got.sum() < 500  # both answers occur


def _joins_one_by_one(n: int, pairs: list[tuple[int, int]], skip: list[bool]) -> list[int]:
    """The sequential rule with the class above: pair k joins when its ends are apart at its turn."""
    sets = UnionFind()
    for node in range(n):
        sets.find(node)
    joined = []
    for k, ((a, b), passed) in enumerate(zip(pairs, skip)):
        if not passed and sets.find(a) != sets.find(b):
            sets.union(a, b)
            joined.append(k)
    return joined


def test_joining_pairs_by_hand_in_python_and_compiled(monkeypatch):
    from tasks.common.matching import compiled, unionfind

    # nodes 0..4 with {3, 4} already one set: (0,1) joins, (1,0) not, (2,3) joins, (0,2) joins, (4,1) not
    # (4 reaches 1 through 3-2-0), (1,3) skipped
    roots = [0, 1, 2, 3, 3]
    left, right, skip = np.array([0, 1, 2, 0, 4, 1]), np.array([1, 0, 3, 2, 1, 3]), np.array([0, 0, 0, 0, 0, 1], bool)
    for worth in (False, True):
        monkeypatch.setattr(compiled, "worth_compiling", lambda items, worth=worth: worth)
        assert unionfind.joining_pairs(roots, left, right, skip).tolist() == [0, 2, 3]
        assert roots == [0, 1, 2, 3, 3]  # not changed


@pytest.mark.parametrize("worth", [False, True])
def test_joining_pairs_equal_the_sequential_rule(worth, monkeypatch):
    from tasks.common.matching import compiled, unionfind

    monkeypatch.setattr(compiled, "worth_compiling", lambda items: worth)
    rng = np.random.default_rng(4)
    for n in (1, 8, 300):
        left, right = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
        skip = rng.random(4 * n) < 0.2
        want = _joins_one_by_one(n, list(zip(left.tolist(), right.tolist())), skip.tolist())
        assert unionfind.joining_pairs(list(range(n)), left, right, skip).tolist() == want


@pytest.mark.parametrize("worth", [False, True])
def test_joining_pairs_refuses_bad_arguments_on_both_paths(worth, monkeypatch):
    from tasks.common.matching import compiled, unionfind

    monkeypatch.setattr(compiled, "worth_compiling", lambda items: worth)
    with pytest.raises(IndexError, match="node 5 is outside the 3 nodes"):
        unionfind.joining_pairs([0, 1, 2], [0], [5])  # compiled, it would write outside the forest
    with pytest.raises(IndexError, match="node -1 is outside"):
        unionfind.joining_pairs([0, 1, 2], [-1], [0])
    with pytest.raises(ValueError, match="one length"):
        unionfind.joining_pairs([0, 1, 2], [0, 1, 2], [1, 2, 0], skip=[True])
    with pytest.raises(ValueError, match="one length"):
        unionfind.joining_pairs([0, 1, 2], [0, 1], [1])
