"""`{{ source|data_provenance }}`: a Source's provenance in words, from the one rule
(`datasets.provenance.source_provenance_label`), for the dataset page and the Create form."""

from __future__ import annotations

from django import template

from datasets.models import Source
from datasets.provenance import UNKNOWN, source_provenance_label

register = template.Library()


@register.filter
def data_provenance(source: Source | None) -> str:
    return UNKNOWN if source is None else source_provenance_label(source)
