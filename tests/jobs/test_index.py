"""CustomIds: any line's custom_id from disk, in order of lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.jobs.index import CustomIds


def test_custom_ids_round_trip_and_reopen(tmp_path: Path) -> None:
    ids = CustomIds(tmp_path, create=True)
    names = ["a", "", 'quote " and \n newline', "ünï", *[f"id-{i}" for i in range(1000)]]
    for n, name in enumerate(names, start=1):
        ids.add(n, name)
    with pytest.raises(ValueError):
        ids.add(1, "again")
    ids.close()
    again = CustomIds(tmp_path)
    assert [again.get(n) for n in (1, 2, 3, 4, 1004)] == [*names[:4], "id-999"]
    with pytest.raises(KeyError):
        again.get(1005)
    again.close()
