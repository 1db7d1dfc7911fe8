"""Drive a real Label Studio through its HTTP API: start it on loopback, create the project's four
annotation projects from the project's own task files, submit annotations as several users, export.

Used by ``make label-studio-test`` (tests/annotation/label_studio/test_round_trip.py) and by
``python tests/annotation/label_studio/driver.py --record [DIR]`` (re-records tests/annotation/fixtures/label_studio/,
or records into DIR to compare with ``compare_exports.py DIR``).
Label Studio lives in its own venv (``LABEL_STUDIO_VENV``, default ``.venv-label-studio``): its pins
would fight the project's.  Items are made up for the test and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

LABEL_STUDIO_VERSION = "1.23.2"
ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "annotation" / "fixtures" / "label_studio"
FORMATS = {"JSON": "json", "JSON_MIN": "min.json", "CSV": "csv"}
LEAD = ("lead@example.org", "lead-pass-0001")
ANNOTATORS = (("ann-a@example.org", "ann-a-pass-0001"), ("ann-b@example.org", "ann-b-pass-0001"))


def label_studio_binary(venv: str | os.PathLike | None = None) -> Path:
    """The ``label-studio`` command of the given venv, installing Label Studio there first if it is missing."""
    venv = Path(venv or os.environ.get("LABEL_STUDIO_VENV", ROOT / ".venv-label-studio"))
    binary = venv / "bin" / "label-studio"
    if not binary.exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"label-studio=={LABEL_STUDIO_VERSION}"], check=True)
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabelStudio:
    """A Label Studio server on 127.0.0.1 with a throw-away data directory; stopped (the process we started,
    by its id) on exit.  ``--internal-host`` is what binds loopback: ``--host`` alone listens everywhere."""

    def __init__(self, binary: Path, *, startup_s: float = 300):
        self.binary, self.startup_s = binary, startup_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "LabelStudio":
        self.data_dir = tempfile.mkdtemp(prefix="label-studio-")
        env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": self.data_dir, "LABEL_STUDIO_USERNAME": LEAD[0],
               "LABEL_STUDIO_PASSWORD": LEAD[1], "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "false",
               "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": ""}
        self.log = open(Path(self.data_dir) / "server.log", "w")
        self.process = subprocess.Popen(
            [str(self.binary), "start", "--internal-host", "127.0.0.1", "--port", str(self.port), "--no-browser",
             "--data-dir", self.data_dir], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_s
        import requests

        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Label Studio exited ({self.process.returncode}); log: {self.log.name}")
            try:
                if requests.get(self.url + "/api/version", timeout=5).status_code in (200, 401):
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"Label Studio did not answer on {self.url} within {self.startup_s:.0f}s")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def session(self, email: str, password: str, *, signup: bool = False):
        """A logged-in session (CSRF header set); ``signup`` registers the user first."""
        import requests

        s = requests.Session()
        if signup:
            s.get(self.url + "/user/signup/")
            s.post(self.url + "/user/signup/", data={"email": email, "password": password, "how_find_us": "",
                                                    "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
                   headers={"Referer": self.url + "/user/signup/"})
            s = requests.Session()
        s.get(self.url + "/user/login/")
        s.post(self.url + "/user/login/", data={"email": email, "password": password,
                                                "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
               headers={"Referer": self.url + "/user/login/"})
        s.headers.update({"X-CSRFToken": s.cookies.get("csrftoken", ""), "Referer": self.url})
        who = s.get(self.url + "/api/current-user/whoami")
        if who.status_code != 200:
            raise RuntimeError(f"cannot log in to Label Studio as {email}: {who.status_code} {who.text[:200]}")
        s.user_id = who.json()["id"]
        return s


# ------------------------------------------------------------ the project's own task files


def task_files(out: Path) -> dict[str, dict[str, Path]]:
    """The four task kinds the studies export, written by the studies' own export code on made-up items."""
    from stereolens.annotation.scales import YES_NO
    from stereolens.annotation.tasks import export_tasks
    from stereolens.studies.pairs.review import export_review
    from stereolens.studies.pairs.validation import INSTRUCTIONS as TUPLE_INSTRUCTIONS
    from stereolens.studies.pcs.human_validation import INSTRUCTIONS as PCS_INSTRUCTIONS
    from stereolens.studies.pcs.human_validation import PAIRWISE_SCALE, TASK_COLUMNS
    from stereolens.studies.stereo import validation as v
    from stereolens.studies.stereo.prompts import load_prompts

    files = {}
    pcs = pd.DataFrame({"item_id": ["pv-1", "pv-2", "pv-3"], "language": ["hi"] * 3,
                        "scenario": ["(made up) A scenario."] * 3,
                        "response_1": ["(made up) Answer one.", "(made up) Yes.", "(made up) No."],
                        "response_2": ["(made up) Answer two.", "(made up) No.", "(made up) Yes."]})
    pcs["text"] = "Scenario: " + pcs["scenario"] + "\nResponse 1: " + pcs["response_1"] + "\nResponse 2: " + pcs["response_2"]
    files["pairwise_tasks"] = export_tasks(pcs[list(TASK_COLUMNS)], PAIRWISE_SCALE, PCS_INSTRUCTIONS, out,
                                           name="pairwise_tasks")
    tuples = pd.DataFrame({"item_id": ["Bamon::Caste", "Kharvi::Fishing", "Render::Toddy"],
                           "text": ["Bamon: Caste", "Kharvi: Fishing", "Render: Toddy"]})
    files["tuple_tasks"] = export_tasks(tuples, YES_NO, TUPLE_INSTRUCTIONS.format(region="Goa"), out, name="tuple_tasks")
    sentences = pd.DataFrame({"sentence_id": ["s1", "s2", "s3"], "group": ["Bamon"] * 3, "attribute": ["Caste"] * 3,
                              "sentence": ["(made up) The Bamon family lived here.", "(made up) Bamon Bamon.",
                                           "(made up) A Bamon priest read."]})
    files["sentence_review"] = export_review(sentences, out)
    prompts = load_prompts(ROOT / "data" / "seed" / "stereo" / "prompts.yaml", "es")
    stereotypes = pd.DataFrame({"stereotype_id": ["Mexico-gender-001", "Mexico-gender-002", "Mexico-gender-003"],
                                "country": ["Mexico"] * 3, "category": ["gender"] * 3, "target": ["mujeres"] * 3,
                                "stereotype": ["(inventado) uno", "(inventado) dos", "(inventado) tres"],
                                "examples": ['["(inventado) ejemplo"]'] * 3, "source": ["machine"] * 3})
    items = v.questionnaire(stereotypes, prompts)
    scale = v.likert_scale([t.format(country="<country>") for t in prompts.likert_display])
    files["validation"] = export_tasks(items, scale, "¿Cuál de estas afirmaciones describe mejor la validez del "
                                       "estereotipo?", out, name="validation", item_choices=v.option_texts(items, prompts))
    return files


# (task position, choice position, text areas) per user; the lead's second user answers task 0 twice,
# the later answer being the one that counts
ANSWERS = {
    "lead": [(0, 0, {}), (1, 1, {}), (2, 2, {})],
    "a": [(0, 1, {}), (1, 1, {}), (2, 0, {})],
    "b": [(0, 2, {}), (1, 0, {}), (2, 1, {}), (0, 0, {})],
}
REVIEW_ANSWERS = {  # sentence review: keep / rewrite (with text) / remove (with reason)
    "lead": [(0, 0, {}), (1, 1, {"rewrite": "(made up) The Bamon family ate.", "reason": "repetition"}),
             (2, 2, {"reason": "template-like"})],
    "a": [(0, 0, {}), (1, 2, {"reason": "incoherent"}), (2, 0, {})],
    "b": [(0, 2, {"reason": "restates the attribute"}), (1, 1, {"rewrite": "(made up) A Bamon wrote.", "reason": "odd"}),
          (2, 0, {}), (0, 0, {})],
}


def _choice_texts(config_xml: str, task: dict) -> list[str]:
    import xml.etree.ElementTree as ET

    if "choices" in task["data"]:
        return [c["value"] for c in task["data"]["choices"]]
    return [c.get("value") for c in ET.fromstring(config_xml).iter("Choice")]


def annotate_and_export(ls: LabelStudio, files: dict[str, dict[str, Path]], out: Path) -> dict[str, dict]:
    """One project per task kind; every user annotates through the API; JSON, JSON-MIN and CSV exports under
    ``out``.  Returns, per kind, the export paths and the Label Studio user ids by role."""
    lead = ls.session(*LEAD)
    users = {"lead": lead, "a": ls.session(*ANNOTATORS[0], signup=True), "b": ls.session(*ANNOTATORS[1], signup=True)}
    made = {}
    for kind, paths in files.items():
        config = paths["label_config"].read_text(encoding="utf-8")
        project = lead.post(ls.url + "/api/projects", json={"title": kind, "label_config": config})
        project.raise_for_status()
        pid = project.json()["id"]
        tasks = json.loads(paths["label_studio"].read_text(encoding="utf-8"))
        lead.post(f"{ls.url}/api/projects/{pid}/import", json=tasks).raise_for_status()
        listed = lead.get(f"{ls.url}/api/tasks", params={"project": pid, "page_size": 100}).json()["tasks"]
        listed = sorted(listed, key=lambda t: t["id"])
        answers = REVIEW_ANSWERS if kind == "sentence_review" else ANSWERS
        for role, session in users.items():
            for position, choice, texts in answers[role]:
                task = listed[position]
                texts_shown = _choice_texts(config, task)
                chosen = texts_shown[choice % len(texts_shown)]
                result = [{"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": [chosen]}}]
                result += [{"from_name": name, "to_name": "text", "type": "textarea", "value": {"text": [text]}}
                           for name, text in texts.items()]
                r = session.post(f"{ls.url}/api/tasks/{task['id']}/annotations", json={"result": result})
                r.raise_for_status()
                time.sleep(0.05)  # distinct updated_at stamps
        exports = {}
        for fmt, suffix in FORMATS.items():
            r = lead.get(f"{ls.url}/api/projects/{pid}/export", params={"exportType": fmt})
            r.raise_for_status()
            exports[fmt] = out / f"{kind}.{suffix}"
            exports[fmt].write_bytes(r.content)
        made[kind] = {"exports": exports, "users": {role: s.user_id for role, s in users.items()}}
    return made


# rounds left unfinished, on the tuple tasks: (task position, choice position or None for a skip) per user.
# "unfinished": the first task answered by the lead and user a and skipped by user b, the second only skipped
# (by user b), the third untouched; "skipped": user b skipped every task and nobody answered
UNFINISHED = {"lead": [(0, 0)], "a": [(0, 1)], "b": [(0, None), (1, None)]}
SKIPPED = {"lead": [], "a": [], "b": [(0, None), (1, None), (2, None)]}


def annotate_partly_and_export(ls: LabelStudio, files: dict[str, dict[str, Path]], out: Path) -> dict[str, Path]:
    """Two projects on the tuple tasks, annotated as ``UNFINISHED`` and ``SKIPPED`` say, exported in every format:
    as the Export button does (``<title>.<suffix>``: the tasks with at least one annotation, skipped ones
    included) and, for "unfinished", with ``download_all_tasks=true`` too (``unfinished.all.<suffix>``: every
    task, as the API and the SDK offer)."""
    users = {"lead": ls.session(*LEAD), "a": ls.session(*ANNOTATORS[0]), "b": ls.session(*ANNOTATORS[1])}
    paths = files["tuple_tasks"]
    config = paths["label_config"].read_text(encoding="utf-8")
    exports = {}
    for title, plan, modes in (("unfinished", UNFINISHED, (False, True)), ("skipped", SKIPPED, (False,))):
        lead = users["lead"]
        project = lead.post(ls.url + "/api/projects", json={"title": title, "label_config": config})
        project.raise_for_status()
        pid = project.json()["id"]
        tasks = json.loads(paths["label_studio"].read_text(encoding="utf-8"))
        lead.post(f"{ls.url}/api/projects/{pid}/import", json=tasks).raise_for_status()
        listed = sorted(lead.get(f"{ls.url}/api/tasks", params={"project": pid, "page_size": 100}).json()["tasks"],
                        key=lambda t: t["id"])
        for role, session in users.items():
            for position, choice in plan[role]:
                task = listed[position]
                # a skip is what the Skip button sends: no result, was_cancelled
                body = ({"result": [], "was_cancelled": True} if choice is None else
                        {"result": [{"from_name": "label", "to_name": "text", "type": "choices",
                                     "value": {"choices": [_choice_texts(config, task)[choice]]}}]})
                session.post(f"{ls.url}/api/tasks/{task['id']}/annotations", json=body).raise_for_status()
                time.sleep(0.05)
        for fmt, suffix in FORMATS.items():
            for every in modes:
                name = f"{title}.all.{suffix}" if every else f"{title}.{suffix}"
                r = lead.get(f"{ls.url}/api/projects/{pid}/export",
                             params={"exportType": fmt, **({"download_all_tasks": "true"} if every else {})})
                r.raise_for_status()
                exports[name] = out / name
                exports[name].write_bytes(r.content)
    return exports


def save_user_list(ls: LabelStudio, path: Path) -> Path:
    """Label Studio's user list as docs/annotation.md fetches it: the lead's personal access token (the one the
    Account & Settings page shows) is a refresh token, traded for an access token, which reads /api/users."""
    import requests

    lead = ls.session(*LEAD)
    token = lead.post(ls.url + "/api/token/", json={})
    token.raise_for_status()
    access = requests.post(ls.url + "/api/token/refresh", json={"refresh": token.json()["token"]}, timeout=30)
    access.raise_for_status()
    users = requests.get(ls.url + "/api/users", headers={"Authorization": f"Bearer {access.json()['access']}"},
                         timeout=30)
    users.raise_for_status()
    path.write_bytes(users.content)
    return path


def record(out: Path = FIXTURES) -> None:
    """Re-record the committed fixtures: the project's task files, annotated and exported by the real Label Studio.
    Check a recording against the committed one with ``compare_exports.py``."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, LabelStudio(label_studio_binary()) as ls:
        files = task_files(Path(tmp))
        made = annotate_and_export(ls, files, out)
        partly = annotate_partly_and_export(ls, files, out)
        save_user_list(ls, out / "users.json")
        version = ls.session(*LEAD).get(ls.url + "/api/version").json()["release"]
        for kind, paths in files.items():
            shutil.copy(paths["label_config"], out / f"{kind}.label_config.xml")
    write_recorded_with(out, version, made["pairwise_tasks"]["users"])
    print(f"recorded {sum(len(m['exports']) for m in made.values()) + len(partly)} exports and users.json with "
          f"Label Studio {version} in {out}")


def write_recorded_with(out: Path, version: str, users: dict[str, int]) -> None:
    (out / "RECORDED_WITH.json").write_text(json.dumps(
        {"label_studio": version, "recorded": datetime.now(timezone.utc).date().isoformat(),
         "made_by": "tests/annotation/label_studio/driver.py --record", "users": users,
         "items": "made up for the test"}, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"] or len(sys.argv) > 3:
        sys.exit("usage: python tests/annotation/label_studio/driver.py --record [DIR]  (default: the committed fixtures)")
    record(Path(sys.argv[2]) if len(sys.argv) == 3 else FIXTURES)
