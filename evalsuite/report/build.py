"""`build_report(store, out)`: the results store -> one self-contained `out/index.html`.

Everything the page shows is in the file: plots are inline SVG, thumbnails are data: URIs, the CSS and
the small sorting/paging/filtering script are inlined. Sections: a headline (base vs the last iteration,
which changes are significant), the summary table (report/summary.py), metrics across iterations, per-object hallucination
(report/objects.py), CSR
pairs and DPO training curves (report/csr.py), relevance densities, the caption browser
(report/samples.py), the question browser for POPE/MME (report/qa.py), provenance. Judged results carry
their judge everywhere (store/compare.py `with_judges`: summary tags, "judge differs" cells, the judge
replies in the browser). Every string from the store (answers, prompts, paths, configs, judge names and
replies) goes through Jinja's autoescape; the script only moves and hides existing elements.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import logging
import math
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

CSR_TASK = "csr_pairs"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _num(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _ckpt_list(ckpts) -> list[dict]:
    return [{"ckpt_id": r.ckpt_id, "name": r.name, "iteration": None if _num(r.iteration) is None
             else int(r.iteration), "method": r.method if isinstance(r.method, str) else None,
             "lineage": r.lineage} for r in ckpts.itertuples()]


def density_source() -> tuple[str, str] | None:
    """(task, per-sample field) the density figure draws: the first own task declaring `density`
    (evalsuite/tasks/registry.py), e.g. relevance's per-caption score."""
    from evalsuite.tasks.registry import TASKS, task_class

    for name in TASKS:
        field = getattr(task_class(name), "density", None)
        if field:
            return name, field
    return None


def relevance_density(samples, eval_tidy, ckpts: list[dict]) -> str | None:
    """Per-sample scores of the declared density task of each checkpoint (and setup, when there are
    several), base first, as KDE curves; the samples are those of the run the summary shows."""
    from evalsuite.report.plots import density_plot

    source = density_source()
    if source is None:
        return None
    task, field = source
    if samples.empty or field not in samples.columns:
        return None
    rel = samples[samples["task"] == task]
    shown = eval_tidy[eval_tidy["task"] == task].drop_duplicates(["ckpt_id", "eval_key"])
    names = {c["ckpt_id"]: c["name"] for c in ckpts}
    sets = {}
    for r in shown.itertuples():
        g = rel[rel["run_id"] == r.run_id]
        if len(g) and r.ckpt_id in names:
            name = f"{names[r.ckpt_id]} [{r.setup}]" if r.setup else names[r.ckpt_id]
            sets[name] = [v for v in g[field].map(_num) if v is not None]
    if not sets:
        return None
    return density_plot(f"per-caption {field}: base vs iterations", sets)


def provenance(metas: list[dict], keep: set[str]) -> list[dict]:
    out = []
    for i, m in enumerate(metas, start=1):
        if m["run_id"] not in keep:
            continue
        tasks = m.get("tasks") or {}
        out.append({"version": i, "meta": {k: m.get(k) for k in (
            "run_id", "written_at", "created_at", "label", "ckpt", "ckpt_hash", "iteration", "method",
            "parent", "code_version", "lmms_eval_version", "config_hash", "samples_file")},
            "tasks": ", ".join(f"{t} v{d.get('version')}" for t, d in tasks.items()),
            "config": json.dumps(m.get("config") or {}, indent=2, sort_keys=True, default=str),
            "task_configs": json.dumps({t: {"config": d.get("config"), "extra": d.get("extra"),
                                            "eval_key": d.get("eval_key"), "identity": d.get("identity")}
                                        for t, d in tasks.items()}, indent=2, sort_keys=True, default=str)})
    return out


def _environment():
    import jinja2

    from evalsuite.store.table import fmt

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.finalize = _shown
    return env


def _shown(value):
    """Every `{{ ... }}` of the page passes here before autoescape: a user or model text's bidi and
    zero-width controls are written out visibly and a text that could reorder its neighbours is isolated
    (evalsuite/bidi.py); markup the page builds itself (inline SVG plots, whose labels are checkpoint
    names) gets the visible form only."""
    import markupsafe

    from evalsuite.bidi import isolated, visible

    if isinstance(value, markupsafe.Markup):
        shown = visible(str(value))
        return value if shown == value else markupsafe.Markup(shown)
    return isolated(value) if isinstance(value, str) else value


def build_report(store, out: str | Path, *, as_of=None, runs=None, base: str | None = None,
                 max_images: int = 120, page_size: int = 8, image_roots: list[str | Path] = (),
                 title: str | None = None, max_questions: int = 400, n_boot: int = 1000, seed: int = 0,
                 ckpts: list[str] = (), max_ckpts: int = 6) -> Path:
    """Write `out/index.html` for the runs selected from `store` (a `Store`, or a `Snapshot` of one:
    the store is read once either way); returns its path. `n_boot`/`seed` size and seed the bootstraps
    (`store.compare`: the same numbers `evalsuite table` prints with the same options). The browsers show
    at most `max_ckpts` checkpoints, those named in `ckpts` first (report/shown.py)."""
    from evalsuite.files import write_text_atomic
    from evalsuite.store.compare import compare

    snap = store.snapshot() if hasattr(store, "snapshot") else store
    notes: list[str] = []     # what the page could not show (damaged sample files, bad images)
    picked: dict = {}

    def browser_runs(table) -> set[str]:
        """The runs whose records the page shows whole: the browsed checkpoints' and the training ones."""
        picked.update(_browser_ckpts(table, base, ckpts, max_ckpts))
        ids = {c["ckpt_id"] for c in picked["shown"]}
        t = table.tidy
        return set(t.loc[t["ckpt_id"].isin(ids) | t["task"].isin([CSR_TASK, "csr_train"]), "run_id"])

    from evalsuite.store.objects import HALLUCINATED, MENTIONS

    # the per-object section compares every checkpoint of a lineage, browsed or not: their objects are read too
    table = compare(snap, base, n_boot, seed, as_of=as_of, runs=runs, problems=notes, also_read=browser_runs,
                    fields=(MENTIONS, HALLUCINATED))
    tidy, records, records_of = table.tidy, table.records, table.records_of
    keep = set(table.ckpt_of_run)
    metas = snap.run_meta()
    meta_of = {m["run_id"]: m for m in metas}
    ctx = _sections(tidy, table, records, records_of, meta_of, metas, keep, notes, base=base,
                    image_roots=image_roots, max_images=max_images, max_questions=max_questions, picked=picked,
                    n_boot=n_boot, seed=seed)
    from evalsuite.report.objects import object_sections

    ctx["objects"] = object_sections(table, records_of, base=base, n_boot=n_boot, seed=seed)
    featured = {c["ckpt_id"] for c in _featured(_ckpt_list(table.ckpts), picked)}
    shown_runs = {r for r in keep if table.ckpt_of_run.get(r) in featured}
    ctx.update(page_size=page_size, provenance=provenance(metas, shown_runs), runs_left_out=len(keep - shown_runs),
               title=title or f"evalsuite report: {snap.path}", store=str(snap.path),
               generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               n_runs=len(keep), n_samples=len(records), selector=_selector(as_of, runs, base), notes=notes,
               n_boot=n_boot, seed=seed)
    # the page's only script, allowed by its hash: injected inline code or handlers would not run
    script = (TEMPLATES / "report.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    ctx.update(script=script, script_hash=f"sha256-{digest}")
    html = _environment().get_template("report.html.j2").render(**ctx)
    path = Path(out) / "index.html"
    try:
        write_text_atomic(path, html)
    except OSError as e:
        raise UserError(f"{path}: cannot write the report ({e.strerror or e})") from None
    log.info("report: %s (%.1f kB, %d runs, %d sample groups shown of %d, %d questions of %d)", path,
             len(html) / 1024, len(keep), len(ctx["view"]["rows"]), ctx["view"]["total"], len(ctx["qa"]["rows"]),
             ctx["qa"]["total"])
    return path


def _browser_ckpts(table, base, named: list[str], max_ckpts: int) -> dict:
    """{shown, left_out}: the evaluated checkpoints the browsers show (report/shown.py)."""
    from evalsuite.report.shown import pick, resolve
    from evalsuite.store.table import bases

    tidy = table.tidy
    evaluated = _present(_ckpt_list(table.ckpts), tidy[~tidy["task"].isin([CSR_TASK, "csr_train"])])
    named = resolve(table.ckpts, list(named), max_ckpts)
    shown, left = pick(evaluated, bases(table.ckpts, base), named, max_ckpts)
    return {"shown": shown, "left_out": left, "max": max_ckpts, "named": named}


def _sections(tidy, table, records, records_of, meta_of, metas, keep, notes, *, base, image_roots,
              max_images, max_questions, picked, n_boot=1000, seed=0) -> dict:
    """The template context of every section but the header and provenance."""
    from evalsuite.report import csr
    from evalsuite.report import summary as summ
    from evalsuite.report.qa import build_qa
    from evalsuite.report.samples import build_view, thumbnail
    from evalsuite.report.shown import left_out_text
    from evalsuite.store.store import samples_frame
    from evalsuite.store.table import lead_metrics

    all_ckpts = _ckpt_list(table.ckpts)
    train_tasks = tidy["task"].isin([csr.CSR_TASK, csr.TRAIN_TASK])
    eval_tidy, csr_tidy = tidy[~train_tasks], tidy[tidy["task"] == csr.CSR_TASK]
    ctx: dict = {"summary": [], "plots": [], "ckpts": [], "bases": [], "explicit_base": base is not None,
                 "headline": None, "plotted": 0}
    if not eval_tidy.empty:
        ckpts = _present(all_ckpts, eval_tidy)
        lead = set(lead_metrics(eval_tidy))      # the summary leads with them, as `evalsuite table` shows them
        rows = sorted(summ.summary(eval_tidy, ckpts), key=lambda r: r["key"] not in lead)
        plotted = _featured(ckpts, picked)
        ids = {c["ckpt_id"] for c in plotted}
        ctx.update(ckpts=ckpts, summary=rows, plotted=len(plotted),
                   plots=summ.iteration_plots(eval_tidy[eval_tidy["ckpt_id"].isin(ids)], rows, plotted),
                   headline=summ.headline(rows, ckpts), bases=list(dict.fromkeys(eval_tidy["base"].dropna())))
    # the browsers' and densities' records: those of the checkpoints they show, and the training pairs
    shown = picked.get("shown", ctx["ckpts"])
    shown_ids = {c["ckpt_id"] for c in shown}
    of_run = table.ckpt_of_run
    samples = samples_frame([r for r in records if r["task"] == csr.CSR_TASK or of_run.get(r["run_id"]) in shown_ids])
    samples["ckpt_id"] = samples["run_id"].map(of_run)
    key_of = dict(zip(zip(tidy["run_id"], tidy["task"]), tidy["eval_key"]))
    samples["eval_key"] = [key_of.get(rt) for rt in zip(samples["run_id"], samples["task"])]

    roots = [Path(r) for r in image_roots] + _data_roots(metas, keep)
    cache: dict = {}
    csr_ckpts = _present(all_ckpts, csr_tidy)
    ctx["csr"] = csr.csr_section(csr_tidy, csr_ckpts, samples[samples["task"] == csr.CSR_TASK], meta_of,
                                 thumb=lambda p: thumbnail(p, roots, cache, notes),
                                 browse=_pick_like(csr_ckpts, table, base, picked), n_boot=n_boot, seed=seed)
    train_tidy = tidy[tidy["task"] == csr.TRAIN_TASK]
    ctx["training"] = csr.training_section(train_tidy, _present(all_ckpts, train_tidy), records)
    ctx["relevance_density"] = relevance_density(samples, eval_tidy, shown)
    judges = dict(zip(tidy["eval_key"], tidy["judge"])) if "judge" in tidy.columns else {}
    view = build_view(samples, of_run, shown, max_images, roots, notes, judges=judges)
    qa = build_qa(records_of, eval_tidy[eval_tidy["ckpt_id"].isin(shown_ids)], shown, max_questions)
    ctx["browsed"] = {"shown": [c["name"] for c in shown], "total": len(ctx["ckpts"]),
                      "left_out": left_out_text(picked.get("left_out", [])), "max": picked.get("max")}
    ctx.update(view=view, qa=qa, arrows=summ.ARROW, dir_text=summ.DIR_TEXT)
    return ctx


def _featured(ckpts: list[dict], picked: dict) -> list[dict]:
    """The checkpoints the plots and provenance show: all, or when the browsers leave some out, the
    lineages of the browsed ones (a lineage's curve stays whole; hundreds of lineages would not fit)."""
    if not picked.get("left_out"):
        return ckpts
    lineages = {c.get("lineage") for c in picked["shown"]}
    return [c for c in ckpts if c.get("lineage") in lineages]


def _pick_like(ckpts: list[dict], table, base, picked: dict) -> list[dict]:
    """The generating checkpoints whose pairs the CSR section browses, by the browsers' rule."""
    from evalsuite.report.shown import pick
    from evalsuite.store.table import bases

    return pick(ckpts, bases(table.ckpts, base), picked.get("named", []), picked.get("max") or len(ckpts))[0]


def _data_roots(metas: list[dict], keep: set[str]) -> list[Path]:
    """Folders relative sample images are resolved against: each shown run's data root (a CSR pairs
    run written before it recorded one: its config's image_root)."""
    out = []
    for m in metas:
        if m["run_id"] not in keep:
            continue
        root = m.get("data_root") or ((m.get("config") or {}).get("image_root") if CSR_TASK in (m.get("tasks") or {})
                                      else None)
        if isinstance(root, str) and root and Path(root) not in out:
            out.append(Path(root))
    return out


def _present(ckpts: list[dict], tidy) -> list[dict]:
    have = set(tidy["ckpt_id"])
    return [c for c in ckpts if c["ckpt_id"] in have]


def _selector(as_of, runs, base=None) -> str:
    parts = ([f"as of store version {as_of}"] if as_of is not None else []) + \
            ([f"runs {', '.join(runs)}"] if runs else []) + ([f"base {base}"] if base else [])
    return "; ".join(parts) or "latest store version, all runs"
