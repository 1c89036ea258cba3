"""One helper for plurals (safe_text.plural), used wherever parinfo counts something for people."""
from __future__ import annotations

import pytest

from parinfo.process.defaults import affinity_cpus
from parinfo.safe_text import plural


@pytest.mark.parametrize(("n", "noun", "said"), [
    (1, "thread", "1 thread"), (0, "thread", "0 threads"), (2, "usable CPU", "2 usable CPUs"),
    (3, "process", "3 processes"), (1, "process", "1 process"), (2, "batch", "2 batches"),
])
def test_plural(n, noun, said):
    assert plural(n, noun) == said


def test_a_default_count_says_its_cpus_in_the_same_words():
    class Facts:
        affinity = (0,)
        logical_cpus = 1

    assert affinity_cpus(Facts()) == (1, "1 CPU in affinity")  # type: ignore[arg-type]
    Facts.affinity = (0, 1, 2)
    assert affinity_cpus(Facts()) == (3, "3 CPUs in affinity")  # type: ignore[arg-type]
