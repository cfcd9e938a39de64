"""The "Measurement notes" box: a figure's provenance, collapsed under it, out of the sentences.

A chapter glues the notes of the records behind a figure and shows them in a dropdown admonition::

    ```{code-cell} ipython3
    :tags: [remove-cell]
    from mlsys.book.notes import measurement_notes
    glue("ch4_div_notes", measurement_notes(div_rec, repeats="median of 20 timed runs after 3 warm-ups"))
    ```

    ````{admonition} Measurement notes
    :class: dropdown note

    ```{glue:md} ch4_div_notes
    :format: myst
    ```
    ````

(the outer fence has four backticks, so the inner directive nests). The notes name the
device, the date, the software, the statistics of the repeats and the one command that re-measures it.
"""

from __future__ import annotations

from typing import Any

#: software versions shown, in this order, when a record has them
_SOFTWARE = ("torch", "triton", "cuda", "driver", "python")


def notes_text(data: dict[str, Any], repeats: str | None = None) -> str:
    """The notes of one experiment record's raw ``data`` (as stored in its JSON) as Markdown bullets.

    ``repeats`` says how the figure summarises its runs (e.g. "median of 20 runs"); without it the line
    is left out. Raises ValueError when ``data`` lacks the experiment, the device's name or the date.
    """
    try:
        name, device, date = data["experiment"], data["device"]["name"], str(data["date"])[:10]
    except (KeyError, TypeError) as e:
        raise ValueError(f"expected an experiment record with 'experiment', 'device.name' and 'date'; missing {e}") \
            from None
    soft = data.get("software") or {}
    versions = ", ".join(f"{k} {soft[k]}" for k in _SOFTWARE if k in soft)
    lines = [f"- **Device**: {device}, recorded {date}."]
    if versions:
        lines.append(f"- **Software**: {versions}.")
    if repeats:
        lines.append(f"- **Repeats**: {repeats}.")
    lines.append(f"- **Re-measure** on a GPU: `python -m mlsys.bench run {name}` "
                 f"(or `mlsys.bench.run(\"{name}\")` in Python).")
    lines.append(f"- **Record**: `data/measurements/{data['device'].get('slug', '<device>')}/{name}.json`.")
    return "\n".join(lines)


def measurement_notes(*records: Any, repeats: str | None = None) -> Any:
    """The notes of one or more records (``mlsys.bench.records.Record``) as Markdown to ``glue``."""
    from IPython.display import Markdown

    if not records:
        raise ValueError("measurement_notes: expected at least one record")
    return Markdown("\n".join(notes_text(r.data, repeats) for r in records))
