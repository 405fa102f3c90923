"""The HTML a user opens: escaped names, offline, one JS bundle, unique ids, every report accounted for."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from report_helpers import write_recorded

from nsight_core.profile import build_profile
from nsight_core.render.html import GrowingFragment, render_fragment, render_page, vega_bundle

HOSTILE_NVTX = "<script>alert(1)</script>"
TEMPLATE_KERNEL = "void k<float, (int)4>(T1, T2)"
HOSTILE_TITLE = "Nsight region: <img src=x onerror=alert(2)>"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: Counter[str] = Counter()
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.scripts: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags[tag] += 1
        if "id" in attributes:
            self.ids.append(attributes["id"] or "")
        self.urls += [value or "" for key, value in attrs if key in {"src", "href"}]
        if tag == "script":
            self.scripts.append(attributes.get("type"))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def hostile_profile(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = write_recorded(tmp_path, "region", kernels=[(TEMPLATE_KERNEL, 5000, 5), ("plain_kernel", 100, 1)],
                          nvtx=[(HOSTILE_NVTX, 4000, 4), ('quote " & ampersand', 10, 1)])
    return build_profile(path, reports=["cuda_gpu_kern_sum", "nvtx_pushpop_sum", "cuda_api_sum"],
                         title=HOSTILE_TITLE)


def test_hostile_names_render_as_text(tmp_path: Path) -> None:
    page = render_page([hostile_profile(tmp_path)], notes=["trace uploaded to s3://bucket/<b>x</b>.nsys-rep"])
    parsed = parse(page)
    assert HOSTILE_NVTX not in page
    assert "<img src=x" not in page
    assert "<b>x</b>" not in page
    text = "".join(parsed.text)
    for shown in (HOSTILE_NVTX, TEMPLATE_KERNEL, HOSTILE_TITLE, 'quote " & ampersand', "s3://bucket/<b>x</b>.nsys-rep"):
        assert shown in text
    assert parsed.tags["img"] == 0 and parsed.tags["b"] == 1  # the one <b> is a skipped report's name
    # Chart data is JSON inside <script type="application/json">, with < and > escaped.
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in page


def test_page_needs_no_network_and_embeds_the_bundle_once(tmp_path: Path) -> None:
    profile = hostile_profile(tmp_path)
    page = render_page([profile, profile])
    parsed = parse(page)
    assert parsed.urls == []
    assert not re.search(r"https?://[^\s\"']*\.m?js[\"'?]", page)
    assert page.count(vega_bundle()) == 1
    assert parsed.scripts.count(None) == 2  # the bundle and the chart/sort code, once per fragment
    charts = parsed.scripts.count("application/json")
    assert charts == 2 * 3  # two sections: kernels, NVTX totals, NVTX distribution each


def test_two_fragments_on_one_page_never_share_an_id(tmp_path: Path) -> None:
    profile = hostile_profile(tmp_path)
    page = render_fragment([profile, profile]) + render_fragment([profile])
    ids = parse(page).ids
    assert len(ids) > 10
    assert len(ids) == len(set(ids))


def test_every_requested_report_has_a_table_or_a_reason(tmp_path: Path) -> None:
    page = render_page([hostile_profile(tmp_path)])
    text = "".join(parse(page).text)
    assert "cuda_gpu_kern_sum" in text and "nvtx_pushpop_sum" in text
    assert "Skipped reports" in text
    assert "cuda_api_sum: not recorded: no region_cuda_api_sum.csv" in text.replace("\n", "")
    assert "CUDA API time" in text and "cuda_api_sum: not recorded" in text


def test_a_fragment_grown_a_capture_at_a_time_shows_what_one_made_at_once_shows(tmp_path: Path) -> None:
    """The Flyte tab after each region: every capture so far, the earlier ones exactly as first rendered."""
    first = hostile_profile(tmp_path)
    second = first.model_copy(update={"title": "evaluation"})
    grown = GrowingFragment()
    assert not grown and "nothing to report" in grown.render()
    grown.add(first)
    once = grown.render()
    grown.add(second)
    twice = grown.render(["a note"])
    sections = [re.search(r"<section .*?</section>", page, re.S) for page in (once, twice)]
    assert sections[0] is not None and sections[1] is not None
    assert sections[0].group(0) == sections[1].group(0), "the first section is not rendered again"
    at_once = render_fragment([first, second], ["a note"])
    def shown(page: str) -> str:  # what a reader sees; ids differ from render to render
        return re.sub(r"nsr-[0-9a-f]{10}-[a-z]+-\d+", "ID", "".join(parse(page).text))
    assert shown(twice) == shown(at_once)
    assert len(parse(twice).ids) == len(set(parse(twice).ids)) == len(parse(at_once).ids)


def test_no_captures_says_so() -> None:
    assert "nothing to report" in render_fragment([])
