"""``UnionTimes``: whether two nodes were connected before a point of a sequence of unions."""

import numpy as np

from tasks.common.unionfind import UnionFind, UnionTimes


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
