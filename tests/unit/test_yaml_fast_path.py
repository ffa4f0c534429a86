"""load_yaml reads a file's events with libyaml's C parser and hands them to ruamel's own composer and
round-trip constructor (engine/core/yaml_source.py): it must give the tree ruamel's pure-Python load gives,
value for value and type for type, with every key's and item's line and column (file:line errors depend on
them), and refuse what ruamel refuses with the same file:line. Checked on every YAML file of the repository,
on tricky documents, and on generated ones."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar

from engine.core import yaml_source
from engine.core.yaml_source import SourceError, load_yaml, round_trip_yaml
from tests.conftest import REPO


def slow_load(text: str):
    return round_trip_yaml().load(text)


def same_tree(fast, slow, where: str = "") -> None:
    """Equal values of the same types, and the same positions for every key and item."""
    assert type(fast) is type(slow), (where, type(fast), type(slow))
    if isinstance(slow, CommentedMap):
        assert list(fast) == list(slow), where
        assert (fast.lc.line, fast.lc.col) == (slow.lc.line, slow.lc.col), where
        for key in slow:
            assert fast.lc.key(key) == slow.lc.key(key), (where, key)
            if slow[key] is not None:   # an empty value: libyaml puts it after the colon, ruamel on the next line
                assert fast.lc.value(key) == slow.lc.value(key), (where, key)
            same_tree(fast[key], slow[key], f"{where}.{key}")
    elif isinstance(slow, CommentedSeq):
        assert len(fast) == len(slow), where
        for index, (a, b) in enumerate(zip(fast, slow)):
            assert fast.lc.item(index) == slow.lc.item(index), (where, index)
            same_tree(a, b, f"{where}[{index}]")
    elif isinstance(slow, TaggedScalar):   # `!thing value`: no __eq__ of its own
        assert (fast.value, str(fast.tag)) == (slow.value, str(slow.tag)), where
    else:
        assert fast == slow or (fast != fast and slow != slow), (where, fast, slow)   # nan is nan


def fast_load(tmp_path: Path, text: str):
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    yaml_source._PARSED.clear()
    return load_yaml(path)


REPO_YAML = sorted(p for p in REPO.rglob("*.y*ml") if ".venv" not in p.parts and ".git" not in p.parts
                   and p.suffix in (".yaml", ".yml"))


def test_the_repository_has_yaml_files_to_compare():
    assert len(REPO_YAML) >= 40 and any(p.parent.name == "playbooks" for p in REPO_YAML)


@pytest.mark.parametrize("path", REPO_YAML, ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_file_of_the_repository_loads_as_ruamel_loads_it(path):
    text = path.read_text()
    try:
        slow = slow_load(text)
    except Exception:  # noqa: BLE001 - a test fixture of broken YAML: refused both ways
        with pytest.raises(SourceError):
            yaml_source._PARSED.clear()
            load_yaml(path)
        return
    yaml_source._PARSED.clear()
    events = yaml_source._ruamel_events(yaml_source._checked_events(round_trip_yaml(), text, path))
    assert events is not None or "!" in text or "%" in text, "libyaml refused a file ruamel reads"
    same_tree(load_yaml(path), slow)


TRICKY = [
    "a: yes\nb: on\nc: 0777\nd: 0o17\ne: 1_000\nf: 1:20\ng: ~\nh: .nan\ni: -.inf\nj: 0x1F\nk: 1e3\nl: 1.0e-5\n",
    "when: 2026-12-03\nat: 2026-12-03T17:22:20Z\n",
    "s: 'it''s'\nd: \"tab\\tnew\\nline \\u00e9 \\x41\"\nf: >\n  folded\n  text\n\nl: |\n  literal\n   kept\n",
    "base: &b {lr: 0.1, steps: [1, 2]}\nother: *b\nlist:\n- *b\n- &x 3\n- *x\n",
    "? complex key\n: value\n[1, 2]: flow key\n",
    "- a\n- - b\n  - c\n- {x: 1, y: [2, 3]}\n",
    "plain: multi\n  line plain\nquoted: \"multi\n  line\"\n",
    "empty:\nnull_value: null\nTrue_: True\nFALSE_: FALSE\n",
    "%YAML 1.1\n---\na: yes\n",
    "tagged: !!str 12\ncustom: !thing value\n",
    "---\na: 1\n...\n",
    "# only a comment\n",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_documents_load_as_ruamel_loads_them(tmp_path, text):
    same_tree(fast_load(tmp_path, text), slow_load(text))


@pytest.mark.parametrize("text, line", [
    ("a: 1\na: 2\n", 2),                 # a duplicate key: ruamel's constructor refuses it
    ("a: *missing\n", 1),                # an undefined alias: ruamel's composer refuses it
    ("a: 1\n---\nb: 2\n", 2),            # two documents: the second starts at its `---`
    ("a: [1, 2\nb: 3\n", 2),             # broken flow: libyaml refuses, ruamel names the place
    ("a:\n\t- 1\n", 2),                  # a tab as indentation
])
def test_what_ruamel_refuses_is_refused_with_its_line(tmp_path, text, line):
    with pytest.raises(SourceError, match=rf"doc\.yaml:{line}:\d+: invalid YAML"):
        fast_load(tmp_path, text)


def test_a_cached_load_is_a_new_tree_each_time(tmp_path):
    path = tmp_path / "doc.yaml"
    path.write_text("a: {b: [1, 2]}\n")
    first = load_yaml(path)
    first["a"]["b"].append(3)
    second = load_yaml(path)
    assert second["a"]["b"] == [1, 2] and second is not first
    same_tree(second, slow_load(path.read_text()))


# Generated documents: nested block and flow collections of scalars that YAML 1.1 and 1.2 read differently.
SCALARS = st.one_of(
    st.sampled_from(["yes", "No", "on", "OFF", "~", "null", "0777", "0o17", "1_000", "1:20", ".5", "+1", "-0",
                     "1e3", "0x1f", "2026-12-03", "true", "y", "n", "'q'", '"d\\t"', ".inf", ".NaN", "=", "<<"]),
    st.text(alphabet=string.ascii_letters + string.digits + " _-.", min_size=1, max_size=8).map(str.strip)
    .filter(bool).filter(lambda s: not s.startswith(("-", "."))),
    st.integers(-10**6, 10**6).map(str),
)


def block(depth: int):
    keys = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=5)
    if depth == 0:
        return SCALARS
    inner = block(depth - 1)
    mapping = st.dictionaries(keys, inner, min_size=1, max_size=3)
    sequence = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(SCALARS, mapping, sequence)


def render(value, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(value, dict):
        return "".join(f"{pad}{k}:" + (f"\n{render(v, indent + 2)}" if isinstance(v, (dict, list)) else f" {v}\n")
                       for k, v in value.items())
    if isinstance(value, list):
        return "".join(f"{pad}-" + (f"\n{render(v, indent + 2)}" if isinstance(v, (dict, list)) else f" {v}\n")
                       for v in value)
    return f"{pad}{value}\n"


@settings(max_examples=150, deadline=None)
@given(document=block(3))
def test_generated_documents_load_as_ruamel_loads_them(tmp_path_factory, document):
    text = render(document)
    try:
        slow = slow_load(text)
    except Exception:  # noqa: BLE001 - a generated text ruamel refuses (a duplicate key): refused here too
        with pytest.raises(SourceError):
            fast_load(tmp_path_factory.mktemp("gen"), text)
        return
    same_tree(fast_load(tmp_path_factory.mktemp("gen"), text), slow)


def test_every_shipped_playbook_and_the_run_config_are_read_through_libyaml_s_events():
    """The fast path in use, not only equal: load_yaml keeps libyaml's events for a file it read that way (ruamel's
    own parse keeps a tree), so a fast parser that is lost or never taken fails here (the trees would still agree)."""
    from engine.core.bounded_read import read_text_file

    paths = [*sorted((REPO / "playbooks").glob("*.yaml")), REPO / "configs" / "run_config.yaml"]
    yaml_source._PARSED.clear()
    for path in paths:
        load_yaml(path)
    slow = [path.name for path in paths if yaml_source._PARSED[(str(path), read_text_file(path))][0] is None]
    assert slow == [], f"read by ruamel's pure-Python parser: {slow}"
