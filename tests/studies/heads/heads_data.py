"""Test data of the heads study: a small instances table and the planted head's position."""

from __future__ import annotations

import itertools

import pandas as pd

SUBJECTS = ["people", "women", "men", "doctors", "teachers", "farmers", "engineers", "nurses", "students", "artists"]
TRAITS = ["kind", "rich", "poor", "honest", "strong", "warm", "cold", "friendly", "boring", "brave"]
PLANTED = (1, 0)  # (layer, head) that alone carries the label to the first token


def make_instances(n_per_country: int = 24, countries=("MX", "ES")) -> pd.DataFrame:
    rows = []
    pairs = itertools.cycle(itertools.product(SUBJECTS, zip(TRAITS, TRAITS[1:] + TRAITS[:1])))
    for country in countries:
        for i in range(n_per_country):
            subject, (t1, t2) = next(pairs)
            rows.append({
                "id": f"{country}-{i:03d}", "country": country, "category": "profession", "target": subject,
                "stereotype_id": f"{country}-s{i % 4}", "context": f"The {subject} were {t1} and {t2}.",
                "sent_stereo": f"{subject.capitalize()} are lazy.", "sent_anti": f"{subject.capitalize()} are smart.",
                "sent_unrelated": f"{subject.capitalize()} are cold.", "source": "test",
            })
    return pd.DataFrame(rows)


