"""Scrape a Prometheus endpoint over HTTP and read it with prometheus_client's own parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

# Sample name -> (labels, value) of each sample; every family name is a key, samples or not.
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str, bearer: str | None = None) -> tuple[str, Samples]:
    """The exposition text and every sample by name (histograms as _bucket/_sum/_count)."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    response = httpx.get(url, timeout=10, headers=headers)
    assert response.status_code == 200, response.text
    return response.text, parse(response.text)


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        # The parser names a counter family without its _total suffix.
        samples.setdefault(family.name + ("_total" if family.type == "counter" else ""), [])
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return samples


def value(samples: Samples, name: str, /, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
    return sum(v for got, v in samples.get(name, [])
               if all(got.get(k) == want for k, want in labels.items()))
