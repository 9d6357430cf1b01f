"""Timelines of printed scenarios: crash points, random kills, single winner, races,
duplicate send, schedules, the model checker's shortest runs and jobs.threads.

These properties print their counterexample as numbered English steps (see each
property's failure message). Until they send it as structured data, the report reads
the text with a few plain rules and says so in the picture's caption: a step belongs
to the worker it names (``A``, ``B``, ``r1``, ``d1``, ``w2``: a capital letter alone or
a letter and digits, outside quotes), or to the owner of the queue call it prints
(``claim('w2', ...)``, ``finish({... 'owner': 'w2' ...})``, read with ``ast``), or to
the child process or the receiver it mentions, else to the queue. Its kind (SIGKILL,
commit, send, claim, ...) comes from its words. The check that failed is drawn after
the last step, or at the step the message names (``step 5 starts from``).
"""

from __future__ import annotations

import ast
import re

from leasecheck.report.timeline import Disagreement, Mark, Tick, Timeline, headline
from leasecheck.report.trace import ScenarioStep, Trace

__all__ = ["scenario_timeline"]

QUEUE, CLOCK = "queue", "clock"
_QUOTED = re.compile(r"(?<!\w)'[^']*'|\"[^\"]*\"")
_ACTOR = re.compile(r"(?<![\w=#.-])([A-Z]|[a-z]\d{1,3}|P\d{1,3})(?![\w=(.-])")
_CALL = re.compile(r"\b(claim|finish|enqueue|redrive|poll|complete|fail|submit|run_file)\(")
_KINDS = (
    ("kill", ("SIGKILL", "killed", "kill #")),
    ("clock", ("clock moves",)),
    ("commit", ("commit",)),
    ("send", ("send", "resend")),
    ("claim", ("claim", "poll")),
    ("result", ("finish", "complete", "fail(", "returned", "->")),
    ("enqueue", ("enqueue", "submit", "holds", "state")),
)
_STEP_NAMED = re.compile(r"\bstep (\d+) starts from\b")
_TIME = re.compile(r"\bt=(\d+)")


def _kind(text: str) -> str:
    return _word(text)[0]


def _word(text: str) -> tuple[str, str]:
    """The step's kind and the word that gave it away."""
    for kind, words in _KINDS:
        for word in words:
            if word in text:
                return kind, word.strip("(#- >")
    return "note", ""


def _label(kind: str, text: str) -> str:
    call = _CALL.search(text)
    if kind == "kill":
        return "SIGKILL"
    if kind == "clock":
        time = _TIME.search(text)
        return f"t={time.group(1)}" if time else "clock"
    if call:
        return f"{call.group(1)}(…)"
    if kind not in ("note", "enqueue"):
        return _word(text)[1]
    words = _QUOTED.sub("…", text).split()
    return " ".join(words[:3]) + (" …" if len(words) > 3 else "")


def _call_owner(text: str) -> str | None:
    """The worker a printed queue call acts for, read with ``ast`` (never evaluated)."""
    match = _CALL.search(text)
    if not match:
        return None
    source = _balanced(text[match.start() :])
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    values = [*node.args, *(k.value for k in node.keywords if k.arg in ("owner", "worker_id"))]
    for value in values:
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        if isinstance(literal, dict) and isinstance(literal.get("owner"), str):
            return str(literal["owner"])
        if isinstance(literal, str) and match.group(1) in ("claim", "poll", "run_file"):
            return literal
    return None


def _balanced(text: str) -> str:
    """``name(...)`` up to its closing parenthesis (quotes respected)."""
    depth, quote = 0, ""
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return text[: index + 1]
    return text


def _lane(text: str) -> str:
    bare = _QUOTED.sub("", text)
    if _kind(text) == "clock":
        return CLOCK
    found = _ACTOR.findall(bare)
    if found:
        return str(found[0])
    if "child" in bare:
        return "child process"
    if "receiver" in bare:
        return "receiver"
    return _call_owner(text) or QUEUE


def _marks(step: ScenarioStep) -> list[Mark]:
    parts = [part for part in step.text.split("; ") if part.strip()]
    lanes = [_lane(part) for part in parts]
    if len(set(lanes)) <= 1:
        parts, lanes = [step.text], [lanes[0] if lanes else QUEUE]
    detail = "\n".join([f"{step.number}. {step.text}", *step.more])
    return [
        Mark(lane, step.number, _label(_kind(part), part), _kind(part), step.number, detail)
        for part, lane in zip(parts, lanes, strict=True)
    ]


def scenario_timeline(trace: Trace) -> Timeline:
    """Lanes per actor, one column per numbered step, the failed check after the last."""
    marks: list[Mark] = []
    for step in trace.scenario:
        found = _marks(step)
        if step.text.startswith(("it ", "It ")) and marks:  # "it is SIGKILLed": the last actor
            found = [_moved(mark, marks[-1].lane) for mark in found]
        marks += found
    queue = [QUEUE] if any(m.lane == QUEUE for m in marks) or not marks else []
    lanes = _ordered([CLOCK] if any(m.lane == CLOCK for m in marks) else [], queue, marks)
    ticks = [Tick(s.number, f"#{s.number}", _time_note(s.text)) for s in trace.scenario]
    named = next(
        (_STEP_NAMED.search(line) for line in trace.message if _STEP_NAMED.search(line)), None
    )
    last = len(trace.scenario)
    at = float(named.group(1)) if named else last + 1.0
    if not named:
        ticks.append(Tick(at, "check"))
    lane = _blamed(trace, lanes) or (marks[-1].lane if marks else QUEUE)
    disagreement = Disagreement(lane, at, int(at) if named else None, headline(trace))
    caption = (
        "One column per step the property printed, one lane per worker it names; read from "
        "the printed scenario. The red line marks the check that failed."
    )
    return Timeline(
        f"{trace.property}: the scenario that breaks it", "steps", tuple(lanes), tuple(ticks),
        (), tuple(marks), disagreement, caption,
    )  # fmt: skip


def _moved(mark: Mark, lane: str) -> Mark:
    return Mark(lane, mark.at, mark.label, mark.kind, mark.step, mark.detail)


def _ordered(first: list[str], then: list[str], marks: list[Mark]) -> list[str]:
    lanes = [*first, *then]
    for mark in marks:
        if mark.lane not in lanes:
            lanes.append(mark.lane)
    return lanes


def _time_note(text: str) -> str:
    found = _TIME.findall(text)
    return f"t={found[0]}" if len(found) == 1 else ""


def _blamed(trace: Trace, lanes: list[str]) -> str | None:
    """The worker the failure message names last, outside quotes, in its first line naming
    one ("leased to A ... and ... to B": B is the second winner)."""
    workers = [lane for lane in lanes if lane not in (QUEUE, CLOCK)]
    for line in trace.message:
        bare = _QUOTED.sub("", line)
        named = [(m.start(), m.group(1)) for m in _ACTOR.finditer(bare) if m.group(1) in workers]
        if named:
            return max(named)[1]
    return None
