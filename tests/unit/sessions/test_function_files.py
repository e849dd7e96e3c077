"""Function definition files: YAML 1.2 front matter, errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessions.functions import FunctionLoadError, load_function_dir, parse_function_file

ROOT = Path(__file__).resolve().parents[3]


def test_examples_load() -> None:
    """The checked-in examples are valid."""
    defs, warnings = load_function_dir(ROOT / "examples" / "functions")
    assert sorted(defs) == ["approval", "escalation"] and warnings == []
    assert defs["approval"].continue_max == 3
    assert defs["approval"].observe[0].capture_payload_as == "approval_request"


def test_yaml_12_keys() -> None:
    """`on:` stays the string 'on' (YAML 1.1 would make it True)."""
    definition, errors, _ = parse_function_file(
        "---\nname: x\nobserve:\n  - on: tool_after\n    tool: bash\n---\n", "x.md"
    )
    assert errors == [] and definition is not None and definition.observe[0].on == "tool_after"


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("description: no name", "f.md: name: is required (a non-empty string)"),
        ("name: x\ngate: {all: signal_observed(a)}", "f.md: gate.all: must be a list of conditions"),
        (
            "name: x\ncontinue_until: {every: [a]}",
            "f.md: continue_until: must be a condition (a string, or a mapping with one of all / any / not)",
        ),
        ("name: x\ncontinue_max: -1", "f.md: continue_max: must be an integer >= 0"),
        (
            "name: x\nobserve: [{on: before, tool: bash}]",
            "f.md: observe[0].on: must be one of tool_after, message, activate (got 'before')",
        ),
        (
            "name: x\nobserve: [{on: tool_after, when_args: {equals: {}}}]",
            "f.md: observe[0].when_args: must be a mapping with match and/or not_match",
        ),
        (
            "name: x\ntransitions: [{activate: [y]}]",
            'f.md: transitions[0]: must be a mapping with when (a condition or "gate")',
        ),
        ("name: x\nrequires_evidence: tests", "f.md: requires_evidence: must be a list of names"),
    ],
)
def test_errors_name_file_and_field(front: str, message: str) -> None:
    """Each problem is reported as '<file>: <field>: <problem>'."""
    definition, errors, _ = parse_function_file(f"---\n{front}\n---\nbody\n", "f.md")
    assert definition is None and message in errors


def test_structure_errors_and_warnings(tmp_path: Path) -> None:
    """Missing front matter, broken YAML, duplicate names and unknown transition targets are errors; unknown conditions warn."""
    (tmp_path / "a.md").write_text("no front matter\n")
    (tmp_path / "b.md").write_text("---\nname: [unclosed\n---\n")
    (tmp_path / "c.md").write_text(
        "---\nname: c\ncontinue_until: made_up(x)\ntransitions: [{when: gate, activate: [ghost]}]\n---\n"
    )
    (tmp_path / "d.md").write_text("---\nname: c\n---\n")
    with pytest.raises(FunctionLoadError) as info:
        load_function_dir(tmp_path)
    errors = "\n".join(info.value.errors)
    assert f"{tmp_path}/a.md: the file must start with a '---' line (YAML front matter)" in errors
    assert f"{tmp_path}/b.md:" in errors and "invalid YAML" in errors
    assert f"{tmp_path}/d.md: name: 'c' is already defined in {tmp_path}/c.md" in errors
    assert f"{tmp_path}/c.md: transitions[0]: unknown function 'ghost'" in errors
    assert (
        f"{tmp_path}/c.md: continue_until: unknown condition 'made_up(x)' (always false)"
        in info.value.warnings
    )


def test_a_file_not_in_utf8_or_a_directory_named_md_is_an_error_naming_it(tmp_path: Path) -> None:
    """A definition file that was not UTF-8 (or a directory named ``x.md``) stopped the web app and ``functions
    check|simulate`` with a bare UnicodeDecodeError naming no file; now each is an error line naming its path,
    beside the other files' errors, and a good file with CRLF line ends still loads."""
    (tmp_path / "a.md").write_bytes(b'---\nname: a\ndescription: "\xff"\n---\n')
    (tmp_path / "x.md").mkdir()
    (tmp_path / "b.md").write_text("no front matter\n")
    (tmp_path / "ok.md").write_bytes(b"---\r\nname: ok\r\n---\r\nbody\r\n")
    with pytest.raises(FunctionLoadError) as info:
        load_function_dir(tmp_path)
    errors = info.value.errors
    assert f"{tmp_path}/a.md: not UTF-8 (byte 0xff at offset 26)" in errors
    assert any(e.startswith(f"{tmp_path}/x.md: cannot be read: ") for e in errors), errors
    assert any(e.startswith(f"{tmp_path}/b.md: ") for e in errors), errors
    assert len(errors) == 3, errors
    for bad in ("a.md", "b.md"):
        (tmp_path / bad).unlink()
    (tmp_path / "x.md").rmdir()
    assert load_function_dir(tmp_path)[0]["ok"].body.strip() == "body"


def test_an_observe_spec_on_tool_after_without_tool_warns_that_it_never_fires() -> None:
    """rolebox fires a tool_after spec only when ``spec.tool === tool``: one without ``tool`` never fires, which
    ``functions check`` says; a spec with a tool, and one on another event, do not warn."""
    front = (
        "name: f\nobserve:\n  - {on: tool_after, set_evidence: seen}\n"
        "  - {on: tool_after, tool: bash, set_evidence: ran}\n"
    )
    definition, errors, warnings = parse_function_file(f"---\n{front}---\nbody\n", "f.md")
    assert definition is not None and errors == []
    assert warnings == [
        "f.md: observe[0]: on tool_after without tool never fires (rolebox matches spec.tool === tool)"
    ]


def test_check_of_a_folder_without_definitions_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CLI audit: ``functions check`` of an empty (or mistyped) folder said ``ok (0 functions: )``, exit 0."""
    from producers.cli.functions import run_check

    assert run_check(str(tmp_path)) == 2
    assert capsys.readouterr().out.strip() == f"{tmp_path}: no *.md definition found"
