"""What a candidate generation records about the live documents it was built from (`copied.json`): read back as
written, and an unreadable record means "check every document", never an error (the tuning loop itself:
tests/service/api/test_tuning.py; a switch killed midway: test_tuning_process.py)."""

from __future__ import annotations

from pathlib import Path

from service.evaluation.tuning import COPIED, copied_generations, record_copied
from service.index.generations import Generations


def test_the_copied_record_reads_back_and_a_damaged_one_checks_everything(tmp_path: Path) -> None:
    generations = Generations(tmp_path, "packaged:all-MiniLM-L6-v2")
    gen = generations.new("t1", "t1")
    assert copied_generations(generations, gen) is None  # never recorded
    record_copied(generations, gen, {"kb/vpn": 3, "kb/wifi": 1})
    assert copied_generations(generations, gen) == {"kb/vpn": 3, "kb/wifi": 1}
    (generations.index_path(gen).parent / COPIED).write_text('{"kb/vpn": 3, "kb/wi')  # cut short
    assert copied_generations(generations, gen) is None
