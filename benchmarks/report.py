"""The README's benchmark lines, read from the raw rows in ``results/benchmarks/`` (never typed by hand).

    python benchmarks/report.py [--results results/benchmarks] [--write-readme README.md | --check-readme README.md]

Each ``solve_reference_graphs*.csv`` written by ``benchmarks/solve_reference_graphs.py`` (with its
``.json``: the exact command, commit and machine load) gives one Markdown bullet: how many cells the
pipeline certified (re-simulated, within the gap, or infeasible with a proof), the first-schedule target,
the outcomes of the comparison with the plain MILP (both, tie, win, loss, open, disagree; see that
script's docstring) and the geometric-mean speed-ups over the cells both certify, with and without the
cells the shared memory-bound check decides; then one line per ablation. ``ilp_scaling.csv`` gives a
line too. ``--write-readme`` puts the lines between the README's ``<!-- benchmarks/report.py -->``
markers; ``--check-readme`` fails when they differ from what the CSVs say (a test runs it).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, geomean  # noqa: E402

BEGIN, END = "<!-- benchmarks/report.py -->", "<!-- /benchmarks/report.py -->"
FIRST_SCHEDULE_TARGET_S = 10.0


def read_run(path: Path) -> tuple[list[dict], dict]:
    """The rows of one CSV (empty strings as None, numbers as floats) and its metadata."""
    with path.open(newline="") as f:
        rows = [{k: _value(v) for k, v in r.items()} for r in csv.DictReader(f)]
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return rows, meta


def _value(text: str) -> object:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def provenance(meta: dict) -> str:
    load = meta.get("load_average_start")
    where = f"{meta.get('cpus', '?')} cores, load {load[0]:.1f} at the start" if load else "load not recorded"
    if load and meta.get("load_average_end"):
        where += f", {meta['load_average_end'][0]:.1f} at the end"
    when = (meta.get("started") or "?")[:10]
    unfinished = "" if meta.get("finished") else f"; stopped or still running after {meta.get('rows', '?')} cells"
    return f"at {meta.get('commit', '?')}, {when}, {where}{unfinished}"


def wrapped(line: str, indent: str = "") -> str:
    """A Markdown bullet wrapped to the README's width, its continuation lines indented under it."""
    return "\n".join(textwrap.wrap(line, 118, initial_indent=indent, subsequent_indent=indent + "  ",
                                    break_on_hyphens=False, break_long_words=False))


def _cell(r: dict) -> str:
    return f"{r['graph']} {r['budget']:g}"


def _x(value: float) -> str:
    return f"{value:.2f}×"


def solve_lines(rows: list[dict], meta: dict) -> list[str]:
    """One bullet for a run of solve_reference_graphs.py, and a line per ablation under it."""
    n = len(rows)
    certified = [r for r in rows if r.get("certified")]
    parts = [f"{len(certified)} of {n} cells certified by the pipeline (re-simulated, within 1e-4 of its bound, or "
             f"infeasible with a proof)"]
    if certified:
        slowest = max(certified, key=lambda r: r["pipe_s"])
        parts[-1] += f", the slowest {_cell(slowest)} in {slowest['pipe_s']:.1f} s"
    gap1 = [r for r in rows if r.get("gap1_s") is not None]
    if len(gap1) > len(certified):
        parts.append(f"within 1 % of the bound or proved infeasible on {len(gap1)} of {n} "
                     f"(at most {max(r['gap1_s'] for r in gap1):.1f} s)")
    late = [r for r in rows if r.get("time_limit") and r["pipe_s"] > 1.05 * r["time_limit"]]
    if late:
        worst = max(late, key=lambda r: r["pipe_s"])
        parts.append(f"the pipeline ran past its {worst['time_limit']:g} s limit on {len(late)} cells "
                     f"(up to {worst['pipe_s']:.0f} s, {_cell(worst)})")
    with_schedule = [r for r in rows if r.get("first_s") is not None]
    no_schedule = [r for r in rows if r.get("first_s") is None and r.get("certified") != "infeasible"]
    if with_schedule:
        fast = sum(r["first_s"] <= FIRST_SCHEDULE_TARGET_S for r in with_schedule)
        parts.append(f"first schedule within {FIRST_SCHEDULE_TARGET_S:g} s on {fast} of the {len(with_schedule)} "
                     f"cells with one (at most {max(r['first_s'] for r in with_schedule):.2g} s)"
                     + (f"; none found on {len(no_schedule)} unproved cells" if no_schedule else ""))
    wrong = sum(int(r.get("incumbents_wrong") or 0) for r in rows)
    checked = sum(int(r.get("incumbents_checked") or 0) for r in rows)
    parts.append(f"{checked} incumbents taken on a claimed cost simulated again, {wrong} wrong")
    if any(r.get("plain_status") for r in rows):
        parts.extend(comparison(rows))
    lines = [wrapped(f"- `{meta.get('command', '?')}` ({provenance(meta)}): " + "; ".join(parts) + ".")]
    lines.extend(wrapped(line, "  ") for line in ablation_lines(rows))
    return lines


def comparison(rows: list[dict]) -> list[str]:
    """The plain MILP against the pipeline, cell by cell outcomes and speed-ups."""
    by = {k: [r for r in rows if r.get("outcome") == k] for k in ("both", "tie", "win", "loss", "open", "disagree")}
    plain = sum(1 for r in rows if r.get("plain_certified"))
    parts = [f"plain MILP certified {plain} of {len(rows)}; outcomes: {len(by['both'])} both certify and agree, "
             f"{len(by['tie'])} decided by the memory-bound check both run, {len(by['win'])} only the pipeline, "
             f"{len(by['loss'])} only the plain MILP (losses), {len(by['open'])} neither, "
             f"{len(by['disagree'])} disagree"]
    optimal = [r["speedup"] for r in by["both"] if r.get("certified") == "optimal"]
    proofs = [r for r in by["both"] if r.get("certified") == "infeasible"]
    if optimal:
        parts.append(f"speed-up to a certified answer {_x(geomean(optimal))} (geometric mean over the "
                     f"{len(optimal)} cells both prove optimal)")
    if proofs:
        parts.append(f"{_x(geomean([r['speedup'] for r in by['both']]))} over the {len(by['both'])} cells both "
                     f"certify, {len(proofs)} of them infeasibility proofs by a solver")
    if by["tie"] and by["both"]:
        everything = [r["speedup"] for r in by["both"] + by["tie"]]
        parts.append(f"{_x(geomean(everything))} counting the {len(by['tie'])} memory-bound cells as 1×")
    if by["win"]:
        floors = [r["speedup_at_least"] for r in by["win"] if r.get("speedup_at_least")]
        named = ", ".join(f"{_cell(r)} ≥ {_x(r['speedup_at_least'])}" for r in by["win"] if r.get("speedup_at_least"))
        parts.append(f"where only the pipeline certifies, the plain MILP ran out of time: {named}" if floors
                     else "the plain MILP failed without running out of time where only the pipeline certifies")
    if by["loss"] or by["disagree"]:
        parts.append("losses and disagreements: " + ", ".join(_cell(r) for r in by["loss"] + by["disagree"]))
    return parts


def ablation_lines(rows: list[dict]) -> list[str]:
    names = sorted({k[: -len("_status")] for r in rows for k in r if k.endswith("_status") and k != "plain_status"})
    lines = []
    for name in names:
        pairs = [(r[f"{name}_s"], r["pipe_s"], r) for r in rows if r.get(f"{name}_s") is not None
                 and r.get("certified") == "optimal"]
        clashes = [r for r in rows if str(r.get(f"{name}_status") or "").startswith("disagree")]
        if not pairs:
            continue
        worst = max(pairs, key=lambda p: p[0] / p[1])
        lines.append(f"- ablation `{name}`: {_x(geomean([a / b for a, b, _ in pairs]))} the pipeline's time "
                     f"(geometric mean over the {len(pairs)} cells both prove optimal), slower on "
                     f"{sum(a > b for a, b, _ in pairs)}; most on {_cell(worst[2])}: {worst[0]:.1f} s instead of "
                     f"{worst[1]:.1f} s" + (f"; {len(clashes)} disagree" if clashes else ""))
    return lines


def scaling_lines(rows: list[dict], meta: dict) -> list[str]:
    """One bullet for ilp_scaling.py: the plain MILP alone, with what the memory-bound check would settle."""
    solved = [r for r in rows if r.get("certified")]
    bound_cells = [r for r in rows if r.get("memory_bound_infeasible") in (True, "True")]
    largest = max(rows, key=lambda r: r["variables"]) if rows else None
    text = (f"- `{meta.get('command', '?')}` ({provenance(meta)}): the plain MILP certified {len(solved)} of "
            f"{len(rows)} cells within the limit")
    if largest:
        text += (f"; the largest model {largest['graph']} ({int(largest['variables'])} variables, "
                 f"{int(largest['constraints'])} rows) built in {largest['build_s']:.1f} s, {largest['status']} "
                 f"after {largest['solve_s']:.1f} s")
    if bound_cells:
        text += (f"; {len(bound_cells)} cells are below the memory bound, which the MILP took "
                 f"{sum(r['solve_s'] for r in bound_cells):.1f} s in all to prove")
    return [wrapped(text + ".")]


def _num(value: object, digits: str = ".3g") -> str:
    return "-" if value is None else f"{value:{digits}}"


def _gap_percent(row: dict) -> str:
    return _num(None if row.get("gap") is None else 100 * row["gap"], ".2f")


def targets_lines(rows: list[dict], meta: dict) -> list[str]:
    """targets.py: how many cells hold, which do not and the gap reached, then every cell in a table."""
    held = [r for r in rows if r["verdict"] == "holds"]
    proved_infeasible = [r for r in held if r["status"] == "infeasible"]
    kind = "points of the span" if rows[0].get("budget_kind") == "span" else "fractions of the no-recomputation peak"
    text = (f"- Issue 27's targets at {kind}, `{meta.get('command', '?')}` ({provenance(meta)}): {len(held)} of "
            f"{len(rows)} cells hold")
    if proved_infeasible:
        text += (f" ({len(proved_infeasible)} of them infeasible with a proof: the budget is below what the graph "
                 f"needs at its hungriest step)")
    others = [r for r in rows if r["verdict"] != "holds"]
    if others:
        text += "; not holding (open: the cap is below the target's limit; fails: the full limit was spent): " + (
            ", ".join(f"{r['graph']} {r['fraction']:g} {r['verdict']} "
                      + (f"at gap {100 * r['gap']:.2f} %" if r.get("gap") is not None else "with no schedule")
                      for r in others))
    lines = [wrapped(text + "."), ""]
    lines.append("  | group | graph | nodes | fraction | verdict | status | overhead | gap % | first s | solve s "
                 "| limit s |")
    lines.append("  |---|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(f"  | {r['group']} | {r['graph']} | {int(r['nodes'])} | {r['fraction']:g} | {r['verdict']} | "
                     f"{r['status']} | {_num(r.get('overhead'), '.4f')} | {_gap_percent(r)} | "
                     f"{_num(r.get('first_s'), '.2f')} | {r['solve_s']:.1f} | {r['limit_s']:g} |")
    return lines + [""]


def scaling_family_lines(rows: list[dict], meta: dict, family: str) -> list[str]:
    """scaling.py: time to each milestone per contender and size, and the fitted growth exponents."""
    from scaling import MILESTONES, growth_exponents

    built = [r for r in rows if r["status"] != "not_built"]
    text = (f"- Scaling ({family}), `{meta.get('command', '?')}` ({provenance(meta)}), seconds to the first schedule "
            f"/ within 5 % / within 1 % / proved (1e-4), '-' not reached in the limit, figure "
            f"`results/figures/scaling_{family}.png`:")
    header = "  | nodes | contender | status | overhead | gap % | first | 5 % | 1 % | proof | ran s |"
    lines = [wrapped(text), "", header, "  |---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"  | {int(r['nodes'])} | {r['contender']} | {r['status']} | {_num(r.get('overhead'), '.4f')} | "
                     f"{_gap_percent(r)} | " + " | ".join(_num(r.get(k), '.3g') for k in MILESTONES)
                     + f" | {_num(r.get('solve_s'), '.0f')} |")
    fits = "; ".join(f"{e['contender']} " + (", ".join(f"{k[:-2]} {e[k]:.2f} ({int(e[k + '_sizes'])} sizes)"
                                                     for k in MILESTONES if e.get(k) is not None)
                                           or "none (no milestone reached at two sizes)")
                     for e in growth_exponents(built))
    text = f"  Growth exponent (slope of log seconds against log nodes over the sizes reached): {fits}."
    return lines + ["", wrapped(text), ""]


def report(results: Path) -> list[str]:
    lines = []
    for path in sorted(results.glob("solve_reference_graphs*.csv")):
        rows, meta = read_run(path)
        if rows:
            lines.extend(solve_lines(rows, meta))
    scaling = results / "ilp_scaling.csv"
    if scaling.exists() and read_run(scaling)[0]:
        lines.extend(scaling_lines(*read_run(scaling)))
    for path in sorted(results.glob("targets*.csv")):
        rows, meta = read_run(path)
        if rows:
            lines.extend(targets_lines(rows, meta))
    for path in sorted(results.glob("scaling_*.csv")):
        rows, meta = read_run(path)
        if rows:
            lines.extend(scaling_family_lines(rows, meta, path.stem.removeprefix("scaling_")))
    return lines


def with_block(readme: str, lines: list[str]) -> str:
    """``readme`` with the text between the markers replaced by ``lines``."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README has no {BEGIN} ... {END} block to fill")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write-readme", type=Path, help="fill the README's block with these lines")
    group.add_argument("--check-readme", type=Path, help="exit 1 when the README's block differs from these lines")
    args = parser.parse_args()
    lines = report(args.results)
    if not lines:
        raise SystemExit(f"no benchmark CSVs in {args.results}: run benchmarks/solve_reference_graphs.py first")
    print("\n".join(lines))
    if args.write_readme:
        args.write_readme.write_text(with_block(args.write_readme.read_text(), lines))
    elif args.check_readme:
        text = args.check_readme.read_text()
        if with_block(text, lines) != text:
            raise SystemExit(f"{args.check_readme}'s benchmark lines differ from {args.results}: "
                             f"run python benchmarks/report.py --write-readme {args.check_readme}")


if __name__ == "__main__":
    main()
