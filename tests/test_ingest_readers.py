"""The readers of ``factloom ingest`` (factloom.client.read_facts): whatever names a file holds — quotes,
commas, tabs, newlines, markup, right-to-left marks, 4-byte emoji, 1,000 characters — come back as
written, and a line that is not a fact is refused with its file and line number."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factloom.client import read_facts

HOSTILE = ["\"quoted\"", "a,b", "tab\there", "line\nbreak", "cr\r\nlf", "<script>alert(1)</script>", "`}{`",
           "\u202eevil", "\U0001f600 emoji", "x" * 1000, "'; MATCH (n) DETACH DELETE n //", "$(rm -rf /)"]

names = st.one_of(
    st.sampled_from(HOSTILE),
    # any text a file can hold: no surrogates (not encodable), no NUL (the API refuses it), not blank
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=60)
    .filter(lambda s: s.strip() != ""),
)
facts = st.lists(st.fixed_dictionaries({"subject": names, "predicate": st.sampled_from(["directed_by", "genre"]),
                                        "object": names, "source": names}), min_size=1, max_size=8)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(rows=facts)
def test_jsonl_reads_back_what_was_written(rows: list[dict[str, str]], tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert list(read_facts(str(path))) == rows


@pytest.mark.parametrize("suffix, delimiter", [(".csv", ","), (".tsv", "\t")])
@SETTINGS
@given(rows=facts)
def test_csv_and_tsv_read_back_what_was_written(rows: list[dict[str, str]], suffix: str, delimiter: str,
                                                tmp_path: Path) -> None:
    path = tmp_path / f"facts{suffix}"
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["subject", "predicate", "object", "source"], delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    assert list(read_facts(str(path))) == rows


def test_a_line_that_is_not_a_fact_is_refused_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"subject": "a", "predicate": "p", "object": "b"}\n{"subject": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        list(read_facts(str(path)))
    path.write_text('["a", "p", "b"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: expected a JSON object"):
        list(read_facts(str(path)))
    lines = tmp_path / "bad.txt"
    lines.write_text("a|p|b\nonly|two\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected subject\|predicate\|object"):
        list(read_facts(str(lines)))
