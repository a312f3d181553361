"""The switch decision's metadata as a person reads it: the plain answer first, the figure that decides
with its interval, what would change the answer and the forest plot right under it; then the criteria
as a Dagster table, one row per criterion, its figures rounded with their units, and no machine path (a
reason that names a file keeps only its name)."""

import json
import re
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import vl_convert as vlc

from strix_pipeline.analysis.charts import markdown_image
from strix_pipeline.analysis.charts.forest import criterion_rows, forest_spec
from strix_pipeline.analysis.decision import (
    Decision,
    Wording,
    change_needed,
    criterion_title,
    format_value,
    held_text,
    verdict_sentence,
)
from strix_pipeline.report.answer import deciding_criterion, deciding_text

# an absolute path in a reason (a model file, a log, a cache folder): the machine's, not the reader's
_PATH = re.compile(r"(?<![\w.:/])(?:~|/)(?:[\w.+@-]+/)+([\w.+@-]*)")

COLUMNS = (
    ("criterion", "C1-C5, what it asks (glossary: docs/glossary.md)"),
    ("required", "required on this host"),
    ("status", "pass / fail / unknown"),
    ("figure", "the candidate's figure, rounded, with its unit"),
    ("threshold", "what the figure is judged against"),
    ("interval", "95 % interval, where the figure has one"),
    ("held_since", "the date it first held, in the unbroken run that still holds it"),
    ("reason", "why, with the runs it rests on"),
)


def without_paths(text: str) -> str:
    """``/home/u/.cache/x/model.gguf`` -> ``…/model.gguf``: the file named, the machine's folders not."""
    return _PATH.sub(lambda m: f"…/{m.group(1)}" if m.group(1) else "…/", text)


def _figure(v: float | None, unit: str | None) -> str:
    return held_text(v) if unit == "bytes" else format_value(v, unit)


def criteria_table(d: Decision, w: Wording) -> dg.TableMetadataValue:
    rows = []
    for c in d.criteria:
        interval = (
            f"{_figure(c.ci_low, c.unit)} – {_figure(c.ci_high, c.unit)}"
            if c.ci_low is not None and c.ci_high is not None
            else "–"
        )
        rows.append(
            dg.TableRecord(
                {
                    "criterion": f"{c.criterion} {criterion_title(c.criterion, w)}",
                    "required": c.required,
                    "status": c.status,
                    "figure": _figure(c.value, c.unit),
                    "threshold": _figure(c.threshold, c.unit),
                    "interval": interval,
                    "held_since": f"{c.first_held_at:%Y-%m-%d}" if c.first_held_at else "–",
                    "reason": without_paths(c.reason),
                }
            )
        )
    schema = dg.TableSchema(
        [
            dg.TableColumn(name, "bool" if name == "required" else "string", description=text)
            for name, text in COLUMNS
        ]
    )
    return dg.MetadataValue.table(rows, schema=schema)


def answer_metadata(
    d: Decision, w: Wording, held: Mapping[str, float | None], out_dir: Path
) -> dict[str, dg.MetadataValue | str]:
    """The asset's first entries, in the order the UI lists them: the sentence (the plain answer), the
    deciding figure, what would change the answer and the forest plot (its PNG written in ``out_dir``)."""
    out: dict[str, dg.MetadataValue | str] = {"sentence": verdict_sentence(d, w)}
    c = deciding_criterion(d)
    if c is not None:
        out["deciding_figure"] = deciding_text(c, w)
    change = change_needed(d, w)
    if change:
        out["what_would_change"] = change[:1].upper() + change[1:] + "."
    spec = json.dumps(forest_spec(criterion_rows(d, held, w)))
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "forest.png"
    png.with_suffix(".vl.json").write_text(spec)
    png.write_bytes(vlc.vegalite_to_png(spec, scale=2))
    out["forest"] = dg.MetadataValue.md(markdown_image(png, max_width=700))
    return out
