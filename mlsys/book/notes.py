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


def write_flushed(data: dict[str, Any]) -> bool:
    """True when any timing in a record's raw ``data`` cleared the L2 by *writing* a buffer before each timed call.

    That was the course's flush until 2026-12-02 (``flush_mode`` ``"write"``, or a ``flush`` text saying
    "by writing"). It leaves dirty lines whose write-back lands in the next timed kernel, so a kernel whose
    data fit in the L2 reads slow. A CPU's record (its flush writes host memory) and the ``flush_bias``
    record itself (which times both flushes side by side, on purpose) are not write-flushed in this sense.
    """
    if data.get("experiment") == "flush_bias" or (data.get("device") or {}).get("kind", "cuda") != "cuda":
        return False

    def walk(x: Any) -> bool:
        if isinstance(x, dict):
            if x.get("flush_mode") == "write" or "by writing" in str(x.get("flush", "")):
                return True
            return any(walk(v) for v in x.values())
        return isinstance(x, list) and any(walk(v) for v in x)

    return walk(data)


def _bias(bias: dict[str, Any], key: str) -> float:
    """``write / read - 1`` of one kernel of a ``flush_bias`` record's raw data (a fraction)."""
    try:
        r = bias["results"][key]
        return r["write"]["value"] / r["read"]["value"] - 1
    except (KeyError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"expected a flush_bias record with results.{key}.write/read values; missing {e}") from None


def flush_note_text(bias: dict[str, Any], *records: dict[str, Any]) -> str:
    """The evidence-layer bullet for records timed with the write flush, as Markdown.

    ``bias`` is the raw data of a ``flush_bias`` record (the same calls timed after each flush); ``records``
    the raw data of the records the page shows. Raises ValueError if ``bias`` is no flush_bias record or if
    a record was not timed with the write flush (the note would be false for it).
    """
    if bias.get("experiment") != "flush_bias":
        raise ValueError(f"expected the flush_bias record as the first argument, got {bias.get('experiment')!r}")
    if not records:
        raise ValueError("flush_note: expected at least one record timed with the write flush")
    clean = [f"{r.get('experiment')} ({r.get('device', {}).get('name')})" for r in records if not write_flushed(r)]
    if clean:
        raise ValueError(f"flush_note: {', '.join(clean)} did not clear the L2 by writing; it needs no flush note")
    names = ", ".join(f"`{r['experiment']}` ({r['device']['name']})" for r in records)
    return (f"- **Timer bias**: {names} cleared the L2 before each timed call by *writing* a buffer, the course's "
            "method until 2026-12-02. The write-back of those dirty lines falls into the timed kernel, so kernels "
            f"whose data fit in the L2 read slow. Timed both ways, call by call, on an {bias['device']['name']} "
            f"({str(bias['date'])[:10]}): the decode GEMV took {_bias(bias, 'linear_t1'):.1%} longer after a "
            f"write-flush than after the read flush the course uses now, LayerNorm {_bias(bias, 'layer_norm'):.1%} "
            f"(`data/measurements/{bias['device']['slug']}/flush_bias.json`). These figures were not re-measured.")


def flush_note(bias: Any, *records: Any) -> Any:
    """:func:`flush_note_text` of ``mlsys.bench.records.Record`` objects, as Markdown to ``glue``."""
    from IPython.display import Markdown

    return Markdown(flush_note_text(bias.data, *(r.data for r in records)))


def measurement_notes(*records: Any, repeats: str | None = None) -> Any:
    """The notes of one or more records (``mlsys.bench.records.Record``) as Markdown to ``glue``."""
    from IPython.display import Markdown

    if not records:
        raise ValueError("measurement_notes: expected at least one record")
    return Markdown("\n".join(notes_text(r.data, repeats) for r in records))
