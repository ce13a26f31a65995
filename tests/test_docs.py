"""The documentation stays true to the code: the generated reference, the links, and the lists
of settings, metrics, chart values and reason codes in docs/operations.md.

- `docs/reference.md` is what `docs/gen_reference.py` renders from the CRDs (`make docs`).
- Every relative link in README.md and docs/*.md names a file that exists, and every anchor
  (`file.md#heading`, `#heading`) a heading of that file, slugged as GitHub slugs them.
- docs/operations.md names every `SLASCALER_*` setting, every metric the operator exports,
  every top-level chart value and every decision reason code, so none is left undocumented.
- The README's test command is the one `.ci/run` runs, and it carries the benchmark-summary
  markers that the benchmark's summary is written between.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from slascaler.policy.reasons import Reason
from slascaler.settings import VARIABLES
from slascaler.telemetry import Telemetry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
PAGES = (README, *sorted(DOCS.glob("*.md")))

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in _prose(path):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def test_the_reference_is_generated_from_the_crds() -> None:
    expected = _generator().render()
    written = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert written == expected, (
        "docs/reference.md is out of date with manifests/crds/: run `make docs`"
    )


def test_the_reference_has_every_field_of_both_crds() -> None:
    written = (DOCS / "reference.md").read_text(encoding="utf-8")
    for name in ("slascaler.io_inferenceslas.yaml", "slascaler.io_gpupools.yaml"):
        crd = yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text(encoding="utf-8"))
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for top in ("spec", "status"):
            for field in schema["properties"][top]["properties"]:
                assert f"`{top}.{field}`" in written, (name, top, field)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not destination.exists():
            broken.append(f"{where}: no such file")
            continue
        if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{where}: no heading with that anchor in {destination.name}")
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_links_and_anchors() -> None:
    assert slug("`slascaler analyze`") == "slascaler-analyze"
    assert slug("Shared GPU pool: peaks that collide") == "shared-gpu-pool-peaks-that-collide"
    assert slug("Status, conditions and events") == "status-conditions-and-events"
    assert "slascalerslanotmet" in anchors(DOCS / "runbook.md")
    found = dict(links(README))
    assert any(t == "docs/benchmark.md" for t in found.values())


def _documented(name: str) -> bool:
    return f"`{name}`" in OPERATIONS.read_text(encoding="utf-8")


def test_operations_lists_every_setting() -> None:
    missing = [name for name in VARIABLES if not _documented(name)]
    assert not missing, f"docs/operations.md does not list the settings {missing}"


def test_operations_lists_every_metric_of_the_operator() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    families = [metric.name for metric in Telemetry().registry.collect()]
    assert len(families) > 20
    # A counter's family is named without `_total`; the document names the full series.
    missing = [n for n in families if f"`{n}`" not in text and f"`{n}_total`" not in text]
    assert not missing, f"docs/operations.md does not list the metrics {missing}"


def test_operations_lists_every_chart_value() -> None:
    values = yaml.safe_load((ROOT / "charts" / "slascaler" / "values.yaml").read_text("utf-8"))
    missing = [name for name in values if not _documented(name)]
    assert not missing, f"docs/operations.md does not list the chart values {missing}"


def test_operations_lists_every_reason_code() -> None:
    missing = [str(reason) for reason in Reason if not _documented(str(reason))]
    assert not missing, f"docs/operations.md does not list the reason codes {missing}"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^exec make test$", ci, re.MULTILINE)
    assert re.search(r"^\$ make test\b", README.read_text(encoding="utf-8"), re.MULTILINE)


def test_the_readme_has_one_benchmark_summary_block() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"
    assert text.count(start) == 1 and text.count(end) == 1
    assert text.index(start) < text.index(end)
