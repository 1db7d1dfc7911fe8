"""``stereolens annotation ...``: tasks, judgements, agreement and review from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stereolens.annotation.scales import BUILTIN_SCALES, STUDY_SCALES

def register(subparsers: argparse._SubParsersAction) -> None:
    annotation = subparsers.add_parser("annotation", help="annotation tasks, judgements, agreement")
    sub = annotation.add_subparsers(dest="annotation_command", metavar="ACTION")
    sub.required = True

    agree = sub.add_parser("agreement", help="inter-annotator agreement of long-format judgements, as JSON")
    agree.add_argument("--input", required=True, help="CSV with item_id, annotator_id, label")
    agree.add_argument("--metric", required=True, choices=["fleiss", "krippendorff", "cohen", "raw"])
    agree.add_argument("--level", default="nominal", choices=["nominal", "ordinal", "interval"])
    agree.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of items (0: no CI)")
    agree.add_argument("--confidence", type=float, default=0.95)
    agree.add_argument("--ci-method", default="percentile", choices=["percentile", "BCa"])
    agree.add_argument("--seed", type=int, default=0)
    agree.add_argument("--scale", default=None,
                       help="builtin scale (e.g. likert5): the full ordinal domain for cohen's weights, unused categories included")
    agree.set_defaults(func=_agreement)

    export = sub.add_parser("export", help="write annotation tasks as CSV and Label Studio JSON")
    export.add_argument("--items", required=True, help="CSV with item_id, text")
    export.add_argument("--scale", default="likert5", help="yes_no | likert5 | slider_-50_50")
    export.add_argument("--instructions", required=True, help="instruction text, or @FILE to read it")
    export.add_argument("--output", required=True, help="directory for the task files")
    export.add_argument("--name", default="tasks")
    export.set_defaults(func=_export)

    imp = sub.add_parser("import", help="validate completed judgements (long CSV, or a Label Studio JSON, "
                                         "JSON-MIN or CSV export)")
    imp.add_argument("--input", required=True, help="long-format CSV or Label Studio export (format detected)")
    scale_names = [*BUILTIN_SCALES, *STUDY_SCALES]
    imp.add_argument("--scale", default="likert5", choices=scale_names,
                     help="answer scale: " + ", ".join(scale_names) + " (default: likert5)")
    imp.add_argument("--items", help="CSV with item_id: judgements on other ids are refused")
    imp.add_argument("--annotator-map", help="Label Studio users credited to the team's ids: CSV label_studio_user,"
                                             "annotator_id, or Label Studio's user list (GET /api/users) as JSON "
                                             "(ids become emails)")
    imp.add_argument("--output", required=True, help="validated long-format CSV")
    imp.set_defaults(func=_import)

    sim = sub.add_parser("simulate", help="seeded simulated judgements (source=simulated)")
    sim.add_argument("--items", required=True, help="CSV with item_id [, truth]")
    sim.add_argument("--scale", default="likert5")
    sim.add_argument("--annotators", type=int, default=5)
    sim.add_argument("--reliability", type=float, default=0.8)
    sim.add_argument("--bias", type=float, default=0.0)
    sim.add_argument("--per-item", type=int, default=None)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--output", required=True)
    sim.set_defaults(func=_simulate)

    review = sub.add_parser("review", help="QC, agreement, per-item aggregation and the annotation gate")
    review.add_argument("--input", required=True, help="long-format judgements CSV")
    review.add_argument("--config", required=True, help="annotation config YAML (conf/annotation/<source>.yaml)")
    review.add_argument("--study", required=True, help="study name for the gate message and report")
    review.add_argument("--output", required=True, help="directory for QC tables, aggregated items, agreement.json")
    review.add_argument("--items", help="CSV with item_id [, gold]: unknown ids refused, gold rows are attention checks")
    review.add_argument("--report-dir", default=None,
                        help="where the gate report goes (default: OUTPUT/quality; only a DVC stage writes reports/)")
    review.add_argument("--seed", type=int, default=0)
    review.set_defaults(func=_review)


def _agreement(args: argparse.Namespace) -> int:
    from stereolens.annotation.agreement import compute
    from stereolens.annotation.scales import scale_from_config
    from stereolens.annotation.tasks import validate_judgements
    from stereolens.cli_support import check_count
    from stereolens.errors import DataError
    from stereolens.io import read_csv_checked
    from stereolens.tables import judgements_schema, validate_table

    check_count(args.resamples, "--resamples", minimum=0)

    # the same checks as `annotation import`: ids present, one label per (item, annotator), labels on the scale
    df = read_csv_checked(args.input, ["item_id", "annotator_id", "label"], what="judgements",
                          dtype={"item_id": str, "annotator_id": str}, allow_empty=False)
    where = f"judgements {args.input}"
    df = validate_table(df, judgements_schema(), where)
    scale = scale_from_config(args.scale) if args.scale else None
    if scale is not None:
        df = validate_judgements(df, scale, where=where)
    annotators = df["annotator_id"].astype(str).str.strip().unique()
    if len(annotators) < 2:
        raise DataError(f"{where}: agreement needs at least two annotators, found {len(annotators)} "
                        f"({', '.join(annotators)})")
    extra = {}
    if scale is not None and args.metric == "cohen":
        extra["scale"] = scale
    res = compute(df, args.metric, args.level, n_boot=args.resamples, confidence=args.confidence,
                  seed=args.seed, ci_method=args.ci_method, **extra)
    out = {"metric": args.metric, "variant": res.metric, "level": args.level, "value": res.value, "ci_low": res.ci_low,
           "ci_high": res.ci_high, "n": res.n, "n_annotators": res.n_annotators,
           "confidence": res.confidence, "ci_method": res.ci_method, "n_boot": res.n_boot}
    print(json.dumps(_finite(out)))
    return 0


def _finite(obj):
    # strict JSON: an undefined statistic (NaN) is null
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def _review(args: argparse.Namespace) -> int:
    import yaml

    from stereolens.annotation.config import AnnotationConfig
    from stereolens.annotation.round import gate_round, review_round
    from stereolens.annotation.tasks import import_judgements
    from stereolens.errors import ConfigError
    from stereolens.io import read_csv_checked

    try:
        raw = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read annotation config {args.config}: {exc}") from exc
    cfg = AnnotationConfig.from_config(raw.get("annotation", raw) if isinstance(raw, dict) else {})
    items = None
    if args.items:
        items = read_csv_checked(args.items, ["item_id"], what="items", dtype={"item_id": str})
    judgements = import_judgements(args.input, cfg.scale, known_items=None if items is None else items["item_id"],
                                   source=cfg.source)
    review = review_round(judgements, cfg, study=args.study, artefact=args.input, items=items, gate=False, seed=args.seed)
    review.write(args.output)
    print(json.dumps(_finite({"source": review.source, **review.metrics()})))
    # outputs are on disk for inspection before the gate decides the exit status
    gate_round(review, cfg, study=args.study, artefact=args.input, report_dir=args.report_dir or Path(args.output) / "quality")
    return 0


def _export(args: argparse.Namespace) -> int:
    from stereolens.annotation.scales import scale_from_config
    from stereolens.annotation.tasks import export_tasks
    from stereolens.io import read_csv_checked

    items = read_csv_checked(args.items, ["item_id", "text"], what="items", dtype={"item_id": str})
    text = args.instructions
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8").strip()
    paths = export_tasks(items, scale_from_config(args.scale), text, args.output, name=args.name)
    for p in paths.values():
        print(f"wrote {p}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from stereolens.annotation.label_studio import read_annotator_map
    from stereolens.annotation.scales import scale_by_name
    from stereolens.annotation.tasks import import_judgements
    from stereolens.io import read_csv_checked, write_csv

    scale = scale_by_name(args.scale)
    known = None
    if args.items:
        known = read_csv_checked(args.items, ["item_id"], what="items", dtype={"item_id": str})["item_id"]
    users = read_annotator_map(args.annotator_map) if args.annotator_map else None
    df = import_judgements(args.input, scale, known_items=known, annotator_map=users)
    write_csv(args.output, df)
    print(f"wrote {args.output}: {len(df)} judgements, {df['item_id'].nunique()} items, "
          f"{df['annotator_id'].nunique()} annotators")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from stereolens.annotation.scales import scale_from_config
    from stereolens.annotation.simulate import simulate_annotations
    from stereolens.io import read_csv_checked, write_csv

    items = read_csv_checked(args.items, ["item_id"], what="items", dtype={"item_id": str})
    df = simulate_annotations(items, args.annotators, scale_from_config(args.scale), args.reliability,
                              args.bias, args.seed, per_item=args.per_item)
    write_csv(args.output, df)
    print(f"wrote {args.output}: {len(df)} simulated judgements (source=simulated)")
    return 0
