#!/usr/bin/env python3
# Writes tests/loader/golden/interleave.tsv: the sources torchtitan 0.3.0's
# InterleavedDataset (torchtitan/hf_datasets/interleaved.py) draws, window by
# window, for a few seeds and weights, over fake sources that yield their own
# index forever.  tests/loader/test_mix.c holds lib/loader/mixer.c to it.
# Columns: seed, weights (repr, comma-separated), the sources drawn
# (comma-separated), then the interleaver's rng_state after them as its
# state_dict() holds it: the index and the sum of the 624 words mod 2^32.
# Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/interleave_golden.py \
#        > tests/loader/golden/interleave.tsv
import itertools

from torch.utils.data import IterableDataset
from torchtitan.hf_datasets.interleaved import InterleavedDataset


class Source(IterableDataset):
    """An endless source that yields its own index (0.3.0's text sources
    re-loop themselves with infinite = True, its default)."""

    def __init__(self, i):
        self.i = i

    def __iter__(self):
        while True:
            yield self.i

    def state_dict(self):
        return {}

    def load_state_dict(self, sd):
        pass


CASES = [
    (42, [0.7, 0.2, 0.1], 3000),           # the issue's example, 0.3.0's default seed
    (0, [1, 1], 500),
    (2**40 + 5, [0.5, 0.25, 0.125, 0.125], 500),  # a two-word seed
    (7, [3, 0, 1e-3, 2.5], 800),           # a zero weight is never drawn
    (123, [0.1] * 10, 1500),               # running sums that round
    (2**63 - 1, [1.0], 5),
    (99, [1e-9, 1.0, 1e-9], 700),
]

print("# seed\tweights\tdraws\trng_index\trng_sum")
for seed, weights, n in CASES:
    ds = InterleavedDataset([Source(i) for i in range(len(weights))], weights, seed=seed)
    draws = list(itertools.islice(iter(ds), n))
    version, words, gauss = ds.state_dict()["rng_state"]
    assert version == 3 and gauss is None and len(words) == 625
    print(f"{seed}\t{','.join(repr(float(w)) for w in weights)}\t"
          f"{','.join(map(str, draws))}\t{words[624]}\t{sum(words[:624]) % 2**32}")
