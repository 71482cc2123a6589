"""`pacs status` on a terminal: the status dict (pacs.status.experiment) as short tables, each line cut to the
terminal's width, states in colour where the output is a terminal that takes it (not under ``NO_COLOR``)."""

import os
import shutil
import sys
import time

COLOURS = {"done": "32", "running": "33", "sampling": "33", "preflight": "33", "stopped": "36", "failed": "31",
           "waiting": "2"}  # fmt: skip
BARS = "▁▂▃▄▅▆▇█"


def use_colour(stream=sys.stdout) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def paint(text: str, state: str, colour: bool) -> str:
    code = COLOURS.get(state)
    return f"\033[{code}m{text}\033[0m" if colour and code else text


def spark(values: list[float]) -> str:
    """A trend as one character a value."""
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low or 1.0
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))] for v in values)


def hours(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def when(eta: float | None, now: float) -> str:
    if eta is None:
        return "-"
    left = max(0.0, eta - now)
    if left >= 86400:
        span = f"{left / 86400:.1f} d"
    else:
        span = f"{left / 3600:.1f} h" if left >= 3600 else f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"
    return f"{time.strftime('%m-%d %H:%M', time.localtime(eta))} (in {span})"


def table(rows: list[list[str]], states: list[str], colour: bool, width: int) -> list[str]:
    """Columns padded to their widest cell; the second cell of each row (its state) coloured; lines cut to
    ``width``."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row, state in zip(rows, states, strict=True):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        line = "  ".join(cells).rstrip()[:width]
        if state and len(line) > len("  ".join(cells[:1])) + 2:
            start = len(cells[0]) + 2
            line = line[:start] + paint(cells[1], state, colour) + line[start + len(cells[1]) :]
        lines.append(line)
    return lines


def ends(status: dict) -> str:
    totals, counts = status["totals"], status["totals"]["states"]
    if all(set(group) <= {"done"} for group in counts.values()) and totals["report"]:
        return "all done"
    if totals["eta"] is None:
        return "all ends: unknown (a failure, or no pace yet)"
    return f"all ends {when(totals['eta'], status['time'])} (est.: jobs started when ready, queue waits not counted)"


def render(status: dict, colour: bool = False, width: int | None = None) -> str:
    width = width or shutil.get_terminal_size((120, 40)).columns
    now = status["time"]
    totals = status["totals"]
    slurm = "SLURM answered" if status["slurm"] else "SLURM not asked or no answer"
    wandb = status["wandb"]
    out = [f"pacs status: {status['experiment']} ({status['results']}) at "
           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))} · {slurm} · wandb {wandb['mode']} "
           f"({wandb['why']})"]  # fmt: skip
    rows = [["training run", "state", "step", "s/step (plan)", "hours", "GPU-h (plan)", "ends (est.)", "reward",
             "held-out"]]  # fmt: skip
    states = [""]
    notes: dict[int, list[str]] = {}
    for run in status["runs"]:
        rows.append([
            f"{run['model']}/{run['method']}", run["state"], f"{run['step']}/{run['total_steps']}",
            f"{seconds(run['step_s'])} ({seconds(run['plan_step_s'])})", hours(run["hours"]),
            f"{hours(run['gpu_hours'])} ({hours(run['plan_gpu_hours'])})", when(run["eta"], now),
            spark([r[1] for r in run["reward"]]),
            " ".join(f"{a:.2f}" for _, a in run["heldout"][-4:]),
        ])  # fmt: skip
        states.append(run["state"])
        said = []
        if run["reason"]:
            said.append(run["reason"])
        if run["checkpoint"] is not None and run["state"] != "done":
            said.append(f"last checkpoint: step {run['checkpoint']}")
        if run["slurm"]:
            said.append(f"SLURM job {run['slurm']['job']}: {run['slurm']['state'] or 'not listed'}")
        if run["blocked_by"]:
            said.append(f"waits on failed {', '.join(run['blocked_by'])}")
        notes[len(rows) - 1] = [" · ".join(said)] if said else []
        notes[len(rows) - 1] += [f"| {line}" for line in run["log_tail"]]
    lines = table(rows, states, colour, width)
    for i, line in enumerate(lines):
        out.append(line)
        out.extend(f"    {note}"[:width] for note in notes.get(i, []))
    if status["preflights"]:
        out.append("")
        rows, states = [["preflight", "state", "GPU-h (plan)", "for"]], [""]
        for p in status["preflights"]:
            spent = f"{hours(p['gpu_hours'])} ({hours(p['plan_gpu_hours'])})"
            runs = ", ".join(r.split("/", 1)[1] for r in p["runs"])
            rows.append([p["name"].split("/", 1)[1], p["state"], spent, runs])
            states.append(p["state"])
        out.extend(table(rows, states, colour, width))
    counts = totals["states"]["evaluations"]
    out.append("")
    out.append("evaluations: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    shown = [e for e in status["evaluations"] if e["state"] not in ("done", "waiting") or e["blocked_by"]]
    if shown:
        rows, states = [["evaluation", "state", "problems sampled", "GPU-h (plan)"]], [""]
        for e in shown:
            sampled = ", ".join(f"{b['benchmark']} {b['sampled'] if b['sampled'] is not None else '?'}/"
                                f"{b['problems'] or '?'}" for b in e["benchmarks"])  # fmt: skip
            rows.append([e["name"].split("/", 1)[1], e["state"], sampled,
                         f"{hours(e['gpu_hours'])} ({hours(e['plan_gpu_hours'])})"])  # fmt: skip
            states.append(e["state"])
        out.extend(table(rows, states, colour, width))
    out.append("")
    unpriced = f" ({totals['unpriced_jobs']} jobs unpriced)" if totals["unpriced_jobs"] else ""
    out.append(f"experiment: {hours(totals['gpu_hours'])} GPU-hours of {hours(totals['plan_gpu_hours'])} planned"
               f"{unpriced} · "
               f"disk {totals['disk_bytes'] / 1e9:.3g} GB of {totals['plan_disk_bytes'] / 1e9:.3g} GB planned · "
               f"{ends(status)}"
               f"{' · REPORT.md written' if totals['report'] else ''}")  # fmt: skip
    for failed in status["failed"]:
        waiting = status["blocked"].get(failed["name"], [])
        out.append(paint(f"failed: {failed['name']}", "failed", colour) + (f" ({failed['message']})"
                   if failed["message"] else "") + f" · log: {failed['log']}")  # fmt: skip
        out.extend(f"    | {line}"[:width] for line in failed["log_tail"])
        if waiting:
            out.append(f"    waits on it: {', '.join(waiting)}"[:width])
    if wandb["sync"]:
        out.append(f"wandb: {wandb['offline_runs']} offline run(s); upload: {wandb['sync']}")
    return "\n".join(out)
