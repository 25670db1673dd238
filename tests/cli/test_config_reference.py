"""``docs/config.md`` is generated from the config classes: it is complete (every section and key,
every built-in component's options, every key documented) and a stale copy fails this test."""

from __future__ import annotations

import typing

import attrs

from support.paths import DOCS

from grpo_run.cli.config_reference import _attrs_class, _field_docs, render_config_reference
from grpo_run.cli.main import main
from grpo_run.core.config.schema import KLSlot, RunConfig
from grpo_run.core.plugins.host import build_plugin_host

PAGE = DOCS / "config.md"


def own_registry():
    return build_plugin_host(autoload=False).registry


def test_docs_config_md_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == render_config_reference(own_registry()), (
        "docs/config.md is stale: regenerate it with: grpo-run docs config --output docs/config.md"
    )


def test_check_option_reports_a_stale_page(tmp_path, capsys) -> None:
    page = tmp_path / "config.md"
    page.write_text(PAGE.read_text(encoding="utf-8").replace("Rank of the adapter", "Rank of the"))
    assert main(["docs", "config", "--check", str(page)]) == 1
    assert f"{page} is stale: regenerate it with: grpo-run docs config --output {page}" in capsys.readouterr().err
    assert main(["docs", "config", "--output", str(page)]) == 0
    assert main(["docs", "config", "--check", str(page)]) == 0


def section_fields(cls: type, prefix: str):
    hints = typing.get_type_hints(cls)
    for f in attrs.fields(cls):
        yield f"{prefix}.{f.name}", cls, f
        nested = _attrs_class(hints[f.name])
        if nested is not None:
            yield from section_fields(nested, f"{prefix}.{f.name}")


def test_every_key_is_on_the_page_with_its_docstring() -> None:
    text = PAGE.read_text(encoding="utf-8")
    hints = typing.get_type_hints(RunConfig)
    checked = 0
    for top in attrs.fields(RunConfig):
        section = _attrs_class(hints[top.name]) or (KLSlot if top.name == "kl" else None)
        if section is None:
            assert f"### `[{top.name}" in text, top.name  # a plugin slot
            continue
        for path, cls, f in section_fields(section, top.name):
            if f.name == "config" or (section is KLSlot and f.name == "name"):
                continue  # the slot's component, and its name (described above the table)
            table = path.rpartition(".")[0]
            assert f"`[{table}]`" in text, table
            doc = _field_docs(cls).get(f.name)
            assert doc, f"{path} has no docstring under its field in the schema"
            assert f"| `{f.name}` |" in text, path
            checked += 1
    assert checked >= 80


def test_every_built_in_component_and_option_is_on_the_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    entries = [e for e in own_registry() if e.distribution == "grpo-run"]
    assert len(entries) >= 23
    for entry in entries:
        fam = entry.family
        title = f"`[{fam.slot}.{entry.name}]`" if fam.many else f'`{fam.key} "{entry.name}"`'
        assert f"#### {title}" in text, title
        block = text.split(f"#### {title}", 1)[1].split("\n#### ", 1)[0]
        for f in attrs.fields(entry.cls.Config) if attrs.has(entry.cls.Config) else ():
            assert f"| `{f.name}` |" in block, (entry.name, f.name)
            assert _field_docs(entry.cls.Config).get(f.name), f"{entry.name}.{f.name} has no docstring"
