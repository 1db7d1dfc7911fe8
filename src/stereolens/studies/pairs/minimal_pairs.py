"""Minimal pairs (AmchiBias section 3.5): contrast groups, the occupation-coupling rewrite, the
token-diff check that only identity-marking tokens change, and the control pairing rule."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked

from stereolens.studies.pairs.config import GROUP_CLASSES
from stereolens.studies.pairs.filters import WORD_CHAR

_TOKEN = re.compile(rf"{WORD_CHAR}+(?:[-'’]{WORD_CHAR}+)*|[^\w\s]", re.U)


def tokens(text: str) -> list[str]:
    """Words (combining marks included, so Devanagari words stay whole) and punctuation marks."""
    return _TOKEN.findall(text or "")


ROLES = ("singular", "plural", "modifier")
FORM_COLUMNS = ("group", "language", "form", "roles", "variant")


@dataclass(frozen=True)
class Form:
    """One surface form of a group in one language and the grammatical roles it can fill.

    ``variant`` pairs forms across groups: "Goan youth" (variant ``goan``) is replaced by the
    contrast's ``goan`` form ("Goan elders"); the empty variant is the group's default form."""

    text: str
    language: str
    roles: tuple[str, ...]
    variant: str = ""


@dataclass(frozen=True)
class Group:
    dimension: str
    name: str
    forms: tuple[Form, ...] = ()

    def surface(self, language: str = "en") -> tuple[str, ...]:
        texts = {f.text for f in self.forms if f.language == language}
        return tuple(sorted(texts, key=lambda t: (-len(t), t)))  # longest first: "Goan youth" before "youth"

    def first_form(self, language: str) -> str | None:
        """The table's first form in ``language`` (the term fragmentation is measured on)."""
        return next((f.text for f in self.forms if f.language == language), None)

    def roles_of(self, text: str, language: str = "en") -> list[Form]:
        return [f for f in self.forms if f.language == language and f.text.casefold() == text.casefold()]

    def form_for(self, role: str, variant: str, language: str = "en") -> str | None:
        """The first form filling ``role`` in ``variant``, else in the default variant, else in any
        variant (table order); None when the group has no form in that role."""
        fitting = [f for f in self.forms if f.language == language and role in f.roles]
        for wanted in (variant, ""):
            for f in fitting:
                if f.variant == wanted:
                    return f.text
        return fitting[0].text if fitting else None


def read_group_forms(path) -> pd.DataFrame:
    """The surface-forms table (``group, language, form, roles, variant``; roles ``;``-separated
    from :data:`ROLES`).  Errors name the file, line and column."""
    table = read_csv_checked(path, list(FORM_COLUMNS), what="group surface forms", dtype=str, keep_default_na=False)
    for i, row in enumerate(table.to_dict("records")):
        roles = [r.strip() for r in row["roles"].split(";") if r.strip()]
        unknown = [r for r in roles if r not in ROLES]
        if not roles or unknown:
            raise DataError(f"{path} line {i + 2}, column roles: {row['roles']!r} is not a ';'-list of "
                            f"{', '.join(ROLES)}")
        if not row["form"].strip():
            raise DataError(f"{path} line {i + 2}, column form: empty form")
    return table


SUFFIX_KINDS = ("oblique", "case")


@dataclass(frozen=True)
class CaseSuffixes:
    """The endings a listed form of one language may carry in a sentence (``case_suffixes.csv``).

    A Konkani noun takes its case as a suffix, often on an oblique stem: "रेंदेर" (toddy tappers) is
    "रेंदेराचे" in the genitive (oblique ``ा`` + ``चे``), "गोंयकार" (Goans) "गोंयकारांक" in the dative
    (oblique plural ``ां`` + ``क``); AmchiBias Table 9 writes both."""

    oblique: tuple[str, ...]
    case: tuple[str, ...]

    def endings(self) -> dict[str, str]:
        """Every ending (a case suffix, an oblique marker, or an oblique marker and a case suffix) ->
        the case suffix in it ("" for an oblique marker alone)."""
        out: dict[str, str] = {}
        for oblique in ("", *self.oblique):
            for case in ("", *self.case):
                if oblique + case:
                    out.setdefault(oblique + case, case)
        return out


def read_case_suffixes(path: str | os.PathLike) -> dict[str, CaseSuffixes]:
    """``case_suffixes.csv`` (``language, kind, suffix, case, attested, source``; kind one of
    :data:`SUFFIX_KINDS`, one suffix a row, no spaces) -> language -> its suffixes.  Errors name the file,
    line and column."""
    import pandera.pandas as pa

    from stereolens.tables import choice_column, read_table, text_column

    one_word = pa.Check(lambda s: ~s.astype(str).str.contains(r"\s"), error="a suffix is one word, no spaces")
    schema = pa.DataFrameSchema({"language": text_column(what="language"), "kind": choice_column(SUFFIX_KINDS,
                                                                                                 what="kind"),
                                 "suffix": pa.Column(None, checks=[*text_column(what="suffix").checks, one_word],
                                                     nullable=True),
                                 "case": text_column(what="case (what the suffix marks)"),
                                 "source": text_column(what="source")},
                                unique=["language", "kind", "suffix"], name="case suffixes")
    table = read_table(path, schema, what="case suffixes")
    return {str(language): CaseSuffixes(*(tuple(part.loc[part["kind"] == kind, "suffix"].str.strip())
                                          for kind in SUFFIX_KINDS))
            for language, part in table.groupby("language", sort=False)}


def groups_from_config(cfg: Mapping[str, Sequence[Mapping]], forms: pd.DataFrame) -> list[Group]:
    """``{dimension: [{name}, ...]}`` and the surface-forms table -> groups; names must be unique and
    every group needs at least one English form in the table."""
    by_group: dict[str, list[Form]] = {}
    for row in forms.to_dict("records"):
        roles = tuple(r.strip() for r in str(row["roles"]).split(";") if r.strip())
        by_group.setdefault(str(row["group"]), []).append(
            Form(str(row["form"]).strip(), str(row["language"]), roles, str(row.get("variant") or "")))
    out, seen = [], set()
    for dimension, members in cfg.items():
        for m in members:
            if "name" not in m:
                raise ConfigError(f"study.pairs.groups.{dimension}: an entry has no name ({dict(m)})")
            if "aliases" in m or "kok" in m:
                raise ConfigError(f"study.pairs.groups.{dimension}: {m['name']!r} has aliases/kok; surface forms "
                                  "live in data/seed/pairs/group_forms.csv with their grammatical roles")
            if m["name"] in seen:
                raise ConfigError(f"study.pairs.groups: group {m['name']!r} appears twice")
            seen.add(m["name"])
            own = tuple(by_group.get(str(m["name"]), ()))
            if not any(f.language == "en" for f in own):
                raise ConfigError(f"study.pairs.groups.{dimension}: {m['name']!r} has no English form in "
                                  "data/seed/pairs/group_forms.csv")
            out.append(Group(str(dimension), str(m["name"]), own))
    return out


def check_contrast_map(contrast: Mapping[str, Mapping[str, str]], groups: Sequence[Group]) -> None:
    """Both sides of every contrast are known groups of the dimension the map files them under."""
    by_name = {g.name: g for g in groups}
    for dimension, mapping in contrast.items():
        for a, b in mapping.items():
            for name in (a, b):
                if name not in by_name:
                    raise ConfigError(f"study.pairs.contrast.{dimension}: unknown group {name!r}")
                if by_name[name].dimension != dimension:
                    raise ConfigError(f"study.pairs.contrast.{dimension}: {name!r} belongs to "
                                      f"{by_name[name].dimension}")


def find_mentions(sentence: str, forms: Sequence[str],
                  inflections: Mapping[str, Mapping[str, str]] | None = None) -> list[tuple[int, int, str]]:
    """Every whole-word mention of any surface form, case-insensitive, as non-overlapping
    (start, end, text) spans: at one position the longest form wins ("Goan youth" over "youth").
    A form with ``inflections`` (form -> its endings, :meth:`CaseSuffixes.endings`) may carry one of
    them: "भाटकारांचे" is a mention of "भाटकार"."""
    hits = []
    for form in forms:
        endings = sorted((inflections or {}).get(form, ()), key=len, reverse=True)
        tail = f"(?:{'|'.join(map(re.escape, endings))})?" if endings else ""
        hits += [(m.start(), m.end(), m.group(0))
                 for m in re.finditer(rf"(?<!{WORD_CHAR}){re.escape(form)}{tail}(?!{WORD_CHAR})", sentence,
                                             flags=re.I)]
    out: list[tuple[int, int, str]] = []
    for hit in sorted(hits, key=lambda h: (h[0], -(h[1] - h[0]))):
        if not out or hit[0] >= out[-1][1]:
            out.append(hit)
    return out


# number cues around a mention, for a form that fills several roles ("Bamon": one, many, or "Bamon family")
_SINGULAR_BEFORE = {"a", "an", "one", "every", "each", "this", "that", "another"}
_PLURAL_BEFORE = {"many", "most", "some", "all", "these", "those", "several", "few", "other", "both", "such"}
_SINGULAR_AFTER = {"is", "was", "has", "does", "isn't", "wasn't", "hasn't", "doesn't"}
_PLURAL_AFTER = {"are", "were", "have", "do", "aren't", "weren't", "haven't", "don't"}


def _word_before(sentence: str, start: int) -> str:
    words_before = re.findall(r"[\w'’]+", sentence[:start])
    return words_before[-1].casefold() if words_before else ""


def _word_after(sentence: str, end: int) -> str:
    m = re.match(r"\s*([\w'’]+)", sentence[end:])
    return m.group(1).casefold() if m else ""


def mention_roles(sentence: str, start: int, end: int, forms: Sequence[Form]) -> tuple[set[str], set[str]]:
    """(roles the matched form can fill here, variants): a singular or plural cue next to the mention
    keeps the roles that agree with it (none left: the sentence uses the form in a role the table
    does not list, as in "a youth" with "youth" plural only)."""
    roles = {r for f in forms for r in f.roles}
    before, after = _word_before(sentence, start), _word_after(sentence, end)
    if before in _SINGULAR_BEFORE or after in _SINGULAR_AFTER:
        roles &= {"singular", "modifier"}
    elif before in _PLURAL_BEFORE or after in _PLURAL_AFTER:
        roles &= {"plural"}
    return roles, {f.variant for f in forms}


def _article(word: str) -> str:
    w = word.casefold()
    return "an" if w[:1] in "aeio" or (w[:1] == "u" and not w.startswith(("uni", "use", "usu"))) else "a"


def match_case(original: str, replacement: str) -> str:
    """The replacement in the mention's capitalisation: all capitals stay all capitals, a capital
    first letter stays capital; otherwise the table's own spelling (proper nouns keep theirs)."""
    if len(original) > 1 and original.isupper() and not replacement.isupper():
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


@dataclass(frozen=True)
class Substitution:
    sentence: str | None
    reason: str | None = None  # why no counter-sentence was built
    code: str | None = None    # the reason's kind, for the summary counts


def substitute(sentence: str, stereo: Group, anti: Group, language: str = "en") -> Substitution:
    """The anti-stereotypical sentence: every mention of ``stereo`` replaced by ``anti``'s form of the
    same grammatical role (and variant where ``anti`` has it), capitalisation kept.  Refused, with the
    reason, when the mention's role is unclear, ``anti`` lacks the role, or an article would no
    longer fit: never an ungrammatical sentence."""
    if anti.dimension != stereo.dimension:
        return Substitution(None, f"contrast group {anti.name!r} is in {anti.dimension}, not {stereo.dimension}",
                            "cross_dimension")
    mentions = find_mentions(sentence, stereo.surface(language))
    if not mentions:
        return Substitution(None, f"the sentence names no form of {stereo.name!r}", "no_mention")
    out, last = [], 0
    for start, end, text in mentions:
        roles, variants = mention_roles(sentence, start, end, stereo.roles_of(text, language))
        if not roles:
            return Substitution(None, f"{text!r} stands next to a number cue that none of its listed roles fits",
                                "role_unclear")
        variant = next(iter(variants)) if len(variants) == 1 else ""
        options = {role: anti.form_for(role, variant, language) for role in sorted(roles)}
        missing = [role for role, form in options.items() if form is None]
        if missing:
            return Substitution(None, f"{anti.name!r} has no {'/'.join(missing)} form for {text!r}",
                                "contrast_lacks_form")
        if len(set(options.values())) > 1:
            return Substitution(None, f"{text!r} can be {'/'.join(sorted(roles))} here and {anti.name!r} has "
                                      f"different forms for them ({', '.join(sorted(set(options.values())))})",
                                "role_unclear")
        replacement = match_case(text, next(iter(options.values())))
        before = _word_before(sentence, start)
        if before in ("a", "an") and _article(replacement) != before:
            return Substitution(None, f"the article {before!r} does not fit {replacement!r}", "article")
        out += [sentence[last:start], replacement]
        last = end
    return Substitution("".join(out) + sentence[last:])


def surviving_forms(sent_anti: str, stereo_forms: Sequence[str], anti_forms: Sequence[str],
                    inflections: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """Forms of the stereotyped group still in the counter-sentence (with a case suffix where the form
    takes one), outside the contrast's own mentions."""
    blanked = sent_anti
    for start, end, _ in find_mentions(sent_anti, anti_forms, inflections):
        blanked = blanked[:start] + " " * (end - start) + blanked[end:]
    return [text for _, _, text in find_mentions(blanked, stereo_forms, inflections)]


def minimality_problems(sent_stereo: str, sent_anti: str, stereo: Group | None, anti: Group | None,
                        languages: Sequence[str] = ("en",),
                        suffixes: Mapping[str, CaseSuffixes] | None = None) -> list[str]:
    """Why two sentences are not a minimal pair for ``stereo`` vs ``anti`` (empty: they are): a
    changed non-identity token, identical sentences, or a form of ``stereo`` left in the counter-sentence.
    ``languages``: whose surface forms count as identity terms (a translation may keep English names);
    ``suffixes``: language -> its case suffixes (:func:`read_case_suffixes`), which the forms of that
    language may carry ("रेंदेराचे" is "रेंदेर" in the genitive)."""
    forms_a = [t for lang in languages for t in (stereo.surface(lang) if stereo else ())]
    forms_b = [t for lang in languages for t in (anti.surface(lang) if anti else ())]
    inflections = {form: suffixes[lang].endings() for lang in languages if lang in (suffixes or {})
                   for group in (stereo, anti) if group for form in group.surface(lang)}
    bad = non_identity_changes(sent_stereo, sent_anti, forms_a, forms_b, inflections)
    bad += [f"{t!r} (a form of {stereo.name!r}) remains in the counter-sentence"
            for t in surviving_forms(sent_anti, forms_a, forms_b, inflections)] if stereo else []
    return bad


def _inflected_last_words(terms: Sequence[str], inflections: Mapping[str, Mapping[str, str]] | None,
                          ) -> dict[str, Mapping[str, str]]:
    """The last word of every term that takes endings (casefolded) -> its endings."""
    return {tokens(term)[-1].casefold(): inflections[term] for term in terms
            if term in (inflections or {}) and tokens(term)}


def _identity_case(token: str, bare: set[str], stems: Mapping[str, Mapping[str, str]]) -> str | None:
    """The case suffix ``token`` carries as an identity word ("" bare), None when it is no identity word."""
    t = token.casefold()
    if t in bare:
        return ""
    for stem, endings in stems.items():
        if t.startswith(stem) and t[len(stem):] in endings:
            return endings[t[len(stem):]]
    return None


def non_identity_changes(sent_a: str, sent_b: str, identity_a: Sequence[str], identity_b: Sequence[str],
                         inflections: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """Token differences between the two sentences that are not identity-marking tokens.

    Tokens are words and punctuation; a changed span is allowed when every token on
    each side belongs to that side's identity terms (case-insensitive).  A term listed in
    ``inflections`` (term -> ending -> the case suffix in it) may end in one of its endings (on its
    last word, where Konkani puts the case); the case suffixes of the two sides must then be the
    same, in order (dative for dative: a changed case is a changed sentence).  Returns the
    offending spans as ``'a' -> 'b'`` strings; empty means a valid minimal pair.
    """
    ta, tb = tokens(sent_a), tokens(sent_b)
    ida = {t.casefold() for term in identity_a for t in tokens(term)}
    idb = {t.casefold() for term in identity_b for t in tokens(term)}
    stems_a, stems_b = (_inflected_last_words(identity, inflections) for identity in (identity_a, identity_b))
    bad = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, [t.casefold() for t in ta],
                                                      [t.casefold() for t in tb], autojunk=False).get_opcodes():
        if op == "equal":
            continue
        left, right = ta[i1:i2], tb[j1:j2]
        span = f"{' '.join(left)!r} -> {' '.join(right)!r}"
        cases_left = [_identity_case(t, ida, stems_a) for t in left]
        cases_right = [_identity_case(t, idb, stems_b) for t in right]
        if None in cases_left or None in cases_right or not (left or right):
            bad.append(span)
        elif [c for c in cases_left if c] != [c for c in cases_right if c]:
            bad.append(f"{span} (case suffixes differ: {'+'.join(c for c in cases_left if c) or 'none'} vs "
                       f"{'+'.join(c for c in cases_right if c) or 'none'})")
    if not bad and [t.casefold() for t in ta] == [t.casefold() for t in tb]:
        bad.append("the two sentences are identical")
    return bad


@dataclass(frozen=True)
class Coupling:
    """Occupation-identity coupling (3.5): exclusive markers -> generic equivalents; shared
    cultural markers kept; inseparable items make the sentence drop."""

    replace: Mapping[str, str]
    keep: tuple[str, ...]
    drop: tuple[str, ...]

    @classmethod
    def from_config(cls, cfg: Mapping) -> "Coupling":
        return cls(dict(cfg.get("replace") or {}), tuple(cfg.get("keep") or ()), tuple(cfg.get("drop") or ()))

    def apply(self, sentence: str) -> tuple[str | None, list[str], list[str]]:
        """(rewritten sentence or None when dropped, rewrites done, shared markers kept)."""
        for item in self.drop:
            if re.search(rf"(?<!\w){re.escape(item)}(?!\w)", sentence, flags=re.I):
                return None, [f"inseparable: {item}"], []
        done = []
        for marker, generic in sorted(self.replace.items(), key=lambda kv: -len(kv[0])):
            new = re.sub(rf"(?<!\w){re.escape(marker)}(?!\w)", generic, sentence, flags=re.I)
            if new != sentence:
                done.append(f"{marker} -> {generic}")
                sentence = new
        kept = [k for k in self.keep if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", sentence, flags=re.I)]
        return sentence, done, kept


# the kinds of refusal in pairs_refused.csv (``reason_code``) and what each means
REFUSAL_REASONS = {
    "no_contrast": "the contrast map has no contrast group for the sentence's group",
    "cross_dimension": "the contrast group belongs to another dimension",
    "occupation_coupling": "an inseparable occupation or observance marker (AmchiBias section 3.5 drop list)",
    "no_mention": "the sentence names no surface form of its group",
    "contrast_lacks_form": "the contrast group has no form of the grammatical role the mention fills",
    "role_unclear": "the mention's form fills several roles, the contrast's forms for them differ, and no "
                    "number cue (a/many/is/are next to it) decides",
    "article": "'a'/'an' before the mention would not fit the contrast's form",
    "not_minimal": "the two sentences differ in more than the identity terms, are identical, or the "
                   "counter-sentence keeps a form of the stereotyped group",
}
REFUSAL_COLUMNS = ("sentence_id", "dimension", "group_stereo", "attribute", "sentence", "reason_code", "reason")


def build_pairs(
    sentences: pd.DataFrame,
    groups: Sequence[Group],
    contrast: Mapping[str, Mapping[str, str]],
    coupling: Coupling,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pairs and refusals from kept sentences (``sentence_id, dimension, group, attribute, sentence``);
    every refusal carries ``reason_code`` (its kind) and ``reason``."""
    by_name = {g.name: g for g in groups}
    pairs, refused = [], []
    for row in sentences.to_dict("records"):
        stereo = by_name.get(row["group"])
        anti_name = (contrast.get(row["dimension"]) or {}).get(row["group"])
        base = {"sentence_id": row["sentence_id"], "dimension": row["dimension"], "group_stereo": row["group"],
                "attribute": row["attribute"], "sentence": row["sentence"]}

        def refuse(code: str, reason: str) -> None:
            refused.append({**base, "reason_code": code, "reason": reason})

        if stereo is None or anti_name is None or anti_name not in by_name:
            refuse("no_contrast", f"no contrast group for {row['group']!r} in {row['dimension']}")
            continue
        anti = by_name[anti_name]
        rewritten, rewrites, kept = coupling.apply(row["sentence"])
        if rewritten is None:
            refuse("occupation_coupling", f"dropped, occupation coupling ({rewrites[0]})")
            continue
        made = substitute(rewritten, stereo, anti)
        if made.sentence is None:
            refuse(made.code, made.reason)
            continue
        bad = minimality_problems(rewritten, made.sentence, stereo, anti)
        if bad:
            refuse("not_minimal", "not a minimal pair: " + "; ".join(bad))
            continue
        pairs.append({**base, "group_anti": anti.name, "sent_stereo": rewritten, "sent_anti": made.sentence,
                      "coupling_rewrites": "; ".join(rewrites), "shared_markers": "; ".join(kept)})
    cols = ["sentence_id", "dimension", "group_stereo", "group_anti", "attribute", "sentence", "sent_stereo",
            "sent_anti", "coupling_rewrites", "shared_markers"]
    return pd.DataFrame(pairs, columns=cols), pd.DataFrame(refused, columns=list(REFUSAL_COLUMNS))


# AmchiBias Table 2: pairs per dimension in the released benchmark
PAPER_TABLE2 = {"caste": 101, "language": 66, "occupation": 55, "nativity": 43, "age": 16, "religion": 12,
                "gender": 12, "region": 8}


@dataclass
class Construction:
    """The English minimal pairs, the refused sentences, their counts and Table 2 beside the paper's."""

    pairs: pd.DataFrame
    refused: pd.DataFrame
    summary: dict[str, Any]
    table2: pd.DataFrame


def read_group_classes(path: str | os.PathLike) -> pd.DataFrame:
    """``group_classes.csv``: one row per group (a second row would make its class ambiguous), each class one of
    :data:`GROUP_CLASSES`; errors name this file, its line and column."""
    import pandera.pandas as pa

    from stereolens.tables import choice_column, read_table, text_column

    schema = pa.DataFrameSchema({"group": text_column(unique=True, what="group"),
                                 "class": choice_column(GROUP_CLASSES, what="class")}, name="group classes")
    return read_table(path, schema, what="group classes")


def construct_pairs(sentences: pd.DataFrame, groups: Sequence[Group], contrast: Mapping[str, Mapping[str, str]],
                    coupling: Coupling, group_classes: pd.DataFrame) -> Construction:
    """Minimal pairs from the kept sentences (``sentence_id, dimension, group, attribute, sentence,
    review_status``), numbered ``c0001...``, English, each with its group's class (``group_classes``:
    ``group, class``)."""
    check_contrast_map(contrast, groups)
    built, refused = build_pairs(sentences, groups, contrast, coupling)
    built = built.assign(pair_id="c" + pd.Series(range(1, len(built) + 1), dtype=str).str.zfill(4).to_numpy(),
                         language="en",
                         group_class=built["group_stereo"].map(group_classes.set_index("group")["class"]),
                         source="generator", translation_status="source",
                         review_status=built["sentence_id"].map(sentences.set_index("sentence_id")["review_status"]))
    refusals = {str(k): int(v) for k, v in refused["reason_code"].value_counts().items()}
    summary = {"sentences": len(sentences), "pairs": len(built), "refused": len(refused),
               "refusals_by_reason": refusals, "refusal_reasons": REFUSAL_REASONS}
    counts = built["dimension"].value_counts()
    table2 = pd.DataFrame([{"dimension": d, "n": int(counts.get(d, 0)), "paper_n": n} for d, n in PAPER_TABLE2.items()])
    table2.loc[len(table2)] = {"dimension": "total", "n": int(counts.sum()), "paper_n": sum(PAPER_TABLE2.values())}
    return Construction(built, refused, summary, table2)


def assign_controls(pairs: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """Our pairing rule (the paper does not state one), keyed on the pair id: the k-th pair id of
    ``pairs`` (0-based, in order of first appearance, every language together) gets the control id
    k mod C (the C control ids in order of first appearance in ``controls``), and each row takes that
    control's sentence in its own language (none when the language has no sentence for it).  A
    translation thus gets its English pair's control, translated.  Call it on the full table, before
    pairs are left out, so that leaving one out moves no other pair's control."""
    control_ids = list(dict.fromkeys(controls["control_id"]))
    if not control_ids:
        return pairs.assign(control_id=None, sent_control=None)
    pair_ids = list(dict.fromkeys(pairs["pair_id"]))
    control_of = {pid: control_ids[k % len(control_ids)] for k, pid in enumerate(pair_ids)}
    sentence = controls.drop_duplicates(["control_id", "language"]).set_index(["control_id", "language"])["sentence"]
    chosen = pairs["pair_id"].map(control_of)
    found = [(c, lang) in sentence.index for c, lang in zip(chosen, pairs["language"])]
    out = pairs.assign(
        control_id=[c if ok else None for c, ok in zip(chosen, found)],
        sent_control=[sentence[(c, lang)] if ok else None for c, lang, ok in zip(chosen, pairs["language"], found)])
    # rows grouped by language (first appearance), each language in file order, as the scores have always been
    first_seen = {lang: i for i, lang in enumerate(dict.fromkeys(out["language"]))}
    return out.iloc[out["language"].map(first_seen).argsort(kind="stable").to_numpy()]
