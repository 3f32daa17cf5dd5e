import json
from datetime import date

from notes.export import to_csv, to_json
from notes.store import Note, NoteStore


def store():
    s = NoteStore()
    s.add(Note("b", date(2024, 5, 2), ["work"]))
    s.add(Note("a", date(2024, 5, 2), ["home", "work"]))
    s.add(Note("c", date(2024, 1, 9)))
    return s


def test_csv():
    assert to_csv(store()).splitlines() == [
        "title,created,tags", "c,2024-01-09,", "a,2024-05-02,home;work", "b,2024-05-02,work"]


def test_json():
    data = json.loads(to_json(store()))
    assert [n["title"] for n in data] == ["c", "a", "b"]
    assert data[1] == {"title": "a", "created": "2024-05-02", "tags": ["home", "work"]}


def test_filter_then_export():
    assert [n["title"] for n in json.loads(to_json(store().with_tag("work")))] == ["a", "b"]
