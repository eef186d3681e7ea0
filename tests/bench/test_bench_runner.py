"""The benchmark runner at tiny sizes: every table is there and the numbers are sane.

Benchmarks are not tests: nothing here asserts a time. The optimum is checked only when
highspy is installed; the other checks never need it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.bench import optimum, packing, runner
from gpufleet.bench.common import Section
from gpufleet.cli.main import app


@pytest.fixture(scope="module")
def quick_sections() -> list[Section]:
    return runner.run_benchmarks(list(runner.BENCHMARKS), quick=True)


def test_every_benchmark_has_its_tables(quick_sections: list[Section]) -> None:
    assert [s.key for s in quick_sections] == ["B1", "B2", "B3", "B4", "B5"]
    titles = [t.title.split(":")[0] for s in quick_sections for t in s.tables]
    assert titles == ["B1a", "B1b", "B1c", "B1d", "B2a", "B2b", "B3", "B4", "B5"]
    for section in quick_sections:
        for table in section.tables:
            assert table.rows, table.title
            assert all(len(r) == len(table.headers) for r in table.rows), table.title


def test_speed_places_replicas_in_both_modes(quick_sections: list[Section]) -> None:
    b1 = quick_sections[0].numbers
    for mode in ("free-GPU", "whole-node"):
        placed = [v for k, v in b1.items() if k.startswith(mode) and k.endswith("/placed")]
        assert placed and all(p > 0 for p in placed)
        times = [v for k, v in b1.items() if k.startswith(mode) and k.endswith("/seconds")]
        assert all(t > 0 for t in times)


def test_b1_flatness_and_growth_rows_did_their_work(quick_sections: list[Section]) -> None:
    """B1c's fleets place the same demand (held fixed); B1d's places more as the fleet grows."""
    b1 = quick_sections[0]
    flat = next(t for t in b1.tables if t.title.startswith("B1c"))
    assert len({row[6] for row in flat.rows}) == 1 and flat.rows[0][6] != "0"
    assert b1.numbers["flatness/ratio"] > 0
    grown = sorted(
        (k, v) for k, v in b1.numbers.items() if k.startswith("grown/") and k.endswith("/placed")
    )
    assert len(grown) == 2 and all(v > 0 for _, v in grown)


def test_free_gpu_allocates_at_least_whole_node(quick_sections: list[Section]) -> None:
    b2 = quick_sections[1].numbers
    for g in (8, 4):
        whole = b2[f"static/{g}/{packing.WHOLE_NODE}/all"]
        for policy in (packing.SPREAD, packing.PACK):
            assert b2[f"static/{g}/{policy}/all"] >= whole
        assert (
            b2[f"dynamic/{g}/{packing.PACK}/average"]
            >= b2[f"dynamic/{g}/{packing.WHOLE_NODE}/average"]
        )


@pytest.mark.skipif(not optimum.is_available(), reason="highspy is not installed")
def test_optimum_bounds_every_heuristic(quick_sections: list[Section]) -> None:
    b2 = quick_sections[1].numbers
    for g in (8, 4):
        for metric in ("first", "all"):
            best = b2[f"static/{g}/optimum/{metric}"]
            for policy in packing.POLICIES:
                assert b2[f"static/{g}/{policy}/{metric}"] <= best
            assert best <= 8 * g  # the quick pool: 8 nodes


@pytest.mark.skipif(not optimum.is_available(), reason="highspy is not installed")
def test_optimum_on_a_hand_instance() -> None:
    # Two 8-GPU nodes: 4+4 and 8 fit; a third 4 does not.
    shapes: list[optimum.Shape] = [((4, 1),), ((8, 1),), ((4, 1),), ((4, 1),)]
    assert optimum.longest_packable_prefix(shapes, 2, 8) == (3, True)
    best = optimum.max_gpus({((4, 1),): 3, ((8, 1),): 1}, 2, 8)
    assert best.value == 16 and best.is_optimal
    assert optimum.min_nodes({2: 3, 4: 1, 8: 1}, 8).value == 3


def test_packing_replay_never_overcommits() -> None:
    trace = packing.static_trace(3, 6, 8)
    for policy in (packing.SPREAD, packing.PACK, packing.STEERED):
        model = packing.PoolModel(policy, 6, 8)
        for arrival in trace:
            model.offer(arrival)
            assert all(0 <= f <= 8 for f in model.free)
            assert model.allocated == 6 * 8 - sum(model.free)


def test_misprediction_shares_are_shares(quick_sections: list[Section]) -> None:
    b5 = quick_sections[4].numbers
    shares = [v for k, v in b5.items() if k.endswith("/share")]
    # Steering off: predict x cluster (2 x 2); steering Preferred and Required x cluster (2 x 2).
    assert len(shares) == 8 and all(0.0 <= s <= 1.0 for s in shares)
    assert all(v > 0 for k, v in b5.items() if k.endswith("/replicas"))


def test_markdown_has_every_section_and_the_machine(
    quick_sections: list[Section], tmp_path: Path
) -> None:
    machine = runner.Machine(cores=2, python="3.11.7", system="Linux", cpu="test cpu")
    text = runner.render_markdown(
        quick_sections,
        command="gpufleet bench --quick",
        date="2026-01-02",
        machine=machine,
        quick=True,
        total_s=1.0,
    )
    for heading in ("## Targets", "## B1.", "## B2.", "## B3.", "## B4.", "## B5."):
        assert heading in text
    assert "2026-01-02" in text and "2 cores (test cpu), Python 3.11.7" in text
    written = runner.write_report(tmp_path / "performance.md", text, quick_sections)
    svgs = [p for p in written if p.suffix == ".svg"]
    assert svgs and all(p.read_text().startswith("<svg") for p in svgs)
    for p in svgs:
        assert f"performance/{p.name}" in text


def test_only_parses_and_rejects() -> None:
    assert runner.parse_only("b3, B1") == ["B1", "B3"]
    assert runner.parse_only(None) == list(runner.BENCHMARKS)
    with pytest.raises(runner.UnknownBenchmark, match="B9"):
        runner.parse_only("B9")


def test_cli_quick_only_b1(tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    result = CliRunner().invoke(
        app, ["bench", "--quick", "--only", "B1", "--write", str(out), "--date", "2026-01-03"]
    )
    assert result.exit_code == 0, result.output
    assert "B1a: time by clusters" in result.output
    assert "2026-01-03" in out.read_text()
    assert (tmp_path / "performance" / "b1-clusters.svg").exists()


def test_cli_rejects_unknown_benchmark() -> None:
    result = CliRunner().invoke(app, ["bench", "--only", "B7"])
    assert result.exit_code == 2


def test_packing_without_the_solver_skips_the_optimum() -> None:
    section = packing.run(quick=True, with_optimum=False)
    assert not any(k.startswith("static/8/optimum") for k in section.numbers)
    assert any("highspy is not installed" in n for n in section.notes)
    assert all(row[1] != "optimum" for row in section.tables[0].rows)


def test_writing_over_a_page_keeps_its_hand_written_sections(
    quick_sections: list[Section], tmp_path: Path
) -> None:
    """Only the runner's blocks are replaced: hand-written text stays where it is, a
    benchmark not run keeps its block and its Targets rows."""
    machine = runner.Machine(cores=2, python="3.11.7", system="Linux", cpu="test cpu")

    def page(sections: list[Section], date: str) -> str:
        return runner.render_markdown(
            sections, command="c", date=date, machine=machine, quick=True, total_s=1.0
        )

    path = tmp_path / "performance.md"
    runner.write_report(path, page(quick_sections, "2026-01-01"), quick_sections)
    first = path.read_text()
    b3_block = runner.blocks(first)["B3"]
    b2_rows = [r for r in runner.blocks(first)["targets"].split("\n") if r.startswith("| B2 ")]
    hand = "## By hand\n\nWritten by a person, kept.\n"
    path.write_text(first.replace(runner.end("B2"), runner.end("B2") + "\n\n" + hand))
    only_b1 = [s for s in quick_sections if s.key == "B1"]
    runner.write_report(path, page(only_b1, "2026-02-02"), only_b1)
    second = path.read_text()
    assert hand in second and second.index(hand) > second.index(runner.end("B2"))
    assert "2026-02-02" in second and "2026-01-01" not in second
    assert runner.blocks(second)["B3"] == b3_block
    assert b2_rows and all(r in runner.blocks(second)["targets"] for r in b2_rows)
    assert second.count(runner.begin("B1")) == 1
